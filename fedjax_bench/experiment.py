"""From a flat config (the CLI's flag values by name) to the pieces of a run:
dataset -> task -> world -> hyperparameters -> ``build(hp) -> FederatedAlgorithm``.

The CLI and the benchmark scripts share this, so a script's run is the run the same
flags would give on the command line.
"""

import dataclasses
from typing import Any, Callable

import numpy as np

from fedjax_bench import algorithms, data, models
from fedjax_bench.core import asynchronous, optimum
from fedjax_bench.core import run_data as run_data_lib
from fedjax_bench.core.task import Task, make_per_seed_task, make_task
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.data import priority as priority_lib
from fedjax_bench.data.federated import Dataset
from fedjax_bench.errors import UsageError
from fedjax_bench.sim import asynchrony, availability, participation
from fedjax_bench.sim import world as world_lib

# Config keys copied into the algorithm's hyperparameters under the same name.
HPARAM_KEYS = ("client_lr", "server_lr", "batch_size", "sampling", "weighting", "server_opt",
               "client_width", "client_lr_schedule", "client_lr_decay_rounds", "fedawe_clip",
               "fedawe_eval", "fedau_k", "f3ast_beta", "f3ast_variant", "f3ast_budget",
               "compressor", "compress_k", "stoc_bits", "stoc_norm", "hvsign_scaling",
               "count_indices", "error_feedback", "ef_restart_after", "ef_restart_from",
               "down_compressor", "down_compress_k", "down_stoc_bits", "partition_seed",
               "sim_time", "async_delta", "async_rates", "async_rate", "async_rate_std",
               "async_min_rate", "async_delay", "async_delay_shape", "aggregation",
               "async_agg_rate", "grad_scale",
               "send_after_aggregation", "iterate_form_init", "area_lr_power", "projection",
               "projection_radius", "fedbuff_divisor", "fedbuff_staleness", "asfedavg_mode",
               "sfedavg_weighting")
HPARAM_KEYS += ("softmax_beta", "fedmax_k", "alpha_floor", "lr_decay_per_round",
                "record_alpha")  # loss-aware aggregation
HPARAM_KEYS += ("prox_mu", "align_epsilon", "align_score", "align_inequality",
                "align_eps_schedule", "align_eps_late", "align_eps_round", "align_eps_end_round",
                "align_eps_gamma", "selection_batch", "warmup_rounds", "priority_fraction",
                "free_fraction", "priority_sampling", "free_sampling", "compat",
                "local_client", "record_admitted")  # prioritized FL


@dataclasses.dataclass
class Experiment:
  dataset: Dataset  # with --data_per_seed: seed 0's, without copies of its examples
  task: Task
  world: world_lib.World
  hparams: dict
  build: Callable[..., FederatedAlgorithm]  # build(hp) or, per run, build(hp, run_data row)
  # --data_per_seed: each seed's data and world (pass to engine.run), and the datasets.
  run_data: Any = None
  per_seed: Any = None


def load_dataset(cfg: dict) -> Dataset:
  return data.load(cfg["dataset"], partition_seed=cfg["partition_seed"], **_load_kwargs(cfg))


def _load_kwargs(cfg: dict) -> dict:
  """data.load's arguments from the flags, but the dataset name and the partition seed."""
  return dict(
      num_clients=cfg["num_clients"], partition=cfg["partition"],
      alpha=cfg["alpha"], shards_per_client=cfg["shards_per_client"],
      data_dir=cfg.get("data_dir"),
      cache_dir=cfg.get("cache_dir"), synthetic_alpha=cfg["synthetic_alpha"],
      synthetic_beta=cfg["synthetic_beta"],
      quadratic_variant=cfg.get("quadratic_variant", "heterogeneous"),
      shard_size=cfg.get("shard_size", 0), pool_size=cfg.get("pool_size", 10000),
      num_shards=cfg.get("num_shards", 0), num_priority=cfg.get("num_priority", 0),
      pfl={"noise": cfg.get("synth_noise", "groups"),
           "num_aligned": cfg.get("synth_aligned", 6),
           "label_skew": cfg.get("label_skew", 1.5),
           "random_skew": cfg.get("random_skew", 1.5)})


