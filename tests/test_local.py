"""Local training and minibatch sampling."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from conftest import toy_setup
from fedjax_bench.core import local


def _positions(count, steps, batch_size, sampling, max_count=None, seed=0):
  """[(positions, weights)] of steps 0..steps-1, drawn as a client's local scan does."""
  def step(perm, s):
    pos, w, perm = local.batch_positions(jax.random.PRNGKey(seed), s, count, perm,
                                         batch_size=batch_size, sampling=sampling)
    return perm, (pos, w)

  perm = jnp.arange(max_count or max(count, 1), dtype=jnp.int32)
  _, (pos, w) = jax.jit(lambda p: jax.lax.scan(step, p, jnp.arange(steps)))(perm)
  return list(zip(np.asarray(pos), np.asarray(w)))


def test_shuffled_epochs_visit_every_example_once():
  count, batch = 10, 4  # 3 steps an epoch: 4 + 4 + 2 valid
  batches = _positions(count, steps=9, batch_size=batch, sampling="shuffle", max_count=13)
  for epoch in range(3):
    chunk = batches[3 * epoch:3 * epoch + 3]
    weights = np.concatenate([w for _, w in chunk])
    assert weights.sum() == count
    seen = np.concatenate([p[w > 0] for p, w in chunk])
    assert sorted(seen.tolist()) == list(range(count))
  orders = [np.concatenate([p[w > 0] for p, w in batches[3 * e:3 * e + 3]]) for e in range(3)]
  assert not np.array_equal(orders[0], orders[1])  # a fresh order each epoch


def test_shuffle_is_uniform_over_orders():
  def first_epoch(key):
    def step(perm, s):
      pos, _, perm = local.batch_positions(key, s, 3, perm, batch_size=1, sampling="shuffle")
      return perm, pos[0]
    return jax.lax.scan(step, jnp.arange(3, dtype=jnp.int32), jnp.arange(3))[1]

  keys = jax.random.split(jax.random.PRNGKey(0), 6000)
  orders = np.asarray(jax.jit(jax.vmap(first_epoch))(keys))
  codes = orders @ np.array([9, 3, 1])
  _, counts = np.unique(codes, return_counts=True)
  assert len(counts) == 6  # all 3! orders, each about 1000 times
  assert np.all(np.abs(counts - 1000) < 4 * np.sqrt(1000 * 5 / 6))


def test_replacement_sampling_in_range_and_zero_count_weightless():
  (pos, w), = _positions(7, steps=1, batch_size=50, sampling="replacement")
  assert pos.min() >= 0 and pos.max() < 7 and np.all(w == 1)
  (pos, w), = _positions(0, steps=1, batch_size=4, sampling="replacement", max_count=1)
  assert np.all(w == 0)


def _train(task, client, num_steps, max_steps, lr=0.5):
  params = task.init_params(jax.random.PRNGKey(1))
  spec = local.LocalSpec(max_steps, 4, "shuffle")
  return local.train(params, jax.random.PRNGKey(2), task.counts[client], num_steps,
                     fetch=task.client_data(client), loss_fn=task.loss, opt=optax.sgd(lr),
                     spec=spec, max_count=task.max_count), params


def test_step_mask_stops_a_client_after_its_own_steps():
  task, _ = toy_setup()
  (p3_of_6, _), _ = _train(task, 2, num_steps=3, max_steps=6)
  (p3_of_3, _), _ = _train(task, 2, num_steps=3, max_steps=3)
  (p0, loss0), init = _train(task, 2, num_steps=0, max_steps=4)
  jax.tree.map(np.testing.assert_array_equal, p3_of_6, p3_of_3)
  jax.tree.map(np.testing.assert_array_equal, p0, init)
  assert float(loss0) == 0.0


def test_local_steps_reduce_the_client_loss():
  task, _ = toy_setup()
  (trained, _), init = _train(task, 1, num_steps=30, max_steps=30, lr=0.3)
  x, y = task.x[task.offsets[1]:task.offsets[1] + task.counts[1]], task.y[
      task.offsets[1]:task.offsets[1] + task.counts[1]]
  w = jnp.ones(x.shape[0])
  assert float(task.loss(trained, x, y, w)) < 0.5 * float(task.loss(init, x, y, w))


def _cohort_deltas(task, world, *, sampling, width, **kw):
  params = task.init_params(jax.random.PRNGKey(1))
  ids = jnp.arange(task.num_clients, dtype=jnp.int32)
  return jax.jit(lambda p: local.train_cohort(
      task, world, p, ids, jax.random.PRNGKey(4), opt=optax.sgd(0.3), batch_size=4,
      sampling=sampling, width=width, **kw))(params)


@pytest.mark.parametrize("sampling", local.SAMPLINGS)
def test_read_ahead_and_cohort_draws_change_no_number(sampling, monkeypatch):
  """Minibatches gathered before the scan and positions drawn for the whole cohort give
  bitwise the numbers of per-step reads and draws."""
  task, world = toy_setup(sizes=[7, 0, 9, 30, 1, 12], local_steps=5)
  ahead = _cohort_deltas(task, world, sampling=sampling, width=2)
  monkeypatch.setattr(local, "GATHER_BUDGET", 0)  # per-step reads, per-client draws
  per_step = _cohort_deltas(task, world, sampling=sampling, width=2)
  jax.tree.map(np.testing.assert_array_equal, ahead, per_step)
  assert float(jnp.max(jnp.abs(jax.tree.leaves(ahead[0])[0]))) > 0


@pytest.mark.parametrize("width", [0, 1, 4, 6])
def test_summed_deltas_equal_the_weighted_sum_of_the_stack(width):
  task, world = toy_setup(sizes=[7, 0, 9, 30, 1, 12], local_steps=3)
  weights = jnp.asarray([1.0, 0.0, 2.0, 0.5, 3.0, 1.0])
  deltas, losses = _cohort_deltas(task, world, sampling="shuffle", width=width)
  total, sum_losses = _cohort_deltas(task, world, sampling="shuffle", width=width,
                                     sum_weights=weights)
  want = jax.tree.map(lambda d: np.tensordot(np.asarray(weights), np.asarray(d), 1), deltas)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7),
               total, want)
  np.testing.assert_array_equal(sum_losses, losses)
