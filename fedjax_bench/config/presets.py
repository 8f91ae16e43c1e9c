"""The papers' settings, as named presets: a run takes a preset's values for every setting
the user did not give when its algorithm and dataset match.

A `Preset` declares, once: its name, the paper and section it is taken from, the algorithms
and datasets it applies to, the values it sets (for every algorithm, and per algorithm) and
the rules that derive settings from others (AREA's stepsizes for fewer clients, FedALIGN's
warm-up). `with_defaults(values, given)` applies every preset in `PRESETS` that matches, in
order, to the flat {name: value} view of a run's settings (`config.Config.flat`);
`preset_name` names the paper setting a run takes, which the command line prints with what it
set. The flagfiles (benchmarks/configs/) state only what differs from their preset, and the
paper declarations (benchmarks/papers/) take its values from here. A preset without a
citation is a rule of ours that an algorithm takes on every dataset (the asynchronous event
budget, FedSoftMax's temperature), not a paper's.

A default that does not depend on the dataset or on other settings is not here but in the
algorithm's ``Hparams``, unless it is a paper's choice of a setting that other algorithms
share (participation, the aggregation weights): then it is a preset for every dataset, and
`fixed` lists it for the docs.
"""

import dataclasses
from typing import Any, Callable, Mapping

from fedjax_bench import algorithms
from fedjax_bench.algorithms import asynchronous
from fedjax_bench.errors import UsageError

# A rule: (cfg, given, seeds) -> None, setting in ``cfg`` (a copy of the run's flat
# settings, the preset's values already in) what derives from other settings; ``given``
# the names the user set, ``seeds`` the run's seeds.
Rule = Callable[[dict, frozenset, tuple], None]


@dataclasses.dataclass(frozen=True)
class Preset:
  name: str                        # how the code and the docs refer to it: "area_mnist"
  title: str                       # how the command line names it: "AREA's mnist setting"
  citation: str | None             # the paper and section; None: a rule of ours
  values: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  # {algorithm: {name: value}} on top of `values` for that algorithm.
  per_algo: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
  rules: tuple[Rule, ...] = ()     # applied after the values, in order
  kind: str | None = None          # applies to every algorithm of this kind,
  algos: tuple[str, ...] = ()      # and to these,
  datasets: tuple[str, ...] | None = None  # on these datasets (None: on every one)

  def applies(self, algo: str, dataset: str) -> bool:
    return ((algo in self.algos or algorithms.get(algo).kind == self.kind)
            and (self.datasets is None or dataset in self.datasets))

  def settings(self, algo: str) -> dict:
    """{name: value} this preset sets for ``algo`` (before its rules)."""
    return {**self.values, **self.per_algo.get(algo, {})}

  def label(self) -> str:
    """"AREA's mnist setting (Iakovidou & Kim, Section 5.1)", as the command line says it."""
    return f"{self.title} ({self.citation})" if self.citation else self.title

  def apply(self, cfg: dict, given, seeds=(0,)) -> dict:
    cfg = dict(cfg)
    for key, value in self.settings(cfg["algo"]).items():
      if key not in given:
        cfg[key] = value
    for rule in self.rules:
      rule(cfg, given, seeds)
    return cfg


# --- AREA (Iakovidou & Kim, Section 5.1): the asynchronous algorithms ----------------------
def _fewer_clients_smaller_steps(cfg: dict, given, seeds) -> None:
  """Below 128 clients a method's stepsize scales by n / 128, at least 1 (every method
  chose 1 at n = 4; the stable range grows with n)."""
  if ("client_lr" not in given and cfg["algo"] in AREA_MNIST.per_algo
      and cfg["num_clients"] < 128):
    cfg["client_lr"] = max(1.0, cfg["client_lr"] * cfg["num_clients"] / 128)


def _sfedavg_waits_for_all(cfg: dict, given, seeds) -> None:
  """S-FedAvg's rounds take every client (Delta = n): exact convergence needs them all."""
  if cfg["algo"] == "sfedavg" and "async_delta" not in given:
    cfg["async_delta"] = cfg["num_clients"]


# MNIST multinomial logistic regression without bias, nu = 1e-3, n = 128, Dirichlet(0.1),
# K = 1 step of batch 32, Delta = 4, rates 10 (N(10, 5) with --async_rates=normal), T = 20,
# x0 = 0 (our choice, docs/papers/area.md: the initial gap is then ln 10 - f*). Stepsizes
# from the retired area_cpu.py's grid searches at n = 128 (Dirichlet 0.1, K = 1).
AREA_MNIST = Preset(
    "area_mnist", "AREA's mnist setting", "Iakovidou & Kim, Section 5.1",
    values=dict(num_clients=128, partition="dirichlet", alpha=0.1, model="logreg",
                logreg_bias=False, l2=1e-3, local_steps=1, batch_size=32, async_delta=4,
                async_rate=10.0, async_rate_std=5.0, optimality_gap=True, sim_time=20.0,
                zero_init=True),
    per_algo={"area": {"client_lr": 300.0}, "fedbuff": {"client_lr": 10.0},
              "asfedavg": {"client_lr": 100.0}, "mifa_async": {"client_lr": 1.0},
              "sfedavg": {"client_lr": 100.0}},
    rules=(_fewer_clients_smaller_steps,), kind=algorithms.ASYNCHRONOUS, datasets=("mnist",))

