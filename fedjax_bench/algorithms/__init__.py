"""Algorithms by name. An algorithm is a module (or namespace) with ``Hparams``, the frozen
settings class it reads (`fedjax_bench.settings`), and ``build(task, world, hparams) ->
FederatedAlgorithm``; one `register` line below makes it a ``--algo`` value, a flag set
and a Python API name."""

import dataclasses
from typing import Callable, Optional

from fedjax_bench.algorithms import (area, asfedavg, f3ast, fedalign, fedau, fedavg, fedavg_all,
                                     fedavg_known, fedawe, fedbuff, feddyn, fedef, fedmax, fednova,
                                     fedprox, fedvarp, mifa, mifa_async, qfedavg, scaffold,
                                     sfedavg)
from fedjax_bench.algorithms import ditto, dp_fedavg
from fedjax_bench.algorithms import fedbn, fedper, fedrep
from fedjax_bench.algorithms import apfl, perfedavg, pfedme
from fedjax_bench.algorithms import fedexp, ifca
from fedjax_bench.algorithms import mime
from fedjax_bench.errors import UsageError
from fedjax_bench.settings import closest

SYNCHRONOUS = "synchronous"    # rounds of a cohort chosen by --participation/--availability
ASYNCHRONOUS = "asynchronous"  # driven by client update rates (the world's clock)
PRIORITIZED = "prioritized"    # samples priority and free clients itself
KINDS = (SYNCHRONOUS, ASYNCHRONOUS, PRIORITIZED)


@dataclasses.dataclass(frozen=True)
class Algorithm:
  name: str
  Hparams: type
  build: Callable
  kind: str = SYNCHRONOUS
  # (hparams, world settings, num_clients, rounds [E]) -> [E] the privacy spent after
  # each (DP-FedAvg's epsilon), or None: not a private algorithm.
  privacy: Optional[Callable] = None


ALGORITHMS: dict[str, Algorithm] = {}
# Called with the name of every algorithm registered from then on.
ON_REGISTER: list[Callable[[str], None]] = []


def register(name: str, module, kind: str = SYNCHRONOUS) -> Algorithm:
  if name in ALGORITHMS:
    raise ValueError(f"algorithm {name!r} is registered twice")
  if kind not in KINDS:
    raise ValueError(f"unknown algorithm kind {kind!r}; valid: {', '.join(KINDS)}")
  ALGORITHMS[name] = Algorithm(name, module.Hparams, module.build, kind,
                               getattr(module, "privacy", None))
  for listener in ON_REGISTER:  # e.g. the command line's flags, made before it registered
    listener(name)
  return ALGORITHMS[name]


register("fedavg", fedavg)
register("fedavg_all", fedavg_all)
register("fedavg_known", fedavg_known)
register("fedau", fedau)
register("f3ast", f3ast)
register("fedawe", fedawe)
register("mifa", mifa)
register("fedvarp", fedvarp)
# Fed-EF (Li & Li): compressed uplinks, with and without error feedback.
register("fedsgd", fedef.fedsgd)
register("fedams", fedef.fedams)
register("fedef_sgd", fedef.fedef_sgd)
register("fedef_ams", fedef.fedef_ams)
# Asynchronous (AREA, Iakovidou & Kim): one round is one server event of the world's clock.
register("area", area, ASYNCHRONOUS)
register("fedbuff", fedbuff, ASYNCHRONOUS)
register("asfedavg", asfedavg, ASYNCHRONOUS)
register("mifa_async", mifa_async, ASYNCHRONOUS)
register("sfedavg", sfedavg, ASYNCHRONOUS)
# Loss-aware aggregation (Ben Mansour, Carenini & Duplessis): weights from the losses at the global
# model.
register("fedmax", fedmax.fedmax)
register("fedmax_k", fedmax.fedmax_k)
register("fedsoftmax", fedmax.fedsoftmax)
register("fednova", fednova)
# Prioritized FL (FedALIGN, Ravi & Shomorony): the objective counts only the priority clients.
register("fedalign", fedalign.fedalign, PRIORITIZED)
register("fedavg_priority", fedalign.fedavg_priority, PRIORITIZED)
register("fedavg_all_clients", fedalign.fedavg_all_clients, PRIORITIZED)
register("local_model", fedalign.local_model, PRIORITIZED)
register("fedalign_prox", fedalign.fedalign_prox, PRIORITIZED)
register("fedprox_priority", fedalign.fedprox_priority, PRIORITIZED)
register("fedprox_all_clients", fedalign.fedprox_all_clients, PRIORITIZED)
# The standard baselines.
register("fedprox", fedprox)
register("scaffold", scaffold)
register("feddyn", feddyn)
register("qfedavg", qfedavg)
register("dp_fedavg", dp_fedavg)
register("dp_fedavg_adaptive", dp_fedavg.adaptive)  # Andrew et al. 2021: adaptive clipping
register("ditto", ditto)
# Personalization, part 1: a part of the model per client (a head; batch normalization).
register("fedper", fedper)
register("fedrep", fedrep)
register("fedbn", fedbn)
# Personalization, part 2: mixed local and global models, Moreau envelopes, MAML.
register("apfl", apfl)
register("pfedme", pfedme)
register("perfedavg_fo", perfedavg.perfedavg_fo)
register("perfedavg_hf", perfedavg.perfedavg_hf)
register("fedexp", fedexp)  # Jhunjhunwala et al. 2023: the extrapolated server step
register("ifca", ifca)      # Ghosh et al. 2020: clustered FL, k models
# Mime (Karimireddy et al. 2021): the server's optimizer statistics in every client step.
register("mime", mime.mime)
register("mime_lite", mime.mime_lite)


def get(name: str) -> Algorithm:
  if name not in ALGORITHMS:
    raise UsageError(f"unknown --algo={name!r}; {closest(name, ALGORITHMS)}")
  return ALGORITHMS[name]

