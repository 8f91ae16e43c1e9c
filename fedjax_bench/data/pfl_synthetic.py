"""Generated data for prioritized FL (FedALIGN's Fig. 2 and our CPU experiments,
docs/papers/fedalign.md): priority clients first,
then free clients, each free client tagged aligned or not. No download.

* ``gaussmix_shards`` (CPU-1, after Fig. 1): Gaussian class clusters cut into single-class shards.
* ``synth_pfl`` (CPU-2, after Fig. 2): Synth(α, β) priority users (FedProx's generator) and free
  clients that are aligned (fresh draws from the priority mixture) or not; the noise model
  is ``groups`` (explicit aligned / label-shifted / irrelevant clients) or ``paper_skew``
  (our reconstruction of the paper's unpublished label-noise and irrelevant-data
  skews).
"""

import numpy as np

from fedjax_bench.data.federated import Dataset, FederatedData
from fedjax_bench.data.priority import label_aligned
from fedjax_bench.errors import UsageError

NOISES = ("groups", "paper_skew")


def gaussmix_shards(num_clients: int = 30, num_priority: int = 2, seed: int = 0, *,
                    dim: int = 60, num_classes: int = 10, num_shards: int = 60,
                    shard_size: int = 10, shards_per_client: int = 2,
                    mean_std: float = 0.35, num_test: int = 5000) -> Dataset:
  """Class means μ_c ~ N(0, mean_std² I), x | c ~ N(μ_c, I); every shard is one uniform
  class with ``shard_size`` fresh examples; each client takes ``shards_per_client``
  distinct shards. The first ``num_priority`` clients are the priority clients, and the
  test set has their empirical label mix."""
  if not 1 <= num_priority < num_clients:
    raise UsageError(f"--num_priority={num_priority} must be between 1 and "
                     f"--num_clients - 1 = {num_clients - 1}")
  if shards_per_client > num_shards:
    raise UsageError(f"shards_per_client={shards_per_client} exceeds the {num_shards} shards")
  rng = np.random.default_rng(seed)
  means = rng.normal(0, mean_std, (num_classes, dim))
  draw = lambda y: (means[y] + rng.standard_normal((len(y), dim))).astype(np.float32)
  shard_y = rng.integers(0, num_classes, num_shards)
  shards = [(draw(np.full(shard_size, c)), np.full(shard_size, c)) for c in shard_y]
  xs, ys = [], []
  for _ in range(num_clients):
    ids = rng.choice(num_shards, shards_per_client, replace=False)
    xs.append(np.concatenate([shards[j][0] for j in ids]))
    ys.append(np.concatenate([shards[j][1] for j in ids]))
  priority = np.arange(num_clients) < num_priority
  prio_y = np.concatenate([y for y, p in zip(ys, priority) if p])
  test_y = rng.choice(prio_y, num_test)
  train = FederatedData.from_clients(xs, ys)
  hist = np.zeros((num_clients, num_classes), np.int64)
  for k, y in enumerate(ys):
    np.add.at(hist[k], y, 1)
  return Dataset(name="gaussmix_shards", train=train, test_x=draw(test_y),
                 test_y=test_y.astype(np.int32), num_classes=num_classes,
                 feature_shape=(dim,), is_image=False, priority=priority,
                 aligned=label_aligned(hist, priority))


