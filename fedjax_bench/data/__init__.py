"""Federated datasets: ``load(name, num_clients=...)`` returns a partitioned ``Dataset``.
Every dataset is one `register` line below (a `Source`), as every model and algorithm is.

* ``synthetic``: LEAF/FedProx Synthetic(synthetic_alpha, synthetic_beta), one user per
  client (the natural split; partition must be "natural" or "iid", which mean the
  same here), generated with ``partition_seed``.
* ``toyfl``: the Gaussian mixture of our FedAWE CPU experiment (docs/papers/fedawe.md)
(``toyfl.gaussian_mixture``),
  partitioned by ``partition`` (default dirichlet); data seed ``partition_seed + 1000``.
* ``mnist``, ``svhn``, ``cifar10`` (TFDS) and ``cinic10`` (image folders): the train
  split partitioned by ``partition`` (default iid; see ``PARTITIONS``), the test split
  is the central test set. Images stay uint8; models see them as float32 in [0, 1]
  (``federated.pixels_to_float``). The ``Dataset`` carries each one's per-channel
  normalization and training augmentation (``tfds_data.SPECS``).
* ``quadratic``: the AREA scalar least-squares toys (``quadratic.scalar_quadratic``),
  one example per client, ``quadratic_variant`` "heterogeneous" (``num_clients``
  clients, 50 in the paper's Fig. 4) or "two_clients"; partition must be "natural". Train with
  ``loss_type=LOSS_TYPES["quadratic"]`` ("squared_error") and the ``linear`` model.
"""

import dataclasses
import os
from typing import Callable

import numpy as np

from fedjax_bench.data import natural, per_seed
from fedjax_bench.data.federated import Dataset, FederatedData
from fedjax_bench.data.partition import PARTITIONS
from fedjax_bench.data.pfl_synthetic import gaussmix_shards, synth_pfl
from fedjax_bench.data.partition import partition as make_partition
from fedjax_bench.data.quadratic import VARIANTS as QUADRATIC_VARIANTS
from fedjax_bench.data.quadratic import scalar_quadratic
from fedjax_bench.data.synthetic import leaf_synthetic
from fedjax_bench.data.tfds_data import SPECS as IMAGE_SPECS
from fedjax_bench.data.tfds_data import load_arrays
from fedjax_bench.data.toyfl import gaussian_mixture
from fedjax_bench.errors import UsageError

@dataclasses.dataclass(frozen=True)
class Source:
  """A dataset by name: ``load(num_clients, partition, **kwargs)`` -> a `Dataset` (kwargs:
  `load`'s keyword arguments), the partition it takes by default, its loss, and whether
  it is fixed image data (read once, partitioned per seed by `load_per_seed`)."""
  name: str
  load: Callable[..., Dataset]
  default_partition: str = "iid"
  loss_type: str = "cross_entropy"
  image: bool = False


SOURCES: dict[str, Source] = {}


def register(name: str, load_fn, **options) -> Source:
  """Makes ``load_fn`` the dataset ``--dataset=name`` (see `Source` for ``options``)."""
  if name in SOURCES:
    raise ValueError(f"dataset {name!r} is registered twice")
  SOURCES[name] = Source(name, load_fn, **options)
  return SOURCES[name]


def _natural_only(name: str, partition: str) -> None:
  if partition != "natural":
    raise UsageError(f"{name} deals its own clients; partition must be natural, "
                     f"got {partition!r}")


def _synthetic(num_clients, partition, *, synthetic_alpha, synthetic_beta, partition_seed,
               synthetic_max_examples_per_client, **_):
  if partition not in _SYNTHETIC_PARTITIONS:
    raise UsageError(f"synthetic data has its natural per-user split; partition "
                     f"must be one of {', '.join(_SYNTHETIC_PARTITIONS)}, got {partition!r}")
  return leaf_synthetic(num_clients, synthetic_alpha, synthetic_beta, partition_seed,
                        max_examples_per_client=synthetic_max_examples_per_client)


def _toyfl(num_clients, partition, *, partition_seed, alpha, shards_per_client,
           toyfl_num_train, toyfl_num_test, **_):
  return gaussian_mixture(num_clients, partition_seed, partition=partition, alpha=alpha,
                          shards_per_client=shards_per_client, num_train=toyfl_num_train,
                          num_test=toyfl_num_test)


def _quadratic(num_clients, partition, *, quadratic_variant, **_):
  if partition != "natural":
    raise UsageError(f"the quadratic toy has one example per client; partition must be "
                     f"natural, got {partition!r}")
  return scalar_quadratic(num_clients, quadratic_variant)