def make_participation(cfg: dict, dataset: Dataset,
                       participation_given: bool = False) -> participation.Participation:
  """``participation_given``: the user set --participation explicitly (a conflict with
  --availability, which also decides who takes part)."""
  n = dataset.train.num_clients
  if cfg["availability"] == "off":
    return participation.make(cfg["participation"], n,
                              clients_per_round=cfg["clients_per_round"],
                              prob=cfg["participation_prob"], cap=cfg["cohort_cap"])
  _check_one_chooser(participation_given)
  return availability.make(cfg["availability"],
                           availability_base(cfg, dataset, cfg["partition_seed"]),
                           **availability_kwargs(cfg))


def _check_one_chooser(participation_given: bool) -> None:
  if participation_given:
    raise UsageError("--availability and --participation both choose who takes part; give "
                     "one (--availability=off to use --participation)")


def availability_base(cfg: dict, dataset: Dataset, partition_seed: int) -> np.ndarray:
  """The base p_i: constant, or <label histogram, phi> with phi drawn from ``partition_seed``."""
  if cfg["availability_probs"] == "constant":
    return availability.homogeneous(dataset.train.num_clients, cfg["availability_p"])
  phi = availability.draw_phi(cfg["availability_phi"], dataset.num_classes, partition_seed)
  return availability.base_probs(dataset.label_histograms(), phi)


def availability_kwargs(cfg: dict) -> dict:
  return dict(period=cfg["availability_period"], gamma=cfg["availability_gamma"],
              delta0=cfg["availability_delta0"], staircase_low=cfg["availability_low"],
              markov_a=cfg["markov_a"], p_min=cfg["availability_p_min"], cap=cfg["cohort_cap"])


def server_opt_kwargs(cfg: dict) -> dict:
  """Every server optimizer setting, whatever --server_opt says: an algorithm may pick its
  own optimizer (fedams is AMSGrad with --server_opt left at sgd) and must still get the
  --server_beta*/--server_eps the user gave."""
  return {"momentum": cfg["server_momentum"], "b1": cfg["server_beta1"],
          "b2": cfg["server_beta2"], "eps": cfg["server_eps"]}


def setup(cfg: dict, *, dataset: Dataset | None = None, participation_given: bool = False,
          seeds: list[int] | None = None) -> Experiment:
  """Everything but the engine run. ``dataset`` skips loading (scripts that reuse one).
  With --data_per_seed, ``seeds`` (the seeds the run will use) is required: each gets its
  own data (`setup_per_seed`)."""
  algorithm = algorithms.get(cfg["algo"])
  if cfg.get("data_per_seed"):
    if dataset is not None:
      raise UsageError("--data_per_seed loads one dataset per seed itself; pass no dataset")
    return setup_per_seed(cfg, seeds, participation_given=participation_given)
  dataset = dataset if dataset is not None else load_dataset(cfg)
  dataset, cfg = with_priority(dataset, cfg)
  model = make_model(cfg, dataset)
  task = make_task(dataset, model, train_eval_examples=cfg["train_eval_examples"],
                   **task_kwargs(cfg))
  if cfg.get("optimality_gap") or cfg["dataset"] == "quadratic":
    task = optimum.attach(task, cache_dir=cfg.get("cache_dir"))
  part = _participation(cfg, dataset, participation_given)
  world = world_lib.make(part, client_steps(cfg, dataset.train.counts))
  hparams = algorithm_hparams(cfg)
  build = lambda hp: algorithm.build(task, world, hp)
  build(hparams)  # bad hyperparameters fail here, before anything runs
  return Experiment(dataset, task, world, hparams, build)


def client_steps(cfg: dict, counts) -> np.ndarray:
  """Each client's local steps from the flags and its example count."""
  return world_lib.client_steps(counts, local_steps=cfg["local_steps"],
                                local_epochs=cfg["local_epochs"], batch_size=cfg["batch_size"],
                                drop_last=cfg.get("sampling") == "shuffle_drop_last")


