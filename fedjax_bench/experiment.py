"""From a run's Config to its pieces: dataset -> task -> world -> the algorithm's typed
hyperparameters -> ``build(hp) -> FederatedAlgorithm``. Each layer gets its own section:
the data its DataSettings, the model its ModelSettings, the world its WorldSettings and the
algorithm its Hparams.

The command line, the Python API and the benchmark scripts share this, so a script's run
is the run the same settings would give on the command line.
"""

import dataclasses
from typing import Any, Callable, Mapping

import numpy as np

from fedjax_bench import algorithms, data
from fedjax_bench import config as config_lib
from fedjax_bench.config import Config
from fedjax_bench.algorithms import asynchronous
from fedjax_bench.task import optimum
from fedjax_bench.task import run_data as run_data_lib
from fedjax_bench.task.build import make_per_seed_task, make_task
from fedjax_bench.task.task import Finetune, Task
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.data import priority as priority_lib
from fedjax_bench.data import holdout, rotation
from fedjax_bench.data.federated import Dataset
from fedjax_bench.errors import UsageError
from fedjax_bench.sim import availability, participation
from fedjax_bench.sim import world as world_lib
from fedjax_bench.sim.settings import WorldSettings


@dataclasses.dataclass
class Experiment:
  dataset: Dataset  # with --data_per_seed: seed 0's, without copies of its examples
  task: Task
  world: world_lib.World
  hparams: Any      # the algorithm's Hparams
  build: Callable[..., FederatedAlgorithm]  # build(hp) or, per run, build(hp, run_data row)
  config: Config = None
  # --data_per_seed: each seed's data and world (pass to engine.run), and the datasets.
  run_data: Any = None
  per_seed: Any = None


def load_dataset(cfg: Config) -> Dataset:
  return data.load(cfg.data.dataset, partition_seed=cfg.data.partition_seed,
                   **cfg.data.load_kwargs())


def make_participation(world: WorldSettings, dataset: Dataset, partition_seed: int,
                       participation_given: bool = False) -> participation.Participation:
  """``participation_given``: the user set --participation explicitly (a conflict with
  --availability, which also decides who takes part)."""
  n = dataset.train.num_clients
  if world.availability == "off":
    return participation.make(world.participation, n, clients_per_round=world.clients_per_round,
                              prob=world.participation_prob, cap=world.cohort_cap,
                              sizes=dataset.train.counts)
  _check_one_chooser(participation_given)
  return availability.make(world.availability,
                           availability_base(world, dataset, partition_seed),
                           **world.availability_kwargs())


def _check_one_chooser(participation_given: bool) -> None:
  if participation_given:
    raise UsageError("--availability and --participation both choose who takes part; give "
                     "one (--availability=off to use --participation)")


def availability_base(world: WorldSettings, dataset: Dataset, partition_seed: int) -> np.ndarray:
  """The base p_i: constant, or <label histogram, phi> with phi drawn from ``partition_seed``."""
  if world.availability_probs == "constant":
    return availability.homogeneous(dataset.train.num_clients, world.availability_p)
  phi = availability.draw_phi(world.availability_phi, dataset.num_classes, partition_seed)
  return availability.base_probs(dataset.label_histograms(), phi)


