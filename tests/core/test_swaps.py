"""Fisher-Yates swaps resolved in parallel (core/swaps.py) against a plain swap loop."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_bench.core import local, swaps


def _loop(perm, a, b):
  perm = perm.copy()
  for x, y in zip(a, b):
    perm[x], perm[y] = perm[y], perm[x]
  return perm


@pytest.mark.parametrize("batch", [1, 4, 10, 32])
def test_apply_equals_the_swap_loop(batch):
  rng = np.random.default_rng(batch)
  cases = 300
  count = rng.integers(0, 3 * batch, cases)  # small counts: many repeated targets
  base = (rng.random(cases) * np.maximum(count, 1)).astype(int)
  slots = base[:, None] + np.arange(batch)
  valid = slots < count[:, None]
  b = np.minimum(slots + (rng.random((cases, batch)) * (count[:, None] - slots)).astype(int),
                 count[:, None] - 1)
  a, b = np.where(valid, slots, 0), np.where(valid, b, 0)
  size = 3 * batch + 1
  perms = np.stack([rng.permutation(size) for _ in range(cases)]).astype(np.int32)
  got = jax.jit(jax.vmap(swaps.apply))(perms, jnp.asarray(a, jnp.int32),
                                       jnp.asarray(b, jnp.int32), jnp.asarray(valid))
  want = np.stack([_loop(p, x[v], y[v]) for p, x, y, v in zip(perms, a, b, valid)])
  np.testing.assert_array_equal(np.asarray(got), want)


def _numpy_positions(key, count, steps, batch, drop_last, max_count):
  """Shuffled epochs as a NumPy transcription: B sequential swaps a step, the step's uniform
  draws taken from the same key."""
  perm = np.arange(max_count)
  per_epoch = max(count // batch if drop_last else -(-count // batch), 1)
  out = []
  for s in range(steps):
    u = np.asarray(jax.random.uniform(jax.random.fold_in(key, s), (batch,)))
    slots = (s % per_epoch) * batch + np.arange(batch)
    for slot, uj in zip(slots, u):
      if slot < count:
        target = min(slot + int(np.float32(uj) * np.float32(count - slot)), count - 1)
        perm[slot], perm[target] = perm[target], perm[slot]
    out.append(perm[np.clip(slots, 0, max(count - 1, 0))].copy())
  return np.stack(out)


@pytest.mark.parametrize("sampling", ["shuffle", "shuffle_drop_last"])
def test_batch_positions_equal_sequential_swaps(sampling):
  batch, steps, max_count = 10, 12, 37
  key = jax.random.PRNGKey(3)

  def positions(count):
    def step(perm, s):
      pos, _, perm = local.batch_positions(key, s, count, perm, batch_size=batch,
                                           sampling=sampling)
      return perm, pos
    return jax.lax.scan(step, jnp.arange(max_count, dtype=jnp.int32), jnp.arange(steps))[1]

  counts = [0, 1, 7, 10, 23, 37]  # epochs of one partial batch up to several wraps
  got = np.asarray(jax.jit(jax.vmap(positions))(jnp.asarray(counts)))
  for c, g in zip(counts, got):
    np.testing.assert_array_equal(
        g, _numpy_positions(key, c, steps, batch, sampling == "shuffle_drop_last", max_count))


def test_batch_positions_has_no_loop_over_the_batch():
  """The B swaps of a step are not a sequential loop (a round's fixed cost, docs/performance.md)."""
  jaxpr = jax.make_jaxpr(lambda k, p: local.batch_positions(
      k, 3, 25, p, batch_size=10, sampling="shuffle"))(jax.random.PRNGKey(0),
                                                     jnp.arange(30, dtype=jnp.int32))
  assert "while" not in str(jaxpr) and "scan" not in str(jaxpr)
