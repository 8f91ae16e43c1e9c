"""Algorithms by name: each module has ``build(task, world, hparams) -> FederatedAlgorithm``."""

from fedjax_bench.algorithms import (f3ast, fedau, fedavg, fedavg_all, fedavg_known, fedawe, fedef,
                                     fedvarp, mifa)
from fedjax_bench.errors import UsageError

ALGORITHMS = {
    "fedavg": fedavg,
    "fedavg_all": fedavg_all,
    "fedavg_known": fedavg_known,
    "fedau": fedau,
    "f3ast": f3ast,
    "fedawe": fedawe,
    "mifa": mifa,
    "fedvarp": fedvarp,
    "fedsgd": fedef.fedsgd,
    "fedams": fedef.fedams,
    "fedef_sgd": fedef.fedef_sgd,
    "fedef_ams": fedef.fedef_ams,
}


def get(name: str):
  if name not in ALGORITHMS:
    raise UsageError(f"unknown --algo={name!r}; valid: {', '.join(sorted(ALGORITHMS))}")
  return ALGORITHMS[name]