def setup(cfg: Config | Mapping[str, Any], *, dataset: Dataset | None = None,
          seeds: list[int] | None = None) -> Experiment:
  """Everything but the engine run, from a Config or from settings by name (resolved as
  the command line resolves its flags). ``dataset`` skips loading (scripts that reuse
  one). With --data_per_seed, ``seeds`` (the seeds the run will use) is required: each
  gets its own data (`setup_per_seed`)."""
  if not isinstance(cfg, Config):
    cfg = config_lib.resolve(cfg, seeds=seeds or (0,))
  if cfg.data.data_per_seed:
    if dataset is not None:
      raise UsageError("--data_per_seed loads one dataset per seed itself; pass no dataset")
    return setup_per_seed(cfg, seeds)
  algorithm = algorithms.get(cfg.algo)
  dataset = dataset if dataset is not None else load_dataset(cfg)
  dataset, cfg = with_priority(dataset, cfg)
  if cfg.data.holdout_fraction > 0:
    dataset = holdout.split(dataset, cfg.data.holdout_fraction, cfg.data.partition_seed)
  if cfg.data.rotation_clusters > 1:  # after the split: each client's test data rotate too
    dataset = rotation.rotate_clusters(dataset, cfg.data.rotation_clusters)
  model = cfg.model.make(dataset)
  task = make_task(dataset, model, train_eval_examples=cfg.eval.train_eval_examples,
                   **task_kwargs(cfg))
  if cfg.eval.optimality_gap or cfg.data.dataset == "quadratic":
    task = optimum.attach(task, cache_dir=cfg.data.cache_dir)
  task = with_finetune(task, cfg)
  part = _participation(cfg, dataset)
  world = world_lib.make(part, client_steps(cfg.hparams, dataset.train.counts))
  if algorithm.kind == algorithms.ASYNCHRONOUS:
    world = world._replace(rates=asynchronous.client_rates(
        cfg.hparams, dataset.train.num_clients, cfg.data.partition_seed))
  hparams = cfg.hparams
  build = lambda hp: algorithm.build(task, world, hp)
  build(hparams)  # bad hyperparameters fail here, before anything runs
  return Experiment(dataset, task, world, hparams, build, cfg)


def notes(exp: Experiment) -> list[str]:
  """One line each on valid settings that waste most of a run's work (the command line
  prints them before it trains)."""
  out = []
  hp = exp.hparams
  batch, sampling = getattr(hp, "batch_size", None), getattr(hp, "sampling", None)
  if batch is not None and sampling in ("shuffle", "shuffle_drop_last"):
    largest = int(np.max(exp.dataset.train.counts))
    if batch > largest:
      out.append(f"--batch_size={batch} exceeds every client's examples (at most {largest}): "
                 f"each local step computes {batch} rows, at most {largest} of them examples "
                 f"(--sampling={sampling}); --batch_size={largest} takes the same full-batch "
                 f"steps at {largest / batch:.2g} of the cost")
  return out


def with_privacy(history, exp: Experiment):
  """The history with `dp_epsilon`, the privacy an algorithm that declares it (DP-FedAvg)
  has spent by each evaluated round, per grid point (host-side, from its settings); with
  ``history`` None, only checks that the run's sampling can be accounted for."""
  from fedjax_bench import engine
  privacy = algorithms.get(exp.config.algo).privacy
  if privacy is None:
    return history
  n = exp.dataset.train.num_clients
  if history is None:
    privacy(exp.hparams, exp.config.world, n, np.zeros(1))
    return None
  eps = np.stack([np.asarray(privacy(engine.with_point(exp.hparams, point), exp.config.world, n,
                                     history.rounds), np.float64)
                  for point in history.grid], axis=1)
  eps = np.repeat(eps[:, :, None], len(history.seeds), axis=2)
  return dataclasses.replace(history, metrics={**history.metrics, "dp_epsilon": eps})


def client_steps(hp, counts) -> np.ndarray:
  """Each client's local steps from its local-training settings and its example count."""
  return world_lib.client_steps(counts, local_steps=hp.local_steps,
                                local_epochs=hp.local_epochs, batch_size=hp.batch_size,
                                drop_last=hp.sampling == "shuffle_drop_last")


def with_finetune(task: Task, cfg: Config) -> Task:
  """``task`` with its fine-tuning evaluation (--finetune_steps), which needs each client's
  own test data and the local training's batches."""
  steps = cfg.eval.finetune_steps
  if not steps:
    return task
  if task.client_test is None:
    raise UsageError(f"--finetune_steps={steps} scores each client's fine-tuned model on its "
                     "own test data: give --holdout_fraction (e.g. 0.2)")
  if task.loss_type != "cross_entropy":
    raise UsageError(f"--finetune_steps reports accuracies; --dataset={cfg.data.dataset} has no "
                     "labels (a classification dataset: synthetic, mnist, ...)")
  hp = cfg.hparams
  return dataclasses.replace(task, finetune=Finetune(steps, hp.batch_size, hp.sampling,
                                                     cfg.eval.finetune_lr))


