"""Federated datasets: ``load(name, num_clients=...)`` returns a partitioned ``Dataset``.

* ``synthetic``: LEAF/FedProx Synthetic(synthetic_alpha, synthetic_beta), one user per
  client (the natural split; partition must be "natural" or "iid", which mean the
  same here), generated with ``partition_seed``.
* ``mnist``: the TFDS train split partitioned by ``partition`` (see ``PARTITIONS``);
  the TFDS test split is the central test set. Images stay uint8; models see them
  as float32 in [0, 1] (``federated.pixels_to_float``).
"""

from typing import Optional

import numpy as np

from fedjax_bench.data.federated import Dataset, FederatedData
from fedjax_bench.data.partition import PARTITIONS, partition as make_partition
from fedjax_bench.data.synthetic import leaf_synthetic
from fedjax_bench.data.tfds_data import SPECS as IMAGE_SPECS, load_arrays
from fedjax_bench.errors import UsageError

DATASETS = ("synthetic", "mnist")
_SYNTHETIC_PARTITIONS = ("natural", "iid")


def load(name: str, *, num_clients: int, partition: str = "iid", alpha: float = 0.5,
         shards_per_client: int = 2, partition_seed: int = 0,
         data_dir: Optional[str] = None, cache_dir: Optional[str] = None,
         synthetic_alpha: float = 1.0, synthetic_beta: float = 1.0,
         synthetic_max_examples_per_client: Optional[int] = None) -> Dataset:
  """Loads dataset ``name`` split over ``num_clients`` clients."""
  if name == "synthetic":
    if partition not in _SYNTHETIC_PARTITIONS:
      raise UsageError(f"synthetic data has its natural per-user split; partition "
                       f"must be one of {', '.join(_SYNTHETIC_PARTITIONS)}, got {partition!r}")
    return leaf_synthetic(num_clients, synthetic_alpha, synthetic_beta, partition_seed,
                          max_examples_per_client=synthetic_max_examples_per_client)
  if name in DATASETS and name in IMAGE_SPECS:
    return _load_image(name, num_clients, partition, alpha, shards_per_client,
                       partition_seed, data_dir, cache_dir)
  raise UsageError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")


def _load_image(name: str, num_clients: int, partition: str, alpha: float,
                shards_per_client: int, seed: int, data_dir: Optional[str],
                cache_dir: Optional[str]) -> Dataset:
  if partition not in PARTITIONS:  # fail before the (possibly slow) load
    raise UsageError(f"unknown partition {partition!r}; choose one of {', '.join(PARTITIONS)}")
  a = load_arrays(name, data_dir=data_dir, cache_dir=cache_dir)
  c = a["num_classes"]
  clients = make_partition(partition, a["train_y"], num_clients, seed, alpha=alpha,
                           shards_per_client=shards_per_client, num_classes=c)
  train = FederatedData.from_partition(a["train_x"], a["train_y"], clients)
  return Dataset(name=name, train=train, test_x=a["test_x"],
                 test_y=a["test_y"].astype(np.int32), num_classes=c,
                 feature_shape=tuple(a["train_x"].shape[1:]), is_image=True)


__all__ = ["DATASETS", "Dataset", "FederatedData", "PARTITIONS", "leaf_synthetic",
           "load", "load_arrays", "make_partition"]