def algorithm_hparams(cfg: dict) -> dict:
  """The flags an algorithm's ``build`` reads, by name, and the server optimizer's."""
  return {**{k: cfg[k] for k in HPARAM_KEYS}, "server_opt_kwargs": server_opt_kwargs(cfg)}


def make_model(cfg: dict, dataset: Dataset):
  return models.make(cfg["model"], num_classes=dataset.num_classes, is_image=dataset.is_image,
                     mlp_hidden=tuple(int(h) for h in cfg["mlp_hidden"]),
                     normalize=dataset.normalize, zero_init=cfg.get("zero_init", False),
                     bias=cfg.get("logreg_bias", True) if cfg["model"] == "logreg" else None)


def task_kwargs(cfg: dict) -> dict:
  """make_task's options from the flags (all but train_eval_examples)."""
  return dict(augment=cfg.get("augment", True),
              augment_batchwise=cfg.get("batchwise_augmentation", False),
              eval_grad_norm=cfg.get("eval_grad_norm", False),
              loss_type=data.LOSS_TYPES.get(cfg["dataset"], "cross_entropy"),
              l2=cfg.get("l2", 0.0))


def _participation(cfg: dict, dataset: Dataset, participation_given: bool):
  if cfg["algo"] in algorithms.ASYNCHRONOUS:  # their clocks decide who sends when
    return participation.make("full", dataset.train.num_clients)
  if cfg["algo"] in algorithms.PRIORITIZED:  # they sample priority and free clients apart
    if participation_given and cfg["participation"] != "full":
      raise UsageError(f"--algo={cfg['algo']} samples clients with --priority_fraction and "
                       "--free_fraction; leave --participation at full")
    return participation.make("full", dataset.train.num_clients)
  return make_participation(cfg, dataset, participation_given)


def setup_per_seed(cfg: dict, seeds, *, participation_given: bool = False) -> Experiment:
  """--data_per_seed: seed s's partition, generated data, availability phi and asynchronous
  client rates are those of a one-seed run with --partition_seed=data_seed(partition_seed,
  s) (`data.per_seed`), inside one program: the examples are pooled once and every run
  gets index maps and its world's arrays (`Experiment.run_data`). The task and world
  built here are seed 0's, with static bounds (largest client, local steps, cohort cap)
  over all seeds."""
  if not seeds:
    raise UsageError("--data_per_seed needs the run's seeds at setup "
                     "(experiment.setup(cfg, seeds=[...]))")
  if (cfg["algo"] in algorithms.PRIORITIZED or cfg.get("num_priority", 0)
      or cfg["dataset"] in PRIORITY_DATASETS):
    raise UsageError("--data_per_seed does not redraw priority clients; prioritized FL "
                     "redraws its data with --partition_seed per seed (benchmarks/"
                     "fedalign_cpu.py)")
  algorithm = algorithms.get(cfg["algo"])
  per_seed = data.load_per_seed(cfg["dataset"], seeds=list(seeds),
                                partition_seed=cfg["partition_seed"], **_load_kwargs(cfg))
  dataset = per_seed.summary(0)
  model = make_model(cfg, dataset)
  gap = cfg.get("optimality_gap") or cfg["dataset"] == "quadratic"
  task, views = make_per_seed_task(
      per_seed, model, train_eval_examples=0 if gap else cfg["train_eval_examples"],
      **task_kwargs(cfg))
  if gap:  # f* of the training examples: one for all seeds only if they share them
    if not per_seed.same_examples():
      raise UsageError("--optimality_gap with --data_per_seed needs the same training "
                       "examples in every seed (a fixed dataset split whole); drop one")
    seed0 = make_task(per_seed.dataset(0), model, **task_kwargs(cfg))
    task = dataclasses.replace(task, optimum=optimum.find(seed0, cache_dir=cfg.get("cache_dir")))
  data_seeds = [layout.data_seed for layout in per_seed.layouts]
  arrays = rebuild = None
  if (cfg["algo"] not in algorithms.ASYNCHRONOUS and cfg["availability"] != "off"
      and cfg["availability_probs"] == "data"):
    _check_one_chooser(participation_given)
    bases = [availability_base(cfg, per_seed.summary(k), d) for k, d in enumerate(data_seeds)]
    arrays, cap, rebuild = availability.make_per_run(cfg["availability"], bases,
                                                     **availability_kwargs(cfg))
    part = rebuild(_row(arrays, 0), cap)
  else:  # the same scheme for every seed
    part = _participation(cfg, dataset, participation_given)
  steps = np.stack([client_steps(cfg, layout.counts) for layout in per_seed.layouts])
  world = world_lib.make(part, steps[0])._replace(max_steps=max(int(steps.max()), 1),
                                                  rebuild=rebuild)
  hparams = algorithm_hparams(cfg)
  rates = None
  if cfg["algo"] in algorithms.ASYNCHRONOUS and cfg.get("async_rates", "uniform") != "uniform":
    rates = np.stack([asynchronous.client_rates({**hparams, "partition_seed": d},
                                                per_seed.num_clients).astype(np.float32)
                      for d in data_seeds])
    world = world._replace(rates=_row(rates, 0))
  run_data = run_data_lib.RunData(np.asarray(seeds, np.int32), views,
                                  world_lib.WorldView(steps, arrays, rates))

  def build(hp, row=None):
    if row is None:
      return algorithm.build(task, world, hp)
    return algorithm.build(task.for_run(row.task), world.for_run(row.world), hp)

  build(hparams)  # bad hyperparameters fail here, before anything runs
  return Experiment(dataset, task, world, hparams, build, run_data=run_data, per_seed=per_seed)


