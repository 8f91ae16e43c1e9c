"""From a flat config (the CLI's flag values by name) to the pieces of a run:
dataset -> task -> world -> hyperparameters -> ``build(hp) -> FederatedAlgorithm``.

The CLI and the benchmark scripts share this, so a script's run is the run the same
flags would give on the command line.
"""

import dataclasses
from typing import Callable

from fedjax_bench import algorithms, data, models
from fedjax_bench.core.task import Task, make_task
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.data.federated import Dataset
from fedjax_bench.errors import UsageError
from fedjax_bench.sim import availability, participation
from fedjax_bench.sim import world as world_lib

# Config keys copied into the algorithm's hyperparameters under the same name.
HPARAM_KEYS = ("client_lr", "server_lr", "batch_size", "sampling", "weighting", "server_opt",
               "client_width", "client_lr_schedule", "client_lr_decay_rounds", "fedawe_clip",
               "fedawe_eval", "fedau_k", "f3ast_beta", "f3ast_variant", "f3ast_budget",
               "compressor", "compress_k", "stoc_bits", "stoc_norm", "hvsign_scaling",
               "count_indices", "error_feedback", "ef_restart_after", "ef_restart_from",
               "down_compressor", "down_compress_k", "down_stoc_bits")


@dataclasses.dataclass
class Experiment:
  dataset: Dataset
  task: Task
  world: world_lib.World
  hparams: dict
  build: Callable[[dict], FederatedAlgorithm]


def load_dataset(cfg: dict) -> Dataset:
  return data.load(
      cfg["dataset"], num_clients=cfg["num_clients"], partition=cfg["partition"],
      alpha=cfg["alpha"], shards_per_client=cfg["shards_per_client"],
      partition_seed=cfg["partition_seed"], data_dir=cfg.get("data_dir"),
      cache_dir=cfg.get("cache_dir"), synthetic_alpha=cfg["synthetic_alpha"],
      synthetic_beta=cfg["synthetic_beta"])


def make_participation(cfg: dict, dataset: Dataset,
                       participation_given: bool = False) -> participation.Participation:
  """``participation_given``: the user set --participation explicitly (a conflict with
  --availability, which also decides who takes part)."""
  n = dataset.train.num_clients
  if cfg["availability"] == "off":
    return participation.make(cfg["participation"], n,
                              clients_per_round=cfg["clients_per_round"],
                              prob=cfg["participation_prob"], cap=cfg["cohort_cap"])
  if participation_given:
    raise UsageError("--availability and --participation both choose who takes part; give "
                     "one (--availability=off to use --participation)")
  if cfg["availability_probs"] == "constant":
    base = availability.homogeneous(n, cfg["availability_p"])
  else:
    phi = availability.draw_phi(cfg["availability_phi"], dataset.num_classes,
                                cfg["partition_seed"])
    base = availability.base_probs(dataset.label_histograms(), phi)
  return availability.make(
      cfg["availability"], base, period=cfg["availability_period"],
      gamma=cfg["availability_gamma"], delta0=cfg["availability_delta0"],
      staircase_low=cfg["availability_low"], markov_a=cfg["markov_a"],
      p_min=cfg["availability_p_min"], cap=cfg["cohort_cap"])


def server_opt_kwargs(cfg: dict) -> dict:
  name = cfg["server_opt"]
  if name == "momentum":
    return {"momentum": cfg["server_momentum"]}
  if name in ("adam", "yogi", "amsgrad"):
    return {"b1": cfg["server_beta1"], "b2": cfg["server_beta2"], "eps": cfg["server_eps"]}
  return {}


def setup(cfg: dict, *, dataset: Dataset | None = None,
          participation_given: bool = False) -> Experiment:
  """Everything but the engine run. ``dataset`` skips loading (scripts that reuse one)."""
  algorithm = algorithms.get(cfg["algo"])
  dataset = dataset if dataset is not None else load_dataset(cfg)
  model = models.make(cfg["model"], num_classes=dataset.num_classes, is_image=dataset.is_image,
                      mlp_hidden=tuple(int(h) for h in cfg["mlp_hidden"]),
                      normalize=dataset.normalize, zero_init=cfg.get("zero_init", False))
  task = make_task(dataset, model, train_eval_examples=cfg["train_eval_examples"],
                   augment=cfg.get("augment", True),
                   augment_batchwise=cfg.get("batchwise_augmentation", False),
                   eval_grad_norm=cfg.get("eval_grad_norm", False))
  part = make_participation(cfg, dataset, participation_given)
  steps = world_lib.client_steps(dataset.train.counts, local_steps=cfg["local_steps"],
                                 local_epochs=cfg["local_epochs"], batch_size=cfg["batch_size"])
  world = world_lib.make(part, steps)
  hparams = {k: cfg[k] for k in HPARAM_KEYS}
  hparams["server_opt_kwargs"] = server_opt_kwargs(cfg)
  build = lambda hp: algorithm.build(task, world, hp)
  build(hparams)  # bad hyperparameters fail here, before anything runs
  return Experiment(dataset, task, world, hparams, build)
