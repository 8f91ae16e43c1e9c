"""The papers' settings, taken by the settings a user does not give.

`with_defaults(values, given)` works on the flat {name: value} view of a run's settings
(`config.Config.flat`): the asynchronous algorithms on AREA's problems (its Section 5.1), the
loss-aware aggregation algorithms on the FedSoftMax paper's MNIST setting (its §3.1)
and the prioritized-FL algorithms' protocol (its Section 4, App. B). A default that does not depend
on the dataset or on other settings is not here but in the algorithm's ``Hparams``, unless
it is a paper's choice of a setting that other algorithms share (participation, the
aggregation weights): then it is here, and `fixed` lists it for the docs.
"""

import types

import numpy as np

from fedjax_bench import algorithms
from fedjax_bench.algorithms import asynchronous
from fedjax_bench.data import per_seed as per_seed_lib
from fedjax_bench.errors import UsageError
from fedjax_bench.sim import asynchrony

# The AREA paper's setting (Section 5.1), taken by every flag the user did not give when an
# asynchronous algorithm runs on one of its problems; x0 = 0 (our choice, docs/papers/area.md: the
# initial gap
# is then ln 10 - f*). The quadratic's linear model always starts at 0.
ASYNC_DEFAULTS = {
    "mnist": dict(num_clients=128, partition="dirichlet", alpha=0.1, model="logreg",
                  logreg_bias=False, l2=1e-3, local_steps=1, batch_size=32,
                  optimality_gap=True, sim_time=20.0, zero_init=True),
    "quadratic": dict(num_clients=50, model="linear", local_steps=1, batch_size=1,
                      async_rates="normal", async_rate_std=3.0, sim_time=10.0),
}
# Stepsizes per (dataset, algorithm), from the retired area_cpu.py's grid searches: MNIST
# at n = 128 (Dirichlet 0.1, K = 1); every method chose 1 at n = 4, so fewer clients than
# 128 scale the MNIST values by n / 128, capped below at 1 (the stable range grows with n).
ASYNC_LR = {
    "mnist": {"area": 300.0, "fedbuff": 10.0, "asfedavg": 100.0, "mifa_async": 1.0,
              "sfedavg": 100.0},
    "quadratic": {"area": 7e-6, "fedbuff": 2e-7, "asfedavg": 2e-6, "mifa_async": 1e-7,
                  "sfedavg": 5e-6},
}