PRIORITY_DATASETS = ("gaussmix_shards", "synth_pfl")


def _row(tree, k: int):
  import jax
  import jax.numpy as jnp
  return jax.tree.map(lambda a: jnp.asarray(a[k]), tree)


# The AREA paper's setting (spec 002 §5), taken by every flag the user did not give when an
# asynchronous algorithm runs on one of its problems; x0 = 0 (spec §8 row 12: the initial gap
# is then ln 10 - f*). The quadratic's linear model always starts at 0.
ASYNC_DEFAULTS = {
    "mnist": dict(num_clients=128, partition="dirichlet", alpha=0.1, model="logreg",
                  logreg_bias=False, l2=1e-3, local_steps=1, batch_size=32,
                  optimality_gap=True, sim_time=20.0, zero_init=True),
    "quadratic": dict(num_clients=50, model="linear", local_steps=1, batch_size=1,
                      async_rates="normal", async_rate_std=3.0, sim_time=10.0),
}
# Stepsizes per (dataset, algorithm), from our grid searches (results/area/REPORT.md): MNIST
# at n = 128 (Dirichlet 0.1, K = 1); every method chose 1 at n = 4, so fewer clients than
# 128 scale the MNIST values by n / 128, capped below at 1 (the stable range grows with n).
ASYNC_LR = {
    "mnist": {"area": 300.0, "fedbuff": 10.0, "asfedavg": 100.0, "mifa_async": 1.0,
              "sfedavg": 100.0},
    "quadratic": {"area": 7e-6, "fedbuff": 2e-7, "asfedavg": 2e-6, "mifa_async": 1e-7,
                  "sfedavg": 5e-6},
}


def sweepable(cfg: dict) -> list[str]:
  """The numeric hyperparameters; --sweep may name these (`check_sweepable` then rules
  out those that shape arrays). The data's seed and the vmap width are not the round's."""
  return [k for k in HPARAM_KEYS if k not in ("partition_seed", "client_width", "local_client")
          and isinstance(cfg.get(k), (int, float)) and not isinstance(cfg.get(k), bool)]


def _one_round(exp: Experiment, hp: dict):
  """Builds the algorithm with ``hp``, initializes it, and runs its evaluation parameters
  and one round (for tracing under ``jax.eval_shape``)."""
  import jax
  from fedjax_bench.core.types import params_to_evaluate
  alg = exp.build(hp)
  key = jax.random.PRNGKey(0)
  server, clients = alg.init(key)
  params_to_evaluate(alg, server, clients)
  return alg.round(server, clients, key)


