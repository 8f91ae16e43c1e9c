"""Client partitions of a labelled training set: iid, Dirichlet label skew, label shards.

Every partitioner returns one int64 index array per client; together they assign each
example exactly once. All randomness comes from ``np.random.default_rng(seed)``.
"""

from collections.abc import Callable

import numpy as np

from fedjax_bench.errors import UsageError


def _check_labels(labels: np.ndarray, num_clients: int,
                  num_classes: int | None) -> tuple[np.ndarray, int]:
  labels = np.asarray(labels)
  if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
    raise UsageError(f"labels must be a 1-D integer array, got {labels.dtype} "
                     f"with shape {labels.shape}")
  if num_clients <= 0:
    raise UsageError(f"num_clients must be positive, got {num_clients}")
  if num_clients > labels.shape[0]:
    raise UsageError(f"cannot split {labels.shape[0]} examples over "
                     f"{num_clients} clients: more clients than examples")
  if num_classes is None:
    num_classes = int(labels.max()) + 1 if labels.size else 0
  if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
    raise UsageError(f"labels must lie in [0, {num_classes}), got "
                     f"[{labels.min()}, {labels.max()}]")
  return labels, int(num_classes)


def iid(labels: np.ndarray, num_clients: int, seed: int) -> list[np.ndarray]:
  """A random permutation split into ``num_clients`` parts whose sizes differ by <= 1."""
  labels, _ = _check_labels(labels, num_clients, None)
  perm = np.random.default_rng(seed).permutation(labels.shape[0])
  return [p.astype(np.int64) for p in np.array_split(perm, num_clients)]


def dirichlet(labels: np.ndarray, num_clients: int, alpha: float, seed: int,
              num_classes: int | None = None) -> list[np.ndarray]:
  """Dirichlet label skew, exactly the procedure of the FedAWE authors' code
  (`util.partition`, the same as IBM/fedau's).

  ``q ~ Dir(alpha * 1_C)`` per client; client n receives the slice
  ``[round(N_c * Q_{n-1,c}), round(N_c * Q_{n,c}))`` of class c's indices (in dataset
  order), where ``Q_{n,c}`` is the normalised cumulative sum of ``q[:, c]``. Clients
  may end up empty when alpha is small.
  """
  labels, num_classes = _check_labels(labels, num_clients, num_classes)
  if not alpha > 0:
    raise UsageError(f"dirichlet alpha must be > 0, got {alpha}")
  rng = np.random.default_rng(seed)
  q = rng.dirichlet(alpha * np.ones(num_classes), num_clients)  # [m, C]
  frac = np.cumsum(q, axis=0) / q.sum(axis=0)
  by_class = [np.flatnonzero(labels == c) for c in range(num_classes)]
  start = np.zeros(num_classes, np.int64)
  clients = []
  for n in range(num_clients):
    parts = []
    for c, idx in enumerate(by_class):
      # Python round: half to even, as in the reference code's int(round(...)).
      end = round(len(idx) * float(frac[n, c]))
      parts.append(idx[start[c]:end])
      start[c] = end
    clients.append(np.concatenate(parts).astype(np.int64))
  return clients


def shards(labels: np.ndarray, num_clients: int, shards_per_client: int,
           seed: int, num_classes: int | None = None) -> list[np.ndarray]:
  """Single-class shards, the Fed-EF paper's Section 5.1 ("shards_by_class").

  The S = num_clients * shards_per_client shards are spread over the classes as evenly
  as possible (the first S mod C classes get one extra); each class's shuffled indices
  are cut into nearly equal contiguous chunks; a random permutation pi of the shards
  gives client i the shards pi[k*i : k*i + k].
  """
  labels, num_classes = _check_labels(labels, num_clients, num_classes)
  k = shards_per_client
  if k <= 0:
    raise UsageError(f"shards_per_client must be positive, got {k}")
  total = num_clients * k
  if total > labels.shape[0]:
    raise UsageError(f"{total} shards ({num_clients} clients x {k}) exceed the "
                     f"{labels.shape[0]} examples")
  rng = np.random.default_rng(seed)
  all_shards = []
  for c in range(num_classes):
    s_c = total // num_classes + (1 if c < total % num_classes else 0)
    idx = rng.permutation(np.flatnonzero(labels == c))
    if s_c > len(idx):
      raise UsageError(f"class {c} has {len(idx)} examples, too few for its "
                       f"{s_c} shards; use fewer clients or shards_per_client")
    if s_c:
      all_shards.extend(np.array_split(idx, s_c))
  pi = rng.permutation(total)
  return [np.concatenate([all_shards[j] for j in pi[k * i:k * i + k]]).astype(np.int64)
          for i in range(num_clients)]


# --- the loss-aware aggregation paper's unbalanced shard partitions (its §3.1) ------------
# Their default shard sizes (--shard_size=0); the pool is a seeded subset of the training
# set, N * 200 = 10,000 examples in the paper's setting (our reading, docs/papers/hetero_agg.md).
PAPER_SHARD_SIZES = {"noniid": 60, "very_noniid": 100, "iid_unbalanced": 60}


def _pool(n: int, pool_size: int, rng: np.random.Generator) -> np.ndarray:
  if 0 < pool_size < n:
    return rng.choice(n, pool_size, replace=False)
  return np.arange(n)


