"""Runs FedAvg on the toy problem through the engine and saves the history (for subprocess tests).

usage: engine_probe.py OUT.npz SEEDS(comma list) [ROUNDS [KIND]]

KIND "toy" (default): FedAvg on the toy problem; "stream": FedAvg over 100,000 clients whose
data is generated on demand, 8 drawn per round by uniform_sparse.

Imports tests.conftest: run with the repository on PYTHONPATH, as `conftest.device_probe` runs it.
"""

import sys

import jax
import numpy as np

from tests.conftest import toy_setup
from fedjax_bench import engine
from fedjax_bench.algorithms import fedavg


def stream_setup():
  from fedjax_bench import models
  from fedjax_bench.task.build import make_stream_task
  from fedjax_bench.data import stream
  from fedjax_bench.sim import participation, world as world_lib
  n = 100_000
  s = stream.leaf_stream(n, seed=0, num_test=500, num_train_eval=500)
  task = make_stream_task(s, models.make("logreg", num_classes=10, is_image=False))
  world = world_lib.make(participation.uniform_sparse(n, 8), np.full(n, 3, np.int32))
  return task, world


def main(out, seeds, rounds=6, kind="toy"):
  if kind == "stream":
    task, world = stream_setup()
    hp = dict(client_lr=0.05, server_lr=1.0, batch_size=5, sampling="replacement")
  else:
    task, world = toy_setup(num_clients=8, cohort=3, model="mlp")
    hp = dict(client_lr=0.2, server_lr=1.0, batch_size=4)
  result = engine.run(lambda h: fedavg.build(task, world, h), task, hp, seeds=seeds,
                      rounds=rounds, eval_every=3)
  params = jax.tree.leaves(result.state[0].params)
  np.savez(out, devices=jax.device_count(), rounds=result.history.rounds,
           **{f"m_{k}": v for k, v in result.history.metrics.items()},
           **{f"p_{i}": np.asarray(p) for i, p in enumerate(params)})


if __name__ == "__main__":
  main(sys.argv[1], [int(s) for s in sys.argv[2].split(",")],
       *(int(a) for a in sys.argv[3:4]), *sys.argv[4:5])