def task_kwargs(cfg: Config) -> dict:
  """make_task's options (all but train_eval_examples)."""
  return dict(augment=cfg.model.augment, augment_batchwise=cfg.model.batchwise_augmentation,
              eval_grad_norm=cfg.eval.eval_grad_norm,
              loss_type=data.LOSS_TYPES.get(cfg.data.dataset, "cross_entropy"),
              l2=cfg.model.l2)


def _participation(cfg: Config, dataset: Dataset):
  n = dataset.train.num_clients
  given = "participation" in cfg.given
  if cfg.kind == algorithms.ASYNCHRONOUS:  # their clocks decide who sends when
    return participation.make("full", n)
  if cfg.kind == algorithms.PRIORITIZED:  # they sample priority and free clients apart
    if given and cfg.world.participation != "full":
      raise UsageError(f"--algo={cfg.algo} samples clients with --priority_fraction and "
                       "--free_fraction; leave --participation at full")
    return participation.make("full", n)
  return make_participation(cfg.world, dataset, cfg.data.partition_seed, given)


def setup_per_seed(cfg: Config, seeds) -> Experiment:
  """--data_per_seed: seed s's partition, generated data, priority clients and test set
  (prioritized FL), availability phi and asynchronous client rates are those of a one-seed
  run with --partition_seed=data_seed(partition_seed, s) (`data.per_seed`), inside one
  program: the examples are pooled once and every run gets index maps and its world's
  arrays (`Experiment.run_data`). The task and world
  built here are seed 0's, with static bounds (largest client, local steps, cohort cap)
  over all seeds."""
  if not seeds:
    raise UsageError("--data_per_seed needs the run's seeds at setup "
                     "(experiment.setup(cfg, seeds=[...]))")
  if cfg.data.holdout_fraction > 0:
    raise UsageError("--holdout_fraction does not work with --data_per_seed yet; give one "
                     "of them")
  if cfg.data.rotation_clusters > 1:
    raise UsageError("--rotation_clusters does not work with --data_per_seed yet; give one "
                     "of them")
  algorithm = algorithms.get(cfg.algo)
  per_seed = data.load_per_seed(cfg.data.dataset, seeds=list(seeds),
                                partition_seed=cfg.data.partition_seed,
                                **cfg.data.load_kwargs())
  if _prioritized(cfg, per_seed.layouts[0].priority is not None):
    per_seed = _roles_per_seed(per_seed, cfg)
  dataset = per_seed.summary(0)
  model = cfg.model.make(dataset)
  gap = cfg.eval.optimality_gap or cfg.data.dataset == "quadratic"
  task, views = make_per_seed_task(
      per_seed, model, train_eval_examples=0 if gap else cfg.eval.train_eval_examples,
      **task_kwargs(cfg))
  if gap:  # f* of the training examples: one for all seeds only if they share them
    if not per_seed.same_examples():
      raise UsageError("--optimality_gap with --data_per_seed needs the same training "
                       "examples in every seed (a fixed dataset split whole); drop one")
    seed0 = make_task(per_seed.dataset(0), model, **task_kwargs(cfg))
    task = dataclasses.replace(task, optimum=optimum.find(seed0, cache_dir=cfg.data.cache_dir))
  task = with_finetune(task, cfg)
  data_seeds = [layout.data_seed for layout in per_seed.layouts]
  arrays = rebuild = None
  world_cfg = cfg.world
  if (cfg.kind != algorithms.ASYNCHRONOUS and world_cfg.availability != "off"
      and world_cfg.availability_probs == "data"):
    _check_one_chooser("participation" in cfg.given)
    bases = [availability_base(world_cfg, per_seed.summary(k), d)
             for k, d in enumerate(data_seeds)]
    arrays, cap, rebuild = availability.make_per_run(world_cfg.availability, bases,
                                                     **world_cfg.availability_kwargs())
    part = rebuild(_row(arrays, 0), cap)
  else:  # the same scheme for every seed
    part = _participation(cfg, dataset)
  steps = np.stack([client_steps(cfg.hparams, layout.counts) for layout in per_seed.layouts])
  world = world_lib.make(part, steps[0])._replace(max_steps=max(int(steps.max()), 1),
                                                  rebuild=rebuild)
  hparams = cfg.hparams
  rates = None
  if cfg.kind == algorithms.ASYNCHRONOUS:
    if hparams.async_rates != "uniform":
      rates = np.stack([asynchronous.client_rates(hparams, per_seed.num_clients, d)
                        .astype(np.float32) for d in data_seeds])
      world = world._replace(rates=_row(rates, 0))
    else:
      world = world._replace(rates=asynchronous.client_rates(hparams, per_seed.num_clients))
  run_data = run_data_lib.RunData(np.asarray(seeds, np.int32), views,
                                  world_lib.WorldView(steps, arrays, rates))

  def build(hp, row=None):
    if row is None:
      return algorithm.build(task, world, hp)
    return algorithm.build(task.for_run(row.task), world.for_run(row.world), hp)

  build(hparams)  # bad hyperparameters fail here, before anything runs
  return Experiment(dataset, task, world, hparams, build, cfg, run_data=run_data,
                    per_seed=per_seed)


