"""Populations too large to store: every client's LEAF Synthetic(α, β) data is generated on
demand from its key, inside the compiled round, and never kept.

Client k's model is drawn from its own key (in the "data" key domain of the seed,
`keys.root(seed, "data")`, apart from the run's keys) as in FedProx's generator: u_k ~ N(0, α²),
B_k ~ N(0, β²), v_k ~ N(B_k, 1)^d, W_k, b_k ~ N(u_k, 1); its example j is
x = v_k + diag(i^-0.6) z (i the feature index) with z ~ N(0, I) from the key of (k, j),
y = argmax(x W_k + b_k). So example j of client k is the same every time it
is read, and a client's state costs only its size: O(1) per client. Sizes are
min(floor(LogNormal(4, 2)) + 50, max_examples) from a seeded NumPy draw.

The central test set takes fresh examples (positions past each client's size) of clients
drawn uniformly from the population; train_loss is scored on examples the clients hold.
"""

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_bench.core import keys
from fedjax_bench.errors import UsageError


@dataclasses.dataclass(frozen=True)
class Stream:
  counts: np.ndarray        # [num_clients] int32
  example_fn: Callable      # client -> (positions -> (x [B, dim] float32, y [B] int32))
  test_x: np.ndarray
  test_y: np.ndarray
  train_eval_x: np.ndarray
  train_eval_y: np.ndarray
  num_classes: int
  dim: int

  @property
  def num_clients(self) -> int:
    return int(self.counts.shape[0])


def leaf_stream(num_clients: int, alpha: float = 1.0, beta: float = 1.0, seed: int = 0, *,
                dim: int = 60, num_classes: int = 10, max_examples: int = 1000,
                num_test: int = 10000, num_train_eval: int = 10000) -> Stream:
  if num_clients < 1:
    raise UsageError(f"num_clients must be positive, got {num_clients}")
  if alpha < 0 or beta < 0 or max_examples < 50:
    raise UsageError(f"need alpha, beta >= 0 and max_examples >= 50; got {alpha}, {beta}, "
                     f"{max_examples}")
  rng = np.random.default_rng(seed)
  counts = np.minimum(rng.lognormal(4, 2, num_clients).astype(np.int64) + 50,
                      max_examples).astype(np.int32)
  data_key = keys.root(seed, "data")  # never one of the run's keys of the same seed
  std = jnp.arange(1, dim + 1, dtype=jnp.float32) ** -0.6

  model_keys = keys.for_purpose(data_key, "client_models")
  example_keys = keys.for_purpose(data_key, "examples")

  def example_fn(client):
    key = jax.random.fold_in(example_keys, client)
    ku, kb, kv, kw, kc = jax.random.split(jax.random.fold_in(model_keys, client), 5)
    u = alpha * jax.random.normal(ku)
    big_b = beta * jax.random.normal(kb)
    v = big_b + jax.random.normal(kv, (dim,))
    w = u + jax.random.normal(kw, (dim, num_classes))
    b = u + jax.random.normal(kc, (num_classes,))

    def fetch(pos):
      z = jax.vmap(lambda j: jax.random.normal(jax.random.fold_in(key, j), (dim,)))(pos)
      x = v + std * z
      return x, jnp.argmax(x @ w + b, axis=-1).astype(jnp.int32)

    return fetch

  def materialize(clients, positions):
    fn = jax.jit(jax.vmap(lambda k, j: jax.tree.map(lambda a: a[0], example_fn(k)(j[None]))))
    x, y = fn(jnp.asarray(clients, jnp.int32), jnp.asarray(positions, jnp.int32))
    return np.asarray(x), np.asarray(y)

  test_clients = rng.integers(0, num_clients, num_test)
  test_x, test_y = materialize(test_clients, counts[test_clients] + rng.integers(0, 100, num_test))
  eval_clients = rng.integers(0, num_clients, num_train_eval)
  eval_pos = (rng.random(num_train_eval) * counts[eval_clients]).astype(np.int64)
  train_x, train_y = materialize(eval_clients, eval_pos)
  return Stream(counts, example_fn, test_x, test_y, train_x, train_y, num_classes, dim)
