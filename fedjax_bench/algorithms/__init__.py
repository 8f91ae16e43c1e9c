"""Algorithms by name: each module has ``build(task, world, hparams) -> FederatedAlgorithm``."""

from fedjax_bench.algorithms import fedavg
from fedjax_bench.errors import UsageError

ALGORITHMS = {
    "fedavg": fedavg,
}


def get(name: str):
  if name not in ALGORITHMS:
    raise UsageError(f"unknown --algo={name!r}; valid: {', '.join(sorted(ALGORITHMS))}")
  return ALGORITHMS[name]
