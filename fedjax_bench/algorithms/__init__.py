"""Algorithms by name: each module has ``build(task, world, hparams) -> FederatedAlgorithm``."""

from fedjax_bench.algorithms import (area, asfedavg, f3ast, fedau, fedavg, fedavg_all,
                                     fedavg_known, fedawe, fedbuff, fedef, fedvarp, mifa,
                                     mifa_async, sfedavg)
from fedjax_bench.algorithms import fedmax, fednova
from fedjax_bench.algorithms import fedalign
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
    # Asynchronous (spec 002): one round is one server event of the world's clock.
    "area": area,
    "fedbuff": fedbuff,
    "asfedavg": asfedavg,
    "mifa_async": mifa_async,
    "sfedavg": sfedavg,
    # Loss-aware aggregation (spec 003): weights from the losses at the global model.
    "fedmax": fedmax.fedmax,
    "fedmax_k": fedmax.fedmax_k,
    "fedsoftmax": fedmax.fedsoftmax,
    "fednova": fednova,
    # Prioritized FL (spec 004): the objective counts only the priority clients.
    # The fedprox_* names are the same methods with --prox_mu defaulting to 1.
    "fedalign": fedalign.fedalign,
    "fedavg_priority": fedalign.fedavg_priority,
    "fedavg_all_clients": fedalign.fedavg_all_clients,
    "local_model": fedalign.local_model,
    "fedalign_prox": fedalign.fedalign,
    "fedprox_priority": fedalign.fedavg_priority,
    "fedprox_all_clients": fedalign.fedavg_all_clients,
}
# Driven by client update rates, not by --participation.
ASYNCHRONOUS = ("area", "fedbuff", "asfedavg", "mifa_async", "sfedavg")
PRIORITIZED = ("fedalign", "fedavg_priority", "fedavg_all_clients", "local_model",
               "fedalign_prox", "fedprox_priority", "fedprox_all_clients")
PROX = ("fedalign_prox", "fedprox_priority", "fedprox_all_clients")


def get(name: str):
  if name not in ALGORITHMS:
    raise UsageError(f"unknown --algo={name!r}; valid: {', '.join(sorted(ALGORITHMS))}")
  return ALGORITHMS[name]
