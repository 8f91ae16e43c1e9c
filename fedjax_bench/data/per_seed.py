"""Data randomness per seed (--data_per_seed): every seed of a run gets its own partition
(and, for generated datasets, its own examples), stored as an index map over one pool.

Seed s uses the *data seed* ``data_seed(partition_seed, s) = partition_seed + s``
wherever a run of one seed would use ``--partition_seed``: its partition, generated
data, availability weights phi and asynchronous client rates are those of a
single-seed run with ``--partition_seed=partition_seed + s``. Distinct seeds get
distinct data seeds, and a seed's data seed depends on nothing else (not on the other
seeds of the run, the grid or the devices). With the default ``--partition_seed=0`` the
data seed is the seed itself, as in the FedAWE authors' code and our FedAWE CPU experiment ("data
seed = run seed", docs/papers/fedawe.md); a run with ``--partition_seed=P`` uses data seeds P, P+1,
..., so two
runs whose seed ranges overlap after the shift share those seeds' data.

The examples are stored once: for a fixed dataset (MNIST, CIFAR-10, ...) the pool is
the training split and each seed's layout is a permutation of its rows grouped by
client; a generated dataset's seeds are generated one by one and concatenated into the
pool, each layout pointing into its own part (seeds whose data are identical, as for
the quadratic toy, share one part). Test sets are shared when every seed has the same
one, else pooled the same way.

Prioritized FL: each seed also has its own priority clients and test set, those of a
single-seed run with its data seed (its generator's, or drawn by `data.priority.roles`:
the test set is then rows of the shared one).
"""

import dataclasses

import numpy as np

from fedjax_bench.data.federated import Dataset, FederatedData


def data_seed(partition_seed: int, seed: int) -> int:
  """The partition seed that seed ``seed`` of a --data_per_seed run uses."""
  return int(partition_seed) + int(seed)


@dataclasses.dataclass(frozen=True)
class Layout:
  """Seed ``seed``'s clients: client i owns pool rows ``index[offsets[i] : offsets[i] +
  counts[i]]``, client after client."""
  seed: int
  data_seed: int
  index: np.ndarray               # [N_s] int64 rows of the pooled training examples
  offsets: np.ndarray             # [num_clients] int32
  counts: np.ndarray              # [num_clients] int32
  test_index: np.ndarray | None   # [M_s] rows of the pooled test set; None: the shared one
  # Prioritized FL: seed s's roles ([num_clients] bool) and the free client that
  # local_model trains (-1: none); None without roles.
  priority: np.ndarray | None = None
  aligned: np.ndarray | None = None
  local_client: int = -1


@dataclasses.dataclass(frozen=True)
class PerSeed:
  """Pooled examples and one `Layout` per seed. ``pool.train`` holds the pooled training
  examples as one client; ``pool.test_x/test_y`` the shared or pooled test sets."""
  pool: Dataset
  layouts: list[Layout]

  @property
  def seeds(self) -> list[int]:
    return [layout.seed for layout in self.layouts]

  @property
  def num_clients(self) -> int:
    return int(self.layouts[0].counts.shape[0])

  def dataset(self, k: int) -> Dataset:
    """Seed k's dataset, materialized: what `data.load` gives with its data seed."""
    layout = self.layouts[k]
    x = self.pool.train.x[layout.index]
    return self._with(layout, x)

  def summary(self, k: int) -> Dataset:
    """Seed k's dataset without copying its examples (the features read as zeros), for
    client sizes, label histograms and reports."""
    layout = self.layouts[k]
    px = self.pool.train.x
    x = np.broadcast_to(np.zeros((), px.dtype), (len(layout.index),) + px.shape[1:])
    return self._with(layout, x)

  def _with(self, layout: Layout, x: np.ndarray) -> Dataset:
    train = FederatedData(x=x, y=self.pool.train.y[layout.index], offsets=layout.offsets,
                          counts=layout.counts)
    test_x, test_y = self.pool.test_x, self.pool.test_y
    if layout.test_index is not None:
      test_x, test_y = test_x[layout.test_index], test_y[layout.test_index]
    return dataclasses.replace(self.pool, train=train, test_x=test_x, test_y=test_y,
                               priority=layout.priority, aligned=layout.aligned)

  def label_histograms(self, k: int) -> np.ndarray:
    return self.summary(k).label_histograms()

  def report(self) -> dict:
    """partition.json with one partition per seed: {"data_per_seed": true, "seeds": [seed k's
    `Dataset.report()` with its "seed" and "data_seed"]}."""
    return {"data_per_seed": True,
            "seeds": [{"seed": layout.seed, "data_seed": layout.data_seed,
                       **self.summary(k).report()} for k, layout in enumerate(self.layouts)]}

  def same_examples(self) -> bool:
    """Whether every seed's training examples are the same multiset of pool rows."""
    first = np.sort(self.layouts[0].index)
    return all(np.array_equal(np.sort(layout.index), first) for layout in self.layouts[1:])


