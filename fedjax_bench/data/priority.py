"""Priority and free clients (the FedALIGN paper's Sections 2 and 4).

The prioritized objective counts only the priority clients, so the test set is the
official test split resampled to their label mix, and a free client is "aligned" when its
labels are among theirs (our label-shard diagnostic, docs/papers/fedalign.md).
"""

import dataclasses

import numpy as np

from fedjax_bench.data.federated import Dataset
from fedjax_bench.errors import UsageError

TEST_MIXES = ("priority", "local_client", "official")


def choose(num_clients: int, num_priority: int, seed: int) -> np.ndarray:
  """[num_clients] bool: ``num_priority`` clients uniformly without replacement."""
  if not 1 <= num_priority < num_clients:
    raise UsageError(f"--num_priority={num_priority} must be between 1 and "
                     f"--num_clients - 1 = {num_clients - 1}")
  mask = np.zeros(num_clients, bool)
  mask[np.random.default_rng([seed, 4]).choice(num_clients, num_priority, replace=False)] = True
  return mask


def label_aligned(hist: np.ndarray, priority: np.ndarray) -> np.ndarray:
  """Free clients whose label set lies inside the priority clients' ("fully aligned")."""
  labels = hist[priority].sum(0) > 0
  return ~priority & np.all((hist > 0) <= labels, axis=1)


def resample_test(test_x: np.ndarray, test_y: np.ndarray, label_counts: np.ndarray,
                  seed: int) -> tuple[np.ndarray, np.ndarray]:
  """The authors' create_test_data: floor(π_c |test|) test examples of each class c,
  drawn with replacement, shuffled; π the label proportions of ``label_counts``."""
  idx = resample_test_rows(test_y, label_counts, seed)
  return test_x[idx], test_y[idx]


def resample_test_rows(test_y: np.ndarray, label_counts: np.ndarray, seed: int) -> np.ndarray:
  """The rows of the test set that `resample_test` takes, in its order."""
  pi = label_counts / label_counts.sum()
  rng = np.random.default_rng([seed, 5])
  take = []
  for c in np.flatnonzero(pi):
    pool = np.flatnonzero(test_y == c)
    if pool.size == 0:
      raise UsageError(f"class {c} of the priority clients has no test examples to resample "
                       "the test set from; use --test_mix=official")
    take.append(rng.choice(pool, int(np.floor(pi[c] * len(test_y))), replace=True))
  return rng.permutation(np.concatenate(take))


def local_client(dataset: Dataset) -> int:
  """The authors' Fig. 3 client: the first free client whose first example's label is
  among the priority clients' first-example labels."""
  t, prio = dataset.train, dataset.priority
  first = t.y[np.minimum(t.offsets, max(t.num_examples - 1, 0))]
  wanted = set(first[prio].tolist())
  for k in np.flatnonzero(~prio & (t.counts > 0)):
    if first[k] in wanted:
      return int(k)
  raise UsageError("no free client's first label is among the priority clients'; give "
                   "--local_client")


def prioritize(dataset: Dataset, num_priority: int, seed: int, *, test_mix: str = "priority",
               client: int = -1) -> Dataset:
  """``dataset`` with priority roles (unless its generator set them) and the test set
  that the objective needs: resampled to the priority label mix, or to free client
  ``client``'s (-1: `local_client`) for the Fig. 3 comparison, or left as it is."""
  dataset, rows = roles(dataset, num_priority, seed, test_mix=test_mix, client=client)
  if rows is None:
    return dataset
  return dataclasses.replace(dataset, test_x=dataset.test_x[rows], test_y=dataset.test_y[rows])


def roles(dataset: Dataset, num_priority: int, seed: int, *, test_mix: str = "priority",
          client: int = -1) -> tuple[Dataset, np.ndarray | None]:
  """(``dataset`` with its priority roles, the rows of its test set that `prioritize`
  keeps, or None: all of them). With --data_per_seed each seed's test set is these rows
  of the shared one (an index map, not a copy)."""
  if test_mix not in TEST_MIXES:
    raise UsageError(f"unknown --test_mix={test_mix!r}; valid: {', '.join(TEST_MIXES)}")
  n = dataset.train.num_clients
  generated = dataset.priority is not None  # its generator drew a priority test set
  if not generated:
    priority = choose(n, num_priority, seed)
    hist = dataset.label_histograms()
    dataset = dataclasses.replace(dataset, priority=priority,
                                  aligned=label_aligned(hist, priority))
  elif num_priority and num_priority != int(dataset.priority.sum()):
    raise UsageError(f"dataset {dataset.name!r} has {int(dataset.priority.sum())} priority "
                     f"clients; --num_priority={num_priority} disagrees")
  if test_mix == "official" or generated and test_mix == "priority":
    return dataset, None
  hist = dataset.label_histograms()
  if test_mix == "priority":
    counts = hist[dataset.priority].sum(0)
  else:
    k = client if client >= 0 else local_client(dataset)
    if not 0 <= k < n:
      raise UsageError(f"--local_client={k} is not a client id in [0, {n})")
    counts = hist[k]
  return dataset, resample_test_rows(dataset.test_y, counts, seed)
