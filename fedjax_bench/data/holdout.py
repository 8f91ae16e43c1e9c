"""Each client's own test data: a held-out fraction of its examples (--holdout_fraction).

Personalization (Ditto) and fairness (q-FFL) are judged on every client's accuracy on its
own test data. Where a dataset has no per-client test split, this builds one: client i's
examples in a seeded random order, round(f n_i) of them held out (at least one when
n_i >= 2, never all of them), the rest its training data; both keep their original order.
"""

import dataclasses
import zlib

import numpy as np

from fedjax_bench.data.federated import Dataset, FederatedData

# The purpose folded into the partition seed: no other draw from that seed meets it.
PURPOSE = zlib.crc32(b"fedjax_bench/holdout")


def held_out_counts(counts: np.ndarray, fraction: float) -> np.ndarray:
  """[num_clients] int32: how many of each client's examples are held out."""
  counts = np.asarray(counts, np.int64)
  h = np.round(fraction * counts).astype(np.int64)
  if fraction > 0:
    h = np.where(counts >= 2, np.maximum(h, 1), h)
  return np.minimum(h, np.maximum(counts - 1, 0)).astype(np.int32)


def split(dataset: Dataset, fraction: float, seed: int) -> Dataset:
  """``dataset`` with ``client_test`` holding each client's held-out examples and
  ``train`` the rest."""
  if not 0 < fraction < 1:
    raise ValueError(f"the held-out fraction must be in (0, 1), got {fraction}")
  t = dataset.train
  rng = np.random.default_rng([seed, PURPOSE])
  held = held_out_counts(t.counts, fraction)
  train_rows, test_rows = [], []
  for offset, count, h in zip(t.offsets, t.counts, held):
    order = int(offset) + rng.permutation(int(count))
    train_rows.append(np.sort(order[:count - h]))
    test_rows.append(np.sort(order[count - h:]))
  return dataclasses.replace(dataset, train=FederatedData.from_partition(t.x, t.y, train_rows),
                             client_test=FederatedData.from_partition(t.x, t.y, test_rows))