def check_sweepable(exp: Experiment, grid: list[dict]) -> None:
  """Fails (UsageError) before anything runs when a swept hyperparameter shapes arrays:
  the algorithm is built and initialized with tracers in place of the grid's values."""
  if not grid:
    return
  import jax
  names = list(grid[0])
  try:
    jax.eval_shape(lambda values: _one_round(exp, {**exp.hparams, **dict(zip(names, values))}),
                   [0.0] * len(names))
  except (jax.errors.ConcretizationTypeError, jax.errors.TracerBoolConversionError,
          jax.errors.TracerIntegerConversionError, TypeError) as e:
    raise UsageError(f"--sweep: {', '.join(names)} shape arrays or control flow and cannot "
                     f"be swept in one program ({type(e).__name__}); sweep scalars such as "
                     "client_lr, or run one value per invocation") from None


class _Recording(dict):
  """A dict that remembers which keys were read."""

  def __init__(self, *args):
    super().__init__(*args)
    self.read = set()

  def __getitem__(self, key):
    self.read.add(key)
    return super().__getitem__(key)

  def get(self, key, default=None):
    self.read.add(key)
    return super().get(key, default)

  def __contains__(self, key):
    self.read.add(key)
    return super().__contains__(key)

  def __iter__(self):
    # Defined so that a copy ({**hp}, dict(hp)) reads every key through __getitem__: a
    # copy's later reads cannot be seen, so count them all as read.
    return super().__iter__()


# Flags that reach the algorithm under another name.
_FLAG_ALIASES = {"softmax_temperature": "softmax_beta", "server_momentum": "momentum",
                 "server_beta1": "b1", "server_beta2": "b2", "server_eps": "eps"}
_SERVER_OPT_FLAGS = ("server_momentum", "server_beta1", "server_beta2", "server_eps")
# Hyperparameters that are not the algorithm's to use or ignore.
_NOT_ALGORITHM_FLAGS = ("partition_seed", "client_width")


def check_flags_used(exp: Experiment, algo: str, given) -> None:
  """Fails (UsageError) when a flag the user gave is a hyperparameter that the chosen
  algorithm, with the other flags as given, never reads: the algorithm is built, initialized
  and run for one round abstractly (`jax.eval_shape`), recording what it reads."""
  checked = [k for k in given if k not in _NOT_ALGORITHM_FLAGS
             and (k in HPARAM_KEYS or k in _FLAG_ALIASES)]
  if not checked:
    return
  import jax
  hp = _Recording(exp.hparams)
  hp["server_opt_kwargs"] = opt_kwargs = _Recording(exp.hparams["server_opt_kwargs"])
  hp.read.clear()
  jax.eval_shape(lambda: _one_round(exp, hp))
  unused = [f for f in sorted(checked) if _FLAG_ALIASES.get(f, f) not in
            (opt_kwargs.read if f in _SERVER_OPT_FLAGS else hp.read)]
  if unused:
    names = ", ".join(f"--{f}" for f in unused)
    raise UsageError(f"{names} {'has' if len(unused) == 1 else 'have'} no effect on "
                     f"--algo={algo} with these flags; drop {'it' if len(unused) == 1 else 'them'}")


def with_priority(dataset: Dataset, cfg: dict) -> tuple[Dataset, dict]:
  """Priority roles and the test set the prioritized objective needs, and
  local_model's client resolved; unchanged without --num_priority or a PFL algorithm."""
  pfl = cfg["algo"] in algorithms.PRIORITIZED
  if not (pfl or cfg.get("num_priority", 0) or dataset.priority is not None):
    return dataset, cfg
  dataset = priority_lib.prioritize(
      dataset, cfg.get("num_priority", 0) or (0 if dataset.priority is not None else 2),
      cfg["partition_seed"], test_mix=cfg.get("test_mix", "priority"),
      client=cfg.get("local_client", -1))
  if cfg["algo"] == "local_model" and cfg.get("local_client", -1) < 0:
    cfg = {**cfg, "local_client": priority_lib.local_client(dataset)}
  return dataset, cfg


