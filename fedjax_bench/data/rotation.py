"""Planted clusters by rotation (--rotation_clusters): IFCA's rotated MNIST.

Ghosh, Chung, Yin & Ramchandran, "An Efficient Framework for Clustered Federated
Learning", NeurIPS 2020, arXiv:2006.04088: k groups of clients whose images are
rotated by 0, 360/k, 2 x 360/k, ... degrees, so that the clients form k clusters of
different data distributions over the same labels (k = 4: 0, 90, 180, 270 degrees).

Here client i is in cluster i mod k (`cluster_of`): its training examples and its own test
data (``client_test``, --holdout_fraction) are rotated by (i mod k) x 360/k degrees; example
j of the central test set by (j mod k) x 360/k degrees, an equal share per rotation. Only
multiples of 90 degrees (k in 1, 2, 4), so every rotation is exact on the pixel grid
(``np.rot90`` on the height and width axes) and keeps the dtype, the shape and every pixel.
Labels, client sizes and the layout stay as they are.
"""

import dataclasses

import numpy as np

from fedjax_bench.data.federated import Dataset, FederatedData
from fedjax_bench.errors import UsageError

CLUSTERS = (0, 1, 2, 4)  # the valid k; 0 (off) and 1 leave the data as they are


def cluster_of(num_clients: int, k: int) -> np.ndarray:
  """[num_clients] int64: client i's planted cluster, i mod k (all 0 for k <= 1)."""
  return np.arange(num_clients) % max(int(k), 1)


def quarter_turns(k: int) -> int:
  """Quarter turns per cluster step: cluster r is rotated by r * quarter_turns(k) x 90°."""
  return 4 // k


def rotate_clusters(dataset: Dataset, k: int) -> Dataset:
  """``dataset`` with client i's training and own test examples rotated by (i mod k) x
  360/k degrees and central test example j by (j mod k) x 360/k degrees; ``k`` 0 or 1: the
  dataset itself. UsageError unless its examples are square images."""
  if k not in CLUSTERS:
    raise ValueError(f"rotation clusters must be one of {', '.join(map(str, CLUSTERS))}, "
                     f"got {k!r}")
  if k <= 1:
    return dataset
  _check_square_images(dataset, k)
  client_test = dataset.client_test
  if client_test is not None:
    client_test = _rotate_clients(client_test, k)
  test_rot = np.arange(dataset.test_x.shape[0]) % k
  return dataclasses.replace(dataset, name=f"{dataset.name}_rot{k}",
                             train=_rotate_clients(dataset.train, k),
                             test_x=_rotate(dataset.test_x, test_rot, k),
                             client_test=client_test)


def _check_square_images(dataset: Dataset, k: int) -> None:
  shape = tuple(dataset.feature_shape)
  what = None
  if not dataset.is_image:
    what = "not images"
  elif len(shape) < 2 or shape[0] != shape[1]:
    what = f"images of shape {'x'.join(map(str, shape))}, not square"
  else:
    stored = [tuple(np.shape(a)[1:]) for a in (dataset.train.x, dataset.test_x)]
    bad = [s for s in stored if s != shape]
    if bad:
      what = (f"images stored as {'x'.join(map(str, bad[0]))}, not "
              f"{'x'.join(map(str, shape))}")
  if what is not None:
    raise UsageError(f"--rotation_clusters={k} needs a dataset of square images (mnist, "
                     "fmnist, emnist, svhn, cifar10, cinic10, or leaf_json/tff_h5 images); "
                     f"got --dataset={dataset.name} ({what})")


def _rotate_clients(fd: FederatedData, k: int) -> FederatedData:
  """``fd`` with client i's rows rotated by (i mod k) steps; rows no client owns stay."""
  n = fd.x.shape[0]
  counts = np.asarray(fd.counts, np.int64)
  offsets = np.asarray(fd.offsets, np.int64)
  total = int(counts.sum())
  client = np.repeat(np.arange(counts.shape[0]), counts)
  starts = np.repeat(offsets, counts)
  within = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
  rows = starts + within
  if total and (rows.min() < 0 or rows.max() >= n):
    raise ValueError(f"client rows out of range: offsets and counts reach row "
                     f"{int(rows.max())} of {n}")
  rot = np.zeros(n, np.int64)
  rot[rows] = client % k
  if np.any(rot[rows] != client % k):  # a row two clients of different clusters share
    raise ValueError("rows shared by clients of different rotation clusters cannot be "
                     "rotated for both")
  return dataclasses.replace(fd, x=_rotate(fd.x, rot, k))


def _rotate(x: np.ndarray, rot: np.ndarray, k: int) -> np.ndarray:
  """A copy of [n, H, W, ...] examples ``x``, example j rotated by rot[j] x 360/k degrees
  (counterclockwise in the (H, W) plane, as np.rot90)."""
  x = np.asarray(x)
  out = np.array(x, copy=True)
  for r in range(1, k):
    sel = np.flatnonzero(rot == r)
    if sel.size:
      out[sel] = np.rot90(x[sel], r * quarter_turns(k), axes=(1, 2))
  return out