# Fig. 4's quadratic, f_i(x) = 1/2 (100 i x - 1)^2: n = 50, exact gradients, N(10, 3)
# rates, T = 10. The linear model always starts at 0. Stepsizes from the same searches.
AREA_QUADRATIC = Preset(
    "area_quadratic", "AREA's quadratic setting", "Iakovidou & Kim, Section 5.1",
    values=dict(num_clients=50, model="linear", local_steps=1, batch_size=1,
                async_rates="normal", async_rate_std=3.0, sim_time=10.0),
    per_algo={"area": {"client_lr": 7e-6}, "fedbuff": {"client_lr": 2e-7},
              "asfedavg": {"client_lr": 2e-6}, "mifa_async": {"client_lr": 1e-7},
              "sfedavg": {"client_lr": 5e-6}},
    rules=(_sfedavg_waits_for_all,), kind=algorithms.ASYNCHRONOUS, datasets=("quadratic",))


def _event_budget(cfg: dict, given, seeds) -> None:
  """Without --rounds, the events that cover --sim_time for every seed's rates
  (`asynchronous.rounds_for_horizon`)."""
  if cfg["sim_time"] > 0 and "rounds" not in given:
    cfg["rounds"] = asynchronous.rounds_for_horizon(cfg, seeds)


def _twenty_evaluations(cfg: dict, given, seeds) -> None:
  """Without --eval_every, about 20 evaluations a run."""
  if "eval_every" not in given:
    cfg["eval_every"] = max(1, cfg["rounds"] // 20)


ASYNC_HORIZON = Preset(
    "async_horizon", "the asynchronous run length", None,
    rules=(_event_budget, _twenty_evaluations), kind=algorithms.ASYNCHRONOUS)


# --- loss-aware aggregation (Ben Mansour et al., FedSoftMax's §3.1) --------------------------
HETERO_AGG_ALGOS = ("fedmax", "fedmax_k", "fedsoftmax", "fednova")

# A pool of 10,000 MNIST examples over 50 clients, all every round, 50 rounds, 2 local
# epochs of batch 64, SGD at 0.05 * 0.99^t, the paper's CNN, evaluated every round.
# client_lr is our calibrated guess (docs/papers/hetero_agg.md), not the paper's 1e-4.
HETERO_AGG_MNIST = Preset(
    "hetero_agg_mnist", "the loss-aware aggregation paper's mnist setting",
    "Ben Mansour et al., Section 3.1",
    values=dict(num_clients=50, participation="full", partition="very_noniid",
                model="fedsoftmax_cnn", pool_size=10000, rounds=50, local_epochs=2.0,
                batch_size=64, client_lr=0.05, lr_decay_per_round=0.99, eval_every=1),
    algos=HETERO_AGG_ALGOS, datasets=("mnist",))


def _temperature_as_beta(cfg: dict, given, seeds) -> None:
  """--softmax_temperature=T > 0 is --softmax_beta=1/T (the paper's T, Fig. 5)."""
  if cfg["softmax_temperature"] > 0:
    if "softmax_beta" in given:
      raise UsageError("give --softmax_beta or --softmax_temperature, not both")
    cfg["softmax_beta"] = 1.0 / cfg["softmax_temperature"]


SOFTMAX_TEMPERATURE = Preset(
    "softmax_temperature", "FedSoftMax's temperature", None,
    rules=(_temperature_as_beta,), algos=("fedsoftmax",))


# --- prioritized FL (Ravi & Shomorony, FedALIGN's Section 4 and App. B) --------------------
def _warmup_a_tenth(cfg: dict, given, seeds) -> None:
  """--warmup_rounds=-1 is a tenth of --rounds."""
  if cfg["warmup_rounds"] < 0:
    cfg["warmup_rounds"] = cfg["rounds"] // 10


# Full participation (the algorithms sample P and the free clients themselves) and the
# objective's weights p_k = D_k / sum_P D_i (every other algorithm aggregates uniformly);
# the local model is tested on its own client.
FEDALIGN_PROTOCOL = Preset(
    "fedalign_protocol", "FedALIGN's protocol", "Ravi & Shomorony, Section 4 and App. B",
    values=dict(participation="full", weighting="data_size"),
    per_algo={"local_model": {"test_mix": "local_client"}},
    rules=(_warmup_a_tenth,), kind=algorithms.PRIORITIZED)


# In the order they apply: a rule of ours after the paper's values it reads.
PRESETS = {p.name: p for p in (AREA_MNIST, AREA_QUADRATIC, ASYNC_HORIZON, HETERO_AGG_MNIST,
                               SOFTMAX_TEMPERATURE, FEDALIGN_PROTOCOL)}


def matching(algo: str, dataset: str) -> list[Preset]:
  """The presets a run of ``algo`` on ``dataset`` takes, in the order they apply."""
  return [p for p in PRESETS.values() if p.applies(algo, dataset)]


def with_defaults(cfg: dict, given, seeds=(0,)) -> dict:
  """``cfg`` with every matching preset's values for the settings not in ``given`` (the
  names the user set) and its rules; ``seeds``: the run's seeds (an asynchronous run's event
  budget covers every seed's rates)."""
  for preset in matching(cfg["algo"], cfg["dataset"]):
    cfg = preset.apply(cfg, given, seeds)
  return cfg


def preset_name(algo: str, dataset: str) -> str | None:
  """The paper setting `with_defaults` takes for ``algo`` on ``dataset``, by name, or None."""
  cited = [p.label() for p in matching(algo, dataset) if p.citation]
  return "; ".join(cited) or None


def fixed(algo: str) -> dict:
  """{name: value} of the papers' defaults that ``algo`` takes on every dataset, whatever
  else is given (docs/FLAGS.md states them beside the declared defaults)."""
  out = {}
  for preset in PRESETS.values():
    if preset.datasets is None and preset.applies(algo, ""):
      out.update(preset.settings(algo))
  return out
