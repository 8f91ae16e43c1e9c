"""Runs algorithms with per-client state through the engine and saves their histories, final
server parameters and client states (for the 1-device-against-4 subprocess tests).

usage: client_state_probe.py OUT.npz ALGO[,ALGO...] [RESUMED_ALGO,...]

Each algorithm runs 6 rounds (evaluations every 3) on 10 toy clients, which 4 devices do
not divide (their shards are padded); MIFA on 12, whose final state stays sharded (the
rows of a client leaf one device holds are saved as "NAME/shard_rows"). Each RESUMED_ALGO
also runs 3 rounds saving a checkpoint and then resumes it to 6 rounds; its outputs are
saved under "NAME/resumed_".

Imports tests.conftest: run with the repository on PYTHONPATH, as `conftest.device_probe` runs it.
"""

import sys
from pathlib import Path

import jax
import numpy as np

from tests.conftest import toy_setup
from fedjax_bench import algorithms, engine
from fedjax_bench.sim import participation

COMMON = dict(client_lr=0.2, server_lr=1.0, batch_size=4)
CASES = {
    "mifa": {},
    "fedvarp": {},
    "fedawe": {"fedawe_clip": 0.0},
    "fedau": {"fedau_k": 3},
    "f3ast": {"f3ast_budget": 2, "f3ast_beta": 0.3},
    "fedef_sgd": {"compressor": "sign", "ef_restart_after": 1},
    "area": {"async_delta": 2},
    "fedbuff": {"async_delta": 2},
    "mifa_async": {"async_delta": 2},
    "scaffold": {},
    "feddyn": {"feddyn_alpha": 0.1},
    "ditto": {"ditto_lambda": 0.5},
    "apfl": {"apfl_alpha": 0.5},
    "pfedme": {"pfedme_lambda": 2.0, "pfedme_k": 2},
}

PERSONAL = ("ditto", "apfl", "pfedme")  # scored on each client's own test data


def run(name, rounds, checkpoint=None):
  n = 12 if name == "mifa" else 10
  task, world = toy_setup(num_clients=n, cohort=3,
                          part=participation.bernoulli([0.2 + 0.06 * i for i in range(n)]),
                          holdout=0.3 if name in PERSONAL else 0.0)
  algo = algorithms.get(name)
  common = {k: v for k, v in COMMON.items()
            if k != "server_lr" or algo.kind == algorithms.SYNCHRONOUS}
  hp = algo.Hparams(**{**common, **CASES[name]})
  return engine.run(lambda h: algo.build(task, world, h), task, hp, seeds=[0], rounds=rounds,
                    eval_every=3, checkpoint=checkpoint)


def arrays(prefix, result):
  server, clients = result.state[0], result.state[1]
  out = {f"{prefix}m_{k}": v for k, v in result.history.metrics.items()}
  out.update({f"{prefix}p_{i}": np.asarray(p)
              for i, p in enumerate(jax.tree.leaves(server.params))})
  out.update({f"{prefix}c_{i}": np.asarray(c) for i, c in enumerate(jax.tree.leaves(clients))})
  leaf = jax.tree.leaves(clients)[0]
  out[f"{prefix}shard_rows"] = max(s.data.shape[1] for s in leaf.addressable_shards)
  return out


def main(out, names, resumed=""):
  saved = {"devices": jax.device_count()}
  for name in names:
    saved.update(arrays(f"{name}/", run(name, 6)))
    if name in resumed.split(","):
      path = str(Path(out).with_suffix(f".{name}.ckpt"))
      ckpt = lambda again: engine.Checkpointing(path, fingerprint={"algo": name},
                                                resume=again)
      run(name, 3, ckpt(False))
      saved.update(arrays(f"{name}/resumed_", run(name, 6, ckpt(True))))
  np.savez(out, **saved)


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2].split(","), *sys.argv[3:4])