def _gaussmix_shards(num_clients, partition, *, num_priority, partition_seed, num_shards,
                     shard_size, shards_per_client, **_):
  _natural_only("gaussmix_shards", partition)
  return gaussmix_shards(num_clients, num_priority or 2, partition_seed,
                         num_shards=num_shards or 2 * num_clients, shard_size=shard_size or 10,
                         shards_per_client=shards_per_client)


def _synth_pfl(num_clients, partition, *, num_priority, partition_seed, synthetic_alpha,
               synthetic_beta, pfl, **_):
  _natural_only("synth_pfl", partition)
  priority = num_priority or 10
  if num_clients <= priority:
    raise UsageError(f"synth_pfl needs more clients than its {priority} priority clients; "
                     f"got --num_clients={num_clients}")
  return synth_pfl(partition_seed, num_priority=priority, num_free=num_clients - priority,
                   alpha=synthetic_alpha, beta=synthetic_beta, **(pfl or {}))


def _image(name):
  def load_image(num_clients, partition, *, alpha, shards_per_client, partition_seed,
                 data_dir, cache_dir, shard_size, pool_size, num_shards, **_):
    return _load_image(name, num_clients, partition, alpha, shards_per_client,
                       partition_seed, data_dir, cache_dir, shard_size, pool_size, num_shards)
  return load_image


def _natural(name):
  def load_natural(num_clients, partition, *, partition_seed, data_dir, cache_dir, settings,
                   **_):
    return natural.load(name, num_clients=num_clients, partition=partition,
                        partition_seed=partition_seed, data_dir=data_dir, cache_dir=cache_dir,
                        settings=settings)
  return load_natural


_SYNTHETIC_PARTITIONS = ("natural", "iid")
register("synthetic", _synthetic, default_partition="natural")
for _name in ("mnist", "fmnist", "emnist"):
  register(_name, _image(_name), image=True)
register("toyfl", _toyfl, default_partition="dirichlet")
for _name in ("svhn", "cifar10", "cinic10"):
  register(_name, _image(_name), image=True)
register("quadratic", _quadratic, default_partition="natural", loss_type="squared_error")
register("gaussmix_shards", _gaussmix_shards, default_partition="natural")
register("synth_pfl", _synth_pfl, default_partition="natural")
for _name in natural.LOADERS:
  register(_name, _natural(_name), default_partition="natural")
DATASETS = tuple(SOURCES)  # the valid --dataset values
DEFAULT_PARTITION = {n: s.default_partition for n, s in SOURCES.items()}
# Task.loss_type per dataset (make_task's loss_type).
LOSS_TYPES = {n: s.loss_type for n, s in SOURCES.items()}


def load(name: str, *, num_clients: int, partition: str | None = None,
         alpha: float = 0.5, shards_per_client: int = 2, partition_seed: int = 0,
         data_dir: str | None = None, cache_dir: str | None = None,
         synthetic_alpha: float = 1.0, synthetic_beta: float = 1.0,
         synthetic_max_examples_per_client: int | None = None,
         toyfl_num_train: int = 20000, toyfl_num_test: int = 5000,
         quadratic_variant: str = "heterogeneous", shard_size: int = 0,
         pool_size: int = 10000, num_shards: int = 0, num_priority: int = 0,
         pfl: dict | None = None, settings=None) -> Dataset:
  """Loads dataset ``name`` split over ``num_clients`` clients.

  ``partition=None`` takes the dataset's default (``Source.default_partition``).
  ``shard_size``, ``pool_size``: the unbalanced shard partitions of the FedSoftMax paper (§3.1)
  (``noniid``, ``very_noniid``, ``iid_unbalanced``; 0 = their defaults / all examples).
  ``num_shards``: ``shards_random``'s shard count (0: num_clients * shards_per_client).
  ``num_priority``, ``pfl``: the prioritized-FL generators (``pfl_synthetic``):
  ``gaussmix_shards`` (shards of ``shard_size``, default 10) and ``synth_pfl`` (``pfl``
  holds synth_pfl's keyword arguments: noise, num_aligned, label_skew, ...).
  ``data_dir``, when given, must exist, even when the cache holds the dataset.
  Datasets with their own clients (``natural.LOADERS``: shakespeare, leaf_json, tff_h5)
  read what else they need from ``settings`` (the run's DataSettings; None: defaults).
  """
  source = SOURCES.get(name)
  if source is None:
    raise UsageError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
  if name not in natural.LOADERS and data_dir and not os.path.isdir(data_dir):
    raise UsageError(f"--data_dir={data_dir} is not a directory; give an existing TFDS data "
                     "dir, or leave it out to use $TFDS_DATA_DIR, then TFDS's default")
  return source.load(num_clients, partition or source.default_partition, alpha=alpha,
                     shards_per_client=shards_per_client, partition_seed=partition_seed,
                     data_dir=data_dir, cache_dir=cache_dir, synthetic_alpha=synthetic_alpha,
                     synthetic_beta=synthetic_beta,
                     synthetic_max_examples_per_client=synthetic_max_examples_per_client,
                     toyfl_num_train=toyfl_num_train, toyfl_num_test=toyfl_num_test,
                     quadratic_variant=quadratic_variant, shard_size=shard_size,
                     pool_size=pool_size, num_shards=num_shards, num_priority=num_priority,
                     pfl=pfl, settings=settings)