def _ends(counts: np.ndarray) -> np.ndarray:
  return np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32)


def from_partitions(pool: Dataset, clients: list[list[np.ndarray]], seeds, data_seeds) -> PerSeed:
  """Seeds partitioning one fixed training set (``pool.train``, in dataset order):
  ``clients[k]`` is seed k's list of per-client row indices (`partition.partition`)."""
  layouts = []
  for s, d, parts in zip(seeds, data_seeds, clients):
    counts = np.array([len(ix) for ix in parts], np.int32)
    index = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)
    layouts.append(Layout(int(s), int(d), index, _ends(counts), counts, None))
  return PerSeed(pool, layouts)


def from_datasets(datasets: list[Dataset], seeds, data_seeds) -> PerSeed:
  """Seeds whose examples are generated per seed: their training sets concatenated into
  one pool (a seed whose data equal seed 0's reuses its rows), their test sets shared
  when all are equal, else concatenated too."""
  first = datasets[0]
  parts, starts, rows = [], [], 0
  for ds in datasets:
    if parts and _same_train(ds, first):
      starts.append(starts[0])
      continue
    starts.append(rows)
    parts.append(ds.train)
    rows += ds.train.num_examples
  pool_train = FederatedData.from_clients([t.x for t in parts], [t.y for t in parts])
  pool_train = FederatedData(pool_train.x, pool_train.y, np.zeros(1, np.int32),
                             np.array([pool_train.num_examples], np.int32))
  shared_test = all(np.array_equal(ds.test_x, first.test_x)
                    and np.array_equal(ds.test_y, first.test_y) for ds in datasets[1:])
  test_x, test_y, test_starts = first.test_x, first.test_y, [0] * len(datasets)
  if not shared_test:
    test_x = np.concatenate([ds.test_x for ds in datasets])
    test_y = np.concatenate([ds.test_y for ds in datasets])
    test_starts = np.concatenate([[0], np.cumsum([len(ds.test_y) for ds in datasets])[:-1]])
  layouts = []
  for k, (ds, s, d) in enumerate(zip(datasets, seeds, data_seeds)):
    t = ds.train
    test_index = (None if shared_test
                  else int(test_starts[k]) + np.arange(len(ds.test_y), dtype=np.int64))
    layouts.append(Layout(int(s), int(d), starts[k] + np.arange(t.num_examples, dtype=np.int64),
                          t.offsets.astype(np.int32), t.counts.astype(np.int32), test_index,
                          ds.priority, ds.aligned))
  pool = dataclasses.replace(first, train=pool_train, test_x=test_x, test_y=test_y,
                             priority=None, aligned=None)  # each layout holds its own
  return PerSeed(pool, layouts)


def _same_train(a: Dataset, b: Dataset) -> bool:
  return (np.array_equal(a.train.counts, b.train.counts)
          and np.array_equal(a.train.x, b.train.x) and np.array_equal(a.train.y, b.train.y))
