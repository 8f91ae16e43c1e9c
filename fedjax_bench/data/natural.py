"""Datasets whose clients come with the data (natural partitions), read or built from files.

A registry of loaders by name, each ``"module:function"`` imported only when its dataset is
loaded, so a run of another dataset never loads (nor records the code of) their modules.
A loader is called as ``load(num_clients=, partition=, partition_seed=, data_dir=,
cache_dir=, settings=)`` (``settings``: the run's DataSettings, or None for its defaults)
and returns a ``Dataset``. What they share: which clients a run takes (`choose`) and the
subset of the central test set it scores (`subsample_test`), each drawn from the
partition seed with its own purpose folded in, as data/holdout.py draws.
"""

import importlib
import zlib

import numpy as np

from fedjax_bench.errors import UsageError

LOADERS = {
    "leaf_json": "fedjax_bench.data.leaf_json:load",
    "tff_h5": "fedjax_bench.data.tff_h5:load",
    "shakespeare": "fedjax_bench.data.shakespeare:load",
}
CLIENTS_PURPOSE = zlib.crc32(b"fedjax_bench/natural/clients")
TEST_PURPOSE = zlib.crc32(b"fedjax_bench/natural/test")


def load(name: str, **kwargs):
  module, _, function = LOADERS[name].partition(":")
  return getattr(importlib.import_module(module), function)(**kwargs)


def data_settings(settings):
  """The run's DataSettings, or its defaults."""
  if settings is not None:
    return settings
  from fedjax_bench.data.settings import DataSettings  # it imports this module
  return DataSettings()


def check_partition(name: str, partition: str | None) -> None:
  if partition not in (None, "natural"):
    raise UsageError(f"--dataset={name} has its own clients; --partition must be natural "
                     f"(or left out), got {partition!r}")


def choose(counts, num_clients: int, seed: int, min_samples: int, what: str) -> np.ndarray:
  """Indices (ascending: file order) of ``num_clients`` clients drawn at random without
  replacement, with ``seed``, from those with at least ``min_samples`` training samples
  (``counts``). ``what`` names them in the error: "the users of DIR"."""
  counts = np.asarray(counts, np.int64)
  eligible = np.flatnonzero(counts >= min_samples)
  if num_clients < 1:
    raise UsageError(f"--num_clients must be positive, got {num_clients}")
  if num_clients > eligible.size:
    raise UsageError(f"--num_clients={num_clients} is more than there are: {what} number "
                     f"{eligible.size} with at least {min_samples} training samples "
                     f"(--min_samples; {counts.size} in all; --num_clients={eligible.size} "
                     "takes them all)")
  rng = np.random.default_rng([seed, CLIENTS_PURPOSE])
  return np.sort(rng.choice(eligible, num_clients, replace=False))


def subsample_test(x: np.ndarray, y: np.ndarray, n: int, seed: int):
  """A random subset of ``n`` test samples (0: all), in their order, drawn with ``seed``."""
  if n <= 0 or n >= y.shape[0]:
    return x, y
  rng = np.random.default_rng([seed, TEST_PURPOSE])
  keep = np.sort(rng.choice(y.shape[0], n, replace=False))
  return x[keep], y[keep]