def unbalanced_shards(labels: np.ndarray, num_clients: int, shard_size: int, seed: int,
                      pool_size: int = 10000) -> list[np.ndarray]:
  """The paper's §3.1 ("Synthetic Data"): the pool sorted by label (stable) and cut into contiguous
  shards of
  ``shard_size`` (the remainder dropped); a random permutation gives every client one
  shard, and the other shards go to uniformly random clients (unbalanced n_i)."""
  labels, _ = _check_labels(labels, num_clients, None)
  if shard_size <= 0:
    raise UsageError(f"shard_size must be positive, got {shard_size}")
  rng = np.random.default_rng(seed)
  pool = _pool(labels.shape[0], pool_size, rng)
  order = pool[np.argsort(labels[pool], kind="stable")]
  num_shards = len(order) // shard_size
  if num_shards < num_clients:
    raise UsageError(f"{len(order)} pooled examples make {num_shards} shards of {shard_size}, "
                     f"fewer than the {num_clients} clients; use a smaller --shard_size or a "
                     "larger --pool_size")
  cut = order[:num_shards * shard_size].reshape(num_shards, shard_size)
  perm = rng.permutation(num_shards)
  owner = np.empty(num_shards, np.int64)
  owner[perm[:num_clients]] = np.arange(num_clients)
  owner[perm[num_clients:]] = rng.integers(0, num_clients, num_shards - num_clients)
  return [cut[owner == i].reshape(-1).astype(np.int64) for i in range(num_clients)]


def iid_unbalanced(labels: np.ndarray, num_clients: int, shard_size: int, seed: int,
                   pool_size: int = 10000) -> list[np.ndarray]:
  """The paper's §3.1 IID: the client sizes of ``unbalanced_shards`` with the same seed, each
  client's label histogram proportional to the pool's (within about 2 examples).

  The pool is sorted by label (shuffled within a class) and dealt out by merging the
  clients' evenly spaced quotas (k + 1/2) / n_i, so every client's examples are spread
  evenly over the label order."""
  sizes = [len(c) for c in unbalanced_shards(labels, num_clients, shard_size, seed, pool_size)]
  labels = np.asarray(labels)
  rng = np.random.default_rng([seed, 1])
  pool = rng.permutation(_pool(labels.shape[0], pool_size, np.random.default_rng(seed)))
  order = pool[np.argsort(labels[pool], kind="stable")][:sum(sizes)]
  quotas = np.concatenate([(np.arange(n) + 0.5) / n for n in sizes])
  owner = np.repeat(np.arange(num_clients), sizes)[np.argsort(quotas, kind="stable")]
  return [order[owner == i].astype(np.int64) for i in range(num_clients)]


# --- FedALIGN's random shards (its Section 4 and App. B; the authors' general_partition) --
def shards_random(labels: np.ndarray, num_clients: int, shards_per_client: int,
                  shard_size: int, seed: int, num_shards: int = 0) -> list[np.ndarray]:
  """Each of ``num_shards`` shards (default num_clients * shards_per_client) draws a class
  uniformly and ``shard_size`` examples of it WITH replacement; each client takes
  ``shards_per_client`` distinct shards uniformly, independently of the other clients
  (two clients may share a shard)."""
  labels, num_classes = _check_labels(labels, num_clients, None)
  num_shards = num_shards or num_clients * shards_per_client
  if shard_size <= 0 or shards_per_client <= 0:
    raise UsageError(f"shard_size and shards_per_client must be positive, got {shard_size} "
                     f"and {shards_per_client}")
  if shards_per_client > num_shards:
    raise UsageError(f"shards_per_client={shards_per_client} exceeds the {num_shards} shards")
  rng = np.random.default_rng(seed)
  present = np.unique(labels)
  by_class = {c: np.flatnonzero(labels == c) for c in present}
  cls = rng.choice(present, num_shards)
  shard = [rng.choice(by_class[c], shard_size, replace=True) for c in cls]
  clients = []
  for _ in range(num_clients):
    ids = rng.choice(num_shards, shards_per_client, replace=False)
    clients.append(rng.permutation(np.concatenate([shard[j] for j in ids])).astype(np.int64))
  return clients


SHARDS_RANDOM_SIZE = 500  # the paper's FMNIST/CIFAR shards (--shard_size=0)

PARTITIONS: dict[str, Callable[..., list[np.ndarray]]] = {
    "iid": iid, "dirichlet": dirichlet, "shards": shards,
    "noniid": unbalanced_shards, "very_noniid": unbalanced_shards,
    "iid_unbalanced": iid_unbalanced, "shards_random": shards_random}


def partition(name: str, labels: np.ndarray, num_clients: int, seed: int, *,
              alpha: float = 0.5, shards_per_client: int = 2,
              num_classes: int | None = None, shard_size: int = 0,
              pool_size: int = 10000, num_shards: int = 0) -> list[np.ndarray]:
  """Dispatches to one of ``PARTITIONS``; the arguments a partitioner does not use are ignored."""
  if name == "shards_random":
    return shards_random(labels, num_clients, shards_per_client,
                         shard_size or SHARDS_RANDOM_SIZE, seed, num_shards)
  if name in PAPER_SHARD_SIZES:
    size = shard_size or PAPER_SHARD_SIZES[name]
    return PARTITIONS[name](labels, num_clients, size, seed, pool_size)
  if name == "iid":
    return iid(labels, num_clients, seed)
  if name == "dirichlet":
    return dirichlet(labels, num_clients, alpha, seed, num_classes)
  if name == "shards":
    return shards(labels, num_clients, shards_per_client, seed, num_classes)
  raise UsageError(f"unknown partition {name!r}; choose one of "
                   f"{', '.join(PARTITIONS)}")
