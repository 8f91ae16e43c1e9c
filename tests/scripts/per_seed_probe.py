"""Runs a --data_per_seed experiment through the engine and saves its history and final
parameters (for the 1-device-equals-4 test).

usage: per_seed_probe.py OUT.npz SEEDS(comma list)
"""

import sys

import jax
import numpy as np

from fedjax_bench import engine, experiment

# toyfl (generated per seed, pooled, with per-seed test sets) and data-correlated sine
# availability (phi per seed). Few local steps, as engine_probe.py: with ~27 steps a round
# (--local_epochs=1) one parameter differed by 2.8e-6 relative between 1 and 4 devices,
# the engine's vmapped-versus-unvmapped rounding (docs/design.md, "Devices and reproducibility").
CONFIG = dict(algo="fedavg", dataset="toyfl", model="logreg", num_clients=12, alpha=0.3,
              partition_seed=3, availability="sine", availability_period=4, local_steps=3,
              batch_size=16, client_lr=0.1, train_eval_examples=0, data_per_seed=True)


def main(out, seeds):
  cfg = dict(CONFIG)
  exp = experiment.setup(cfg, seeds=seeds)
  result = engine.run(exp.build, exp.task, exp.hparams, seeds=seeds, rounds=3, eval_every=3,
                      run_data=exp.run_data)
  params = jax.tree.leaves(result.state[0].params)
  np.savez(out, devices=jax.device_count(),
           **{f"m_{k}": v for k, v in result.history.metrics.items()},
           **{f"p_{i}": np.asarray(p) for i, p in enumerate(params)})


if __name__ == "__main__":
  main(sys.argv[1], [int(s) for s in sys.argv[2].split(",")])
