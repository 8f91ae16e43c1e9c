"""Models with batch normalization (mlp_bn, fedbn_cnn): their parameters carry the running
statistics, training mode normalizes with the statistics of a batch's real rows (weight > 0)
and local training moves the running statistics after each step, against NumPy; a batch
without real rows changes nothing, and a variance a server step took below 0 reads as 0; the
models without batch norm keep their parameters."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

from tests.conftest import toy_setup
from fedjax_bench import models
from fedjax_bench.core import keys, local, parts
from fedjax_bench.models.batch_norm import EPSILON, MOMENTUM

HIDDEN = (6, 5)


def _numpy_forward(params, x, w, train: bool):
  """mlp_bn by hand: (logits, new running statistics) for examples ``x``, the statistics
  of the rows with w > 0 in training mode (biased variance, as flax keeps it)."""
  p, stats = params["params"], params["batch_stats"]
  new = {}
  h = np.asarray(x, np.float64)
  for j in range(len(HIDDEN)):
    block, run = p[f"DenseBN_{j}"], stats[f"DenseBN_{j}"]["BatchNorm_0"]
    z = h @ np.asarray(block["DenseOI_0"]["kernel"]).T + np.asarray(block["DenseOI_0"]["bias"])
    if train:
      rows = z[np.asarray(w) > 0]
      mean, var = rows.mean(0), rows.var(0)
      new[f"DenseBN_{j}"] = {"BatchNorm_0": {
          "mean": MOMENTUM * np.asarray(run["mean"]) + (1 - MOMENTUM) * mean,
          "var": MOMENTUM * np.asarray(run["var"]) + (1 - MOMENTUM) * var}}
    else:
      mean, var = np.asarray(run["mean"]), np.asarray(run["var"])
    bn = block["BatchNorm_0"]
    z = (z - mean) / np.sqrt(var + EPSILON) * np.asarray(bn["scale"]) + np.asarray(bn["bias"])
    h = np.maximum(z, 0)
  out = p["DenseOI_0"]
  return h @ np.asarray(out["kernel"]).T + np.asarray(out["bias"]), new


def _task():
  task, world = toy_setup(num_clients=6, model="mlp_bn", hidden=1)
  task = task.__class__(**{**task.__dict__, "model": models.make(
      "mlp_bn", num_classes=3, is_image=False, mlp_hidden=HIDDEN)})
  return task, world


def _moved(params, seed=0):
  """Parameters and running statistics away from their initial values (scale 1, mean 0...)."""
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda a: jnp.asarray(np.asarray(a) + 0.3 * rng.normal(size=a.shape)
                                            + (0.5 if a.ndim == 1 else 0), jnp.float32),
                      params)


def test_parameters_carry_the_running_statistics_and_only_a_stateful_model_has_them():
  task, _ = _task()
  params = task.init_params(jax.random.PRNGKey(0))
  assert parts.has_state(params) and set(params) == {"params", "batch_stats"}
  stats = params["batch_stats"]["DenseBN_1"]["BatchNorm_0"]
  np.testing.assert_array_equal(stats["mean"], 0)
  np.testing.assert_array_equal(stats["var"], 1)
  plain, _ = toy_setup(num_clients=6, model="mlp", hidden=4)
  assert not parts.has_state(plain.init_params(jax.random.PRNGKey(0)))  # unchanged


def test_training_mode_counts_the_real_rows_and_evaluation_the_running_statistics():
  task, _ = _task()
  params = _moved(task.init_params(jax.random.PRNGKey(0)))
  x = task.x[:7]
  w = jnp.asarray([1, 1, 0, 1, 1, 0, 1], jnp.float32)
  logits, stats = task.forward(params, x, jax.random.PRNGKey(1), w > 0)
  want_logits, want_stats = _numpy_forward(params, x, w, train=True)
  real = np.asarray(w) > 0
  np.testing.assert_allclose(np.asarray(logits)[real], want_logits[real], rtol=1e-4, atol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
               stats, want_stats)
  got = task.logits(params, x)  # evaluation: the running statistics, nothing moves
  np.testing.assert_allclose(got, _numpy_forward(params, x, w, train=False)[0], rtol=1e-4,
                             atol=1e-5)
  # the training loss weighs only the real rows, and the padding rows do not move the stats
  y = task.y[:7]
  key = jax.random.PRNGKey(1)
  loss = task.loss(params, x, y, w, key)
  other = task.loss(params, x.at[2].set(100.0).at[5].set(-50.0), y, w, key)
  np.testing.assert_allclose(loss, other, rtol=1e-6)


def test_local_training_moves_the_running_statistics_after_each_step():
  task, _ = _task()
  params = _moved(task.init_params(jax.random.PRNGKey(0)), seed=3)
  i, steps, batch, lr = 4, 5, 4, 0.1
  key = jax.random.PRNGKey(7)
  spec = local.LocalSpec(steps, batch, "shuffle")
  got, _ = jax.jit(lambda p: local.train(
      p, key, task.counts[i], steps, fetch=task.client_data(i), loss_fn=task.loss,
      opt=optax.sgd(lr), spec=spec, max_count=task.max_count,
      update_state=task.update_state))(params)
  # a loop: SGD on the weights (the statistics' gradient is zero), the statistics by hand
  grad = jax.jit(jax.grad(task.loss))
  sampling = keys.for_purpose(key, "local_sampling")
  noise = keys.for_purpose(key, "local_noise")
  off, cnt = int(task.offsets[i]), int(task.counts[i])
  p, perm = params, jnp.arange(task.max_count, dtype=jnp.int32)
  assert cnt % batch  # the last batch of each epoch is partial: padding rows weigh 0
  for s in range(steps):
    pos, w, perm = local.batch_positions(sampling, s, cnt, perm, batch_size=batch,
                                         sampling="shuffle")
    x, y = task.x[off + pos], task.y[off + pos]
    g = grad(p, x, y, w, jax.random.fold_in(noise, s))
    _, stats = _numpy_forward(p, x, w, train=True)
    p = {"params": jax.tree.map(lambda a, b: a - lr * b, p["params"], g["params"]),
         "batch_stats": jax.tree.map(jnp.asarray, stats)}
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6), got, p)


def test_a_batch_without_real_rows_changes_nothing():
  task, _ = _task()
  params = _moved(task.init_params(jax.random.PRNGKey(0)))
  x, y, w = task.x[:4], task.y[:4], jnp.zeros(4)
  key = jax.random.PRNGKey(2)
  assert float(task.loss(params, x, y, w, key)) == 0.0
  g = jax.grad(task.loss)(params, x, y, w, key)
  assert all(np.all(np.asarray(a) == 0) for a in jax.tree.leaves(g))
  kept = task.update_state(params, params, x, w, key)
  jax.tree.map(np.testing.assert_array_equal, kept, params)


def test_the_fedbn_cnn_is_the_papers_digits_model():
  model = models.make("fedbn_cnn", num_classes=10, is_image=True)
  shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), jnp.zeros((1, 28, 28, 3)))
  count = lambda tree: sum(int(np.prod(a.shape)) for a in jax.tree.leaves(tree))
  # Table 9: conv 3-64-64-128 (5x5, each with BN), FC 6272-2048-512 (each with BN), FC 10
  convs = (3 * 25 * 64 + 64) + (64 * 25 * 64 + 64) + (64 * 25 * 128 + 128)
  dense = (6272 * 2048 + 2048) + (2048 * 512 + 512) + (512 * 10 + 10)
  norms = 2 * (64 + 64 + 128 + 2048 + 512)
  assert count(shapes["params"]) == convs + dense + norms == 14_219_210
  assert count(shapes["batch_stats"]) == norms


def test_a_variance_a_server_step_took_below_zero_reads_as_zero():
  task, _ = _task()
  params = _moved(task.init_params(jax.random.PRNGKey(0)))
  run = params["batch_stats"]["DenseBN_0"]["BatchNorm_0"]
  below = {**params, "batch_stats": {**params["batch_stats"], "DenseBN_0": {"BatchNorm_0": {
      **run, "var": -jnp.abs(run["var"])}}}}
  zero = {**params, "batch_stats": {**params["batch_stats"], "DenseBN_0": {"BatchNorm_0": {
      **run, "var": jnp.zeros_like(run["var"])}}}}
  got = task.logits(below, task.x[:5])
  assert np.all(np.isfinite(got))
  np.testing.assert_array_equal(got, task.logits(zero, task.x[:5]))