def with_defaults(cfg: dict, given) -> dict:
  """``cfg`` with the asynchronous algorithms' paper defaults for the flags not in
  ``given`` (the names the user set), the event count from --sim_time when --rounds is not
  given, and about 20 evaluations when --eval_every is not given."""
  algo, name = cfg["algo"], cfg["dataset"]
  if algo in HETERO_AGG_ALGOS:
    return hetero_agg_defaults(cfg, given)
  if algo in algorithms.PRIORITIZED:
    return prioritized_defaults(cfg, given)
  if algo not in algorithms.ASYNCHRONOUS:
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
    cfg["rounds"] = rounds_for_horizon(cfg)
  if "eval_every" not in given:
    cfg["eval_every"] = max(1, cfg["rounds"] // 20)
  return cfg


def rounds_for_horizon(cfg: dict) -> int:
  """Engine steps that cover --sim_time with room to spare (steps past it are no-ops):
  events of rate sum(lambda) (+ lambda_s), or synchronous rounds of mean length
  E[max of Delta fresh delays] for sfedavg. Heavy-tailed delays are simulated. With
  --data_per_seed, the most any seed's rates need."""
  if cfg.get("data_per_seed") and cfg.get("async_rates", "uniform") != "uniform":
    from fedjax_bench.cli import parse_seeds  # the seeds' own rates: enough for the slowest
    return max(rounds_for_horizon({**cfg, "data_per_seed": False,
                                   "partition_seed": data.per_seed.data_seed(
                                       cfg["partition_seed"], s)})
               for s in parse_seeds(str(cfg.get("seeds", "1"))))
  n, horizon = cfg["num_clients"], cfg["sim_time"]
  rates = asynchronous.client_rates(cfg, n)
  if cfg.get("async_delay", "exponential") != "exponential":
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
  law, shape = cfg["async_delay"], cfg.get("async_delay_shape") or None
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


# --- the FedSoftMax paper's MNIST setting (spec 003 §6), for the flags not given ------------
HETERO_AGG_ALGOS = ("fedmax", "fedmax_k", "fedsoftmax", "fednova")
HETERO_AGG_DEFAULTS = {
    "mnist": dict(num_clients=50, participation="full", partition="very_noniid",
                  model="paper_cnn", rounds=50, local_epochs=2.0, batch_size=64,
                  client_lr=0.05, lr_decay_per_round=0.99, eval_every=1),
}


def hetero_agg_defaults(cfg: dict, given) -> dict:
  """The paper's setting on MNIST, and --softmax_temperature=T as --softmax_beta=1/T.
  client_lr is the spec's calibrated guess (A7), not the paper's 1e-4."""
  cfg = dict(cfg)
  for key, value in HETERO_AGG_DEFAULTS.get(cfg["dataset"], {}).items():
    if key not in given:
      cfg[key] = value
  if cfg.get("softmax_temperature", 0) > 0:
    if "softmax_beta" in given:
      raise UsageError("give --softmax_beta or --softmax_temperature, not both")
    cfg["softmax_beta"] = 1.0 / cfg["softmax_temperature"]
  return cfg


# --- prioritized FL (spec 004 §3), for the flags not given ----------------------------------
def prioritized_defaults(cfg: dict, given) -> dict:
  """Full participation (the algorithms sample P and the free clients themselves),
  data-size weights, a warm-up of a tenth of the rounds, --prox_mu 1 for the FedProx
  names, and the local model's test set on its own client."""
  cfg = dict(cfg)
  defaults = {"participation": "full", "weighting": "data_size"}
  if cfg["algo"] in algorithms.PROX:
    defaults["prox_mu"] = 1.0
  if cfg["algo"] == "local_model":
    defaults["test_mix"] = "local_client"
  for key, value in defaults.items():
    if key not in given:
      cfg[key] = value
  if cfg.get("warmup_rounds", -1) < 0:
    cfg["warmup_rounds"] = cfg["rounds"] // 10
  return cfg
