"""Local training and minibatch sampling."""

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tests.conftest import toy_setup
from fedjax_bench.core import cohort, keys, local


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


# Client sizes and one epoch of batch 4: tau = 2 1 3 8 1 3 2 5 1 4. Seven of ten clients
# available, in a slab of cap 9 (two padding rows).
SIZES = [7, 0, 9, 30, 1, 12, 5, 20, 3, 14]
MASK = [1, 0, 1, 1, 0, 1, 1, 0, 1, 1]


def _slab_setup():
  task, world = toy_setup(num_clients=10, sizes=SIZES, local_epochs=1.0, batch_size=4)
  return task, world, cohort.from_mask(jnp.asarray(MASK, bool), 9)


def _slab(task, world, c, *, width, sampling="shuffle", sum_weights=None, loss_fn=None):
  params = task.init_params(jax.random.PRNGKey(1))
  return jax.jit(lambda p: local.train_cohort(
      task, world, p, c.ids, jax.random.PRNGKey(4), opt=optax.sgd(0.3), batch_size=4,
      sampling=sampling, width=width, sum_weights=sum_weights, loss_fn=loss_fn,
      valid=c.valid))(params)


@functools.lru_cache(maxsize=None)
def _alone(sampling):
  """Each valid client of `_slab_setup` trained by itself, unbatched, for exactly its
  own tau_i steps (a loop of tau_i steps, nothing masked), with the key the cohort gives
  it: [(delta, loss)] in slab order."""
  task, world, c = _slab_setup()
  ids = np.asarray(c.ids)[np.asarray(c.valid)]
  params = task.init_params(jax.random.PRNGKey(1))
  client_keys = keys.per_client(keys.for_purpose(jax.random.PRNGKey(4), "local_train"),
                                jnp.asarray(ids, jnp.int32))
  out = []
  for cid, k in zip(ids, client_keys):
    tau = int(world.client_steps[cid])
    spec = local.LocalSpec(tau, 4, sampling)
    new, loss = jax.jit(lambda p, k: local.train(
        p, k, task.counts[cid], tau, fetch=task.client_data(cid), loss_fn=task.loss,
        opt=optax.sgd(0.3), spec=spec, max_count=task.max_count))(params, k)
    out.append((jax.tree.map(jnp.subtract, new, params), loss))
  return out


@pytest.mark.parametrize("width", [0, 1, 2, 4])
@pytest.mark.parametrize("sampling", ["shuffle", "replacement"])
def test_slab_rows_equal_each_client_trained_alone_and_padding_is_zero(width, sampling):
  """Valid rows: bitwise each client trained alone for its own tau_i steps (unequal
  budgets, trained in order of tau, put back in slab order); padding rows: zeros."""
  task, world, c = _slab_setup()
  deltas, losses = _slab(task, world, c, width=width, sampling=sampling)
  ids = np.asarray(c.ids)[np.asarray(c.valid)]
  assert len(set(np.asarray(world.client_steps)[ids].tolist())) > 3  # unequal work
  for row, (delta, loss) in enumerate(_alone(sampling)):
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(a[row], b), deltas, delta)
    assert losses[row] == loss
  for a in jax.tree.leaves((deltas, losses)):
    np.testing.assert_array_equal(a[len(ids):], 0)

  weights = jnp.where(c.valid, jnp.arange(9.0) + 1, 0.0)
  total, sum_losses = _slab(task, world, c, width=width, sampling=sampling,
                            sum_weights=weights)
  np.testing.assert_array_equal(sum_losses, losses)
  want = jax.tree.map(lambda d: np.tensordot(np.asarray(weights), np.asarray(d), 1), deltas)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7),
               total, want)


@pytest.mark.parametrize("summed", [False, True])
def test_slab_cost_is_the_valid_clients_own_steps(summed):
  """Client-steps executed (a callback in the loss counts every row of every step the
  program runs): the valid clients, in chunks of 2 of similar tau, each chunk running to
  its largest tau; not the slab of 9 for max tau = 8 steps (72 client-steps)."""
  task, world, c = _slab_setup()
  steps = [0]

  def counting_loss(params, x, y, w, rng):
    jax.debug.callback(lambda v: steps.__setitem__(0, steps[0] + np.size(v)), w[0])
    return task.loss(params, x, y, w, rng)

  weights = jnp.where(c.valid, 1.0, 0.0) if summed else None
  jax.block_until_ready(_slab(task, world, c, width=2, sampling="replacement",
                              sum_weights=weights, loss_fn=counting_loss))
  jax.effects_barrier()
  taus = sorted(np.asarray(world.client_steps)[np.asarray(c.ids)[np.asarray(c.valid)]],
                reverse=True)
  want = 2 * sum(taus[0::2])  # chunks [8, 4] [3, 3] [2, 2] [1]: 2 x (8 + 3 + 2 + 1)
  assert want == 28 and sum(taus) == 23
  assert steps[0] == want


def test_a_slab_under_twice_the_width_trains_as_one_chunk():
  """5 clients of equal tau at width 4: one vmapped chunk of 5 (5 tau client-steps), not
  chunks of 4 and 1 padded with 3 repeats of its row (8 tau)."""
  task, world = toy_setup(num_clients=10, cohort=5, local_steps=3, batch_size=4)
  c = cohort.from_mask(jnp.arange(10) < 5, 5)
  steps = [0]

  def counting_loss(params, x, y, w, rng):
    jax.debug.callback(lambda v: steps.__setitem__(0, steps[0] + np.size(v)), w[0])
    return task.loss(params, x, y, w, rng)

  jax.block_until_ready(_slab(task, world, c, width=4, sampling="replacement",
                              loss_fn=counting_loss))
  jax.effects_barrier()
  assert steps[0] == 5 * 3


def test_slab_split_over_devices_deals_the_work_evenly(tmp_path):
  """With the cohort split over 2 devices (the engine's "clients" axis) each device trains
  its share of the valid clients only, dealt in order of tau (device 0: tau 8 3 2 1,
  device 1: 4 3 2; chunks of 2 run to their largest tau), and gives the numbers of one
  device: the rows bitwise, the weighted sum up to the order of float additions."""
  from tests.conftest import device_probe
  script = Path(__file__).parents[1] / "scripts" / "cohort_probe.py"
  one = device_probe(script, tmp_path / "one.npz", 1)
  two = device_probe(script, tmp_path / "two.npz", 2)
  assert int(two["devices"]) == 2
  assert int(one["steps"]) == 2 * 28  # the map and the sum, 2 x (8 + 3 + 2 + 1) each
  assert int(two["steps"]) == 2 * (2 * (8 + 2) + 2 * (4 + 2))
  # One psum (an all-reduce per leaf: the sum's weight and bias, the losses) puts a summed
  # cohort together; no all-gather (each device draws its own rows' minibatches).
  assert (int(two["all_reduces"]), int(two["all_gathers"])) == (3, 0)
  for name in one.files:
    if name.startswith(("d_", "losses")):
      np.testing.assert_array_equal(one[name], two[name])
    elif name.startswith("t_"):
      np.testing.assert_allclose(one[name], two[name], rtol=1e-6, atol=1e-7)