def _row(tree, k: int):
  import jax
  import jax.numpy as jnp
  return jax.tree.map(lambda a: jnp.asarray(a[k]), tree)


def _prioritized(cfg: Config, has_roles: bool) -> bool:
  """Whether the run has priority clients (checking that its data have labels)."""
  if not (cfg.kind == algorithms.PRIORITIZED or cfg.data.num_priority or has_roles):
    return False
  if data.LOSS_TYPES.get(cfg.data.dataset, "cross_entropy") != "cross_entropy":
    raise UsageError(f"prioritized FL resamples the test set by label; --dataset="
                     f"{cfg.data.dataset} has no labels (a classification dataset: "
                     "synthetic, mnist, toyfl, synth_pfl, ...)")
  return True


def _num_priority(cfg: Config, dataset: Dataset) -> int:
  return cfg.data.num_priority or (0 if dataset.priority is not None else 2)


def _roles_per_seed(per_seed, cfg: Config):
  """``per_seed`` with each seed's priority clients, test set and local_model client:
  those `with_priority` gives a one-seed run on the seed's data seed."""
  client = getattr(cfg.hparams, "local_client", -1)
  layouts = []
  for k, layout in enumerate(per_seed.layouts):
    ds, rows = priority_lib.roles(per_seed.summary(k), _num_priority(cfg, per_seed.summary(k)),
                                  layout.data_seed, test_mix=cfg.data.test_mix, client=client)
    test_index = layout.test_index
    if rows is not None:
      test_index = rows if test_index is None else test_index[rows]
    local = client
    if hasattr(cfg.hparams, "local_client") and client < 0:
      local = priority_lib.local_client(ds)
    elif client >= 0 and (client >= len(ds.priority) or ds.priority[client]):
      raise UsageError(f"--local_client={client} must be a free client of every seed (seed "
                       f"{layout.seed}'s free clients: {np.flatnonzero(~ds.priority).tolist()}); "
                       "or -1: each seed's own")
    layouts.append(dataclasses.replace(layout, test_index=test_index, priority=ds.priority,
                                       aligned=ds.aligned, local_client=local))
  return dataclasses.replace(per_seed, layouts=layouts)


def with_priority(dataset: Dataset, cfg: Config) -> tuple[Dataset, Config]:
  """Priority roles and the test set the prioritized objective needs, and
  local_model's client resolved; unchanged without --num_priority or a PFL algorithm."""
  if not _prioritized(cfg, dataset.priority is not None):
    return dataset, cfg
  client = getattr(cfg.hparams, "local_client", -1)
  dataset = priority_lib.prioritize(dataset, _num_priority(cfg, dataset),
                                    cfg.data.partition_seed, test_mix=cfg.data.test_mix,
                                    client=client)
  if hasattr(cfg.hparams, "local_client") and client < 0:
    cfg = dataclasses.replace(cfg, hparams=dataclasses.replace(
        cfg.hparams, local_client=priority_lib.local_client(dataset)))
  return dataset, cfg