class _Users:
  """Synth(α, β) user models: u ~ N(0, α), B ~ N(0, β), v ~ N(B, 1), W, b ~ N(u, 1)."""

  def __init__(self, rng, n: int, alpha: float, beta: float, dim: int, num_classes: int):
    u, big_b = rng.normal(0, alpha, n), rng.normal(0, beta, n)
    self.v = np.stack([rng.normal(big_b[k], 1, dim) for k in range(n)])
    self.w = np.stack([rng.normal(u[k], 1, (dim, num_classes)) for k in range(n)])
    self.b = np.stack([rng.normal(u[k], 1, num_classes) for k in range(n)])
    self.std = np.arange(1, dim + 1, dtype=np.float64) ** -0.6  # Σ = diag(j^-1.2)

  def sample(self, rng, users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One example of each user in ``users``: x ~ N(v_k, Σ), y = argmax(x W_k + b_k)."""
    x = self.v[users] + rng.standard_normal((len(users), self.v.shape[1])) * self.std
    y = np.argmax(np.einsum("nd,ndc->nc", x, self.w[users]) + self.b[users], axis=1)
    return x.astype(np.float32), y.astype(np.int32)


def synth_pfl(seed: int = 0, *, num_priority: int = 10, num_free: int = 20,
              num_aligned: int = 6, priority_examples: int = 50, free_examples: int = 100,
              num_test: int = 5000, alpha: float = 1.0, beta: float = 1.0,
              noise: str = "groups", label_skew: float = 1.5, random_skew: float = 1.5,
              label_noise_factor: float = 2.5, random_fraction_factor: float = 1.0,
              dim: int = 60, num_classes: int = 10) -> Dataset:
  """Priority users 0..num_priority-1 with Synth(α, β) data, then ``num_free`` free clients.

  ``groups`` (CPU-2): ``priority_examples`` training examples per priority user, a test
  set of ``num_test`` draws from the priority mixture (users uniform); free clients of
  ``free_examples``: the first ``num_aligned`` draw from the mixture, the others alternate
  between a fixed label shift y ← (y + s) mod C, s ~ U{1..C-1}, and an irrelevant fresh
  Synth user.

  ``paper_skew`` (our reconstruction of Fig. 2's skews): priority users of FedProx's sizes
  floor(LogNormal(4, 2)) + 50, split 90/10 into train and test; half of every user's
  training split is pooled and dealt to the free clients in equal parts. Free client j
  has noise level u_j = (j + ½)/M: labels shifted by round(U(−r_j, r_j)), r_j =
  label_noise_factor · u_j^(1/label_skew), and round(random_fraction_factor ·
  u_j^(1/random_skew) · n_j) examples of a fresh user appended. Aligned: r_j < ½ (no
  shift can round away from 0) and at most 10% irrelevant examples.
  """
  if noise not in NOISES:
    raise UsageError(f"unknown --synth_noise={noise!r}; valid: {', '.join(NOISES)}")
  if num_priority < 1 or num_free < 1 or not 0 <= num_aligned <= num_free:
    raise UsageError(f"synth_pfl needs num_priority >= 1, num_free >= 1 and "
                     f"0 <= num_aligned <= num_free; got {num_priority}, {num_free}, "
                     f"{num_aligned}")
  rng = np.random.default_rng(seed)
  users = _Users(rng, num_priority, alpha, beta, dim, num_classes)
  xs, ys = [], []
  if noise == "groups":
    for k in range(num_priority):
      x, y = users.sample(rng, np.full(priority_examples, k))
      xs.append(x); ys.append(y)
    test_x, test_y = users.sample(rng, rng.integers(0, num_priority, num_test))
    aligned = np.arange(num_free) < num_aligned
    for j in range(num_free):
      x, y = users.sample(rng, rng.integers(0, num_priority, free_examples))
      if not aligned[j] and (j - num_aligned) % 2 == 0:
        y = (y + rng.integers(1, num_classes)) % num_classes
      elif not aligned[j]:
        x, y = _Users(rng, 1, alpha, beta, dim, num_classes).sample(
            rng, np.zeros(free_examples, np.int64))
      xs.append(x); ys.append(y)
  else:
    sizes = rng.lognormal(4, 2, num_priority).astype(np.int64) + 50
    pool_x, pool_y, test_xs, test_ys = [], [], [], []
    for k in range(num_priority):
      x, y = users.sample(rng, np.full(sizes[k], k))
      n_train = max(2, int(0.9 * sizes[k]))
      keep = n_train // 2
      xs.append(x[:keep]); ys.append(y[:keep])
      pool_x.append(x[keep:n_train]); pool_y.append(y[keep:n_train])
      test_xs.append(x[n_train:]); test_ys.append(y[n_train:])
    test_x, test_y = np.concatenate(test_xs), np.concatenate(test_ys)
    perm = rng.permutation(sum(len(y) for y in pool_y))
    pool_x, pool_y = np.concatenate(pool_x)[perm], np.concatenate(pool_y)[perm]
    level = (np.arange(num_free) + 0.5) / num_free
    r = label_noise_factor * level ** (1 / label_skew)
    frac = random_fraction_factor * level ** (1 / random_skew)
    aligned = (r < 0.5) & (frac <= 0.1)
    for j, (x, y) in enumerate(zip(np.array_split(pool_x, num_free),
                                   np.array_split(pool_y, num_free))):
      shift = np.rint(rng.uniform(-r[j], r[j], len(y))).astype(np.int64)
      y = (y + shift) % num_classes
      n_rand = int(round(frac[j] * len(y)))
      if n_rand:
        xr, yr = _Users(rng, 1, alpha, beta, dim, num_classes).sample(
            rng, np.zeros(n_rand, np.int64))
        x, y = np.concatenate([x, xr]), np.concatenate([y, yr])
      xs.append(x); ys.append(y.astype(np.int32))
  priority = np.arange(num_priority + num_free) < num_priority
  return Dataset(name="synth_pfl", train=FederatedData.from_clients(xs, ys),
                 test_x=test_x, test_y=test_y.astype(np.int32), num_classes=num_classes,
                 feature_shape=(dim,), is_image=False, priority=priority,
                 aligned=np.concatenate([np.zeros(num_priority, bool), aligned]))