def _load_image(name: str, num_clients: int, partition: str, alpha: float,
                shards_per_client: int, seed: int, data_dir: str | None,
                cache_dir: str | None, shard_size: int = 0,
                pool_size: int = 10000, num_shards: int = 0) -> Dataset:
  if partition not in PARTITIONS:  # fail before the (possibly slow) load
    raise UsageError(f"unknown partition {partition!r}; choose one of {', '.join(PARTITIONS)}")
  a = load_arrays(name, data_dir=data_dir, cache_dir=cache_dir)
  clients = _image_partition(a, partition, num_clients, seed, alpha, shards_per_client,
                             shard_size, pool_size, num_shards)
  return _image_dataset(name, a, clients)


def _image_partition(a: dict, partition: str, num_clients: int, seed: int, alpha: float,
                     shards_per_client: int, shard_size: int, pool_size: int,
                     num_shards: int) -> list[np.ndarray]:
  return make_partition(partition, a["train_y"], num_clients, seed, alpha=alpha,
                        shards_per_client=shards_per_client, num_classes=a["num_classes"],
                        shard_size=shard_size, pool_size=pool_size, num_shards=num_shards)


def _image_dataset(name: str, a: dict, clients: list[np.ndarray]) -> Dataset:
  train = FederatedData.from_partition(a["train_x"], a["train_y"], clients)
  spec = IMAGE_SPECS[name]
  return Dataset(name=name, train=train, test_x=a["test_x"],
                 test_y=a["test_y"].astype(np.int32), num_classes=a["num_classes"],
                 feature_shape=tuple(a["train_x"].shape[1:]), is_image=True,
                 normalize_mean=spec.normalize_mean, normalize_std=spec.normalize_std,
                 augmentation=spec.augmentation)


def load_per_seed(name: str, *, seeds, partition_seed: int = 0, **kwargs) -> per_seed.PerSeed:
  """`load` once per seed, seed s with partition seed ``per_seed.data_seed(partition_seed,
  s)``, as one pool of examples and an index map per seed (``per_seed.PerSeed``). A fixed
  dataset (the image datasets) is read once and only partitioned per seed; a generated one
  is generated per seed. ``kwargs``: `load`'s."""
  data_seeds = [per_seed.data_seed(partition_seed, s) for s in seeds]
  if name in SOURCES and SOURCES[name].image:
    partition = kwargs.get("partition") or SOURCES[name].default_partition
    if partition not in PARTITIONS:
      raise UsageError(f"unknown partition {partition!r}; choose one of "
                       f"{', '.join(PARTITIONS)}")
    a = load_arrays(name, data_dir=kwargs.get("data_dir"), cache_dir=kwargs.get("cache_dir"))
    clients = [_image_partition(a, partition, kwargs["num_clients"], d,
                                kwargs.get("alpha", 0.5), kwargs.get("shards_per_client", 2),
                                kwargs.get("shard_size", 0), kwargs.get("pool_size", 10000),
                                kwargs.get("num_shards", 0)) for d in data_seeds]
    pool = _image_dataset(name, a, [np.arange(len(a["train_y"]))])
    return per_seed.from_partitions(pool, clients, seeds, data_seeds)
  datasets = [load(name, partition_seed=d, **kwargs) for d in data_seeds]
  return per_seed.from_datasets(datasets, seeds, data_seeds)


__all__ = [
  "DATASETS",
  "DEFAULT_PARTITION",
  "LOSS_TYPES",
  "PARTITIONS",
  "QUADRATIC_VARIANTS",
  "Dataset",
  "FederatedData",
  "gaussian_mixture",
  "leaf_synthetic",
  "load",
  "load_per_seed",
  "load_arrays",
  "make_partition",
  "scalar_quadratic",
]