def with_defaults(cfg: dict, given, seeds=(0,)) -> dict:
  """``cfg`` with the papers' defaults for the settings not in ``given`` (the names the
  user set); for the asynchronous algorithms also the event count from --sim_time when
  --rounds is not given (enough for every seed's rates, ``seeds``), and about 20
  evaluations when --eval_every is not given."""
  algo, name = cfg["algo"], cfg["dataset"]
  kind = algorithms.get(algo).kind
  if algo in HETERO_AGG_ALGOS:
    return hetero_agg_defaults(cfg, given)
  if kind == algorithms.PRIORITIZED:
    return prioritized_defaults(cfg, given)
  if kind != algorithms.ASYNCHRONOUS:
    return cfg
  cfg = dict(cfg)
  for key, value in ASYNC_DEFAULTS.get(name, {}).items():
    if key not in given:
      cfg[key] = value
  if "client_lr" not in given and algo in ASYNC_LR.get(name, {}):
    lr = ASYNC_LR[name][algo]
    if name == "mnist" and cfg["num_clients"] < 128:
      lr = max(1.0, lr * cfg["num_clients"] / 128)
    cfg["client_lr"] = lr
  if name == "quadratic" and algo == "sfedavg" and "async_delta" not in given:
    cfg["async_delta"] = cfg["num_clients"]  # exact convergence needs every client
  if cfg["sim_time"] > 0 and "rounds" not in given:
    cfg["rounds"] = rounds_for_horizon(cfg, seeds)
  if "eval_every" not in given:
    cfg["eval_every"] = max(1, cfg["rounds"] // 20)
  return cfg


def preset_name(algo: str, dataset: str) -> str | None:
  """The paper setting `with_defaults` takes for ``algo`` on ``dataset``, by name, or None."""
  kind = algorithms.get(algo).kind
  if algo in HETERO_AGG_ALGOS and dataset in HETERO_AGG_DEFAULTS:
    return (f"the loss-aware aggregation paper's {dataset} setting (Ben Mansour et al., "
            "Section 3.1)")
  if kind == algorithms.PRIORITIZED:
    return "FedALIGN's protocol (Ravi & Shomorony, Section 4 and App. B)"
  if kind == algorithms.ASYNCHRONOUS and dataset in ASYNC_DEFAULTS:
    return f"AREA's {dataset} setting (Iakovidou & Kim, Section 5.1)"
  return None


def rounds_for_horizon(cfg: dict, seeds=(0,)) -> int:
  """Engine steps that cover --sim_time with room to spare (steps past it are no-ops):
  events of rate sum(lambda) (+ lambda_s), or synchronous rounds of mean length
  E[max of Delta fresh delays] for sfedavg. Heavy-tailed delays are simulated. With
  --data_per_seed, the most any seed's rates need."""
  if cfg["data_per_seed"] and cfg["async_rates"] != "uniform":
    return max(rounds_for_horizon({**cfg, "data_per_seed": False,
                                   "partition_seed": per_seed_lib.data_seed(
                                       cfg["partition_seed"], s)})
               for s in seeds)
  n, horizon = cfg["num_clients"], cfg["sim_time"]
  rates = asynchronous.client_rates(types.SimpleNamespace(**cfg), n, cfg["partition_seed"])
  if cfg["async_delay"] != "exponential":
    return _simulated_rounds(cfg, rates, horizon)
  if cfg["algo"] == "sfedavg":
    rng = np.random.default_rng(0)
    delta = min(cfg["async_delta"], n)
    draws = [rng.exponential(1 / rates[rng.choice(n, delta, replace=False)]).max()
             for _ in range(2000)]
    return int(np.ceil(1.3 * horizon / np.mean(draws))) + 10
  total = rates.sum()
  if cfg["aggregation"] == "poisson":
    total += cfg["async_agg_rate"] or rates.sum() / cfg["async_delta"]
  mean = total * horizon
  return int(np.ceil(mean + 5 * np.sqrt(mean))) + 10


def _simulated_rounds(cfg: dict, rates: np.ndarray, horizon: float, trials: int = 400) -> int:
  """Under log-normal or Pareto delays the count by T is far above its mean in a fair
  share of runs (many short gaps; Pareto 1.5, n = 4, T = 20 overran mean + 5 sqrt(mean)
  in 5% of runs), so: 1.1 x the largest of ``trials`` simulated counts, + 10."""
  rng = np.random.default_rng(0)
  law, shape = cfg["async_delay"], cfg["async_delay_shape"] or None
  unit = lambda size: asynchrony.numpy_unit_delays(rng, law, shape, size)

  def count(gaps, k):  # gaps(size) -> [trials, k] durations; the events by T per trial
    while True:
      ends = np.cumsum(gaps((trials, k)), axis=1)
      if (ends[:, -1] > horizon).all():
        return (ends <= horizon).sum(axis=1)
      k *= 2

  n = len(rates)
  if cfg["algo"] == "sfedavg":
    delta = min(cfg["async_delta"], n)
    pick = lambda size: np.argsort(rng.random(size + (n,)), axis=-1)[..., :delta]
    counts = count(lambda size: (unit(size + (delta,)) / rates[pick(size)]).max(-1), 16)
  else:
    counts = sum(count(lambda size, r=r: unit(size) / r, int(2 * r * horizon) + 16)
                 for r in rates)
    if cfg["aggregation"] == "poisson":
      agg = cfg["async_agg_rate"] or rates.sum() / cfg["async_delta"]
      counts = counts + rng.poisson(agg * horizon, trials)
  return int(np.ceil(1.1 * counts.max())) + 10


# --- the FedSoftMax paper's MNIST setting (§3.1), for the flags not given -------------------
HETERO_AGG_ALGOS = ("fedmax", "fedmax_k", "fedsoftmax", "fednova")
HETERO_AGG_DEFAULTS = {
    "mnist": dict(num_clients=50, participation="full", partition="very_noniid",
                  model="paper_cnn", rounds=50, local_epochs=2.0, batch_size=64,
                  client_lr=0.05, lr_decay_per_round=0.99, eval_every=1),
}


def hetero_agg_defaults(cfg: dict, given) -> dict:
  """The paper's setting on MNIST, and --softmax_temperature=T as --softmax_beta=1/T.
  client_lr is our calibrated guess (docs/papers/hetero_agg.md), not the paper's 1e-4."""
  cfg = dict(cfg)
  for key, value in HETERO_AGG_DEFAULTS.get(cfg["dataset"], {}).items():
    if key not in given:
      cfg[key] = value
  if "softmax_temperature" in cfg and cfg["softmax_temperature"] > 0:
    if "softmax_beta" in given:
      raise UsageError("give --softmax_beta or --softmax_temperature, not both")
    cfg["softmax_beta"] = 1.0 / cfg["softmax_temperature"]
  return cfg


# --- prioritized FL (FedALIGN's Section 4, App. B), for the flags not given -----------------
# Full participation (the algorithms sample P and the free clients themselves) and the
# objective's weights p_k = D_k / sum_P D_i (every other algorithm aggregates uniformly).
PRIORITIZED_DEFAULTS = {"participation": "full", "weighting": "data_size"}


def fixed(algo: str) -> dict:
  """{name: value} of the papers' defaults that ``algo`` takes on every dataset, whatever
  else is given (docs/FLAGS.md states them beside the declared defaults)."""
  if algorithms.get(algo).kind != algorithms.PRIORITIZED:
    return {}
  out = dict(PRIORITIZED_DEFAULTS)
  if algo == "local_model":
    out["test_mix"] = "local_client"
  return out


def prioritized_defaults(cfg: dict, given) -> dict:
  """`PRIORITIZED_DEFAULTS`, a warm-up of a tenth of the rounds, and the local model's test
  set on its own client."""
  cfg = dict(cfg)
  defaults = fixed(cfg["algo"])
  for key, value in defaults.items():
    if key not in given:
      cfg[key] = value
  if cfg["warmup_rounds"] < 0:
    cfg["warmup_rounds"] = cfg["rounds"] // 10
  return cfg
