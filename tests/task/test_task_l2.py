"""Task's l2 penalty, its optimum metrics, and logreg without bias."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.conftest import toy_dataset

from fedjax_bench import models
from fedjax_bench.task.build import make_task
from fedjax_bench.task.task import Optimum, with_optimum
from fedjax_bench.errors import UsageError


def _cross_entropy(params, x, y):
  """Plain NumPy softmax cross-entropy of the logreg model, per example."""
  p = params["DenseOI_0"]
  logits = x @ np.asarray(p["kernel"], np.float64).T
  if "bias" in p:
    logits = logits + np.asarray(p["bias"], np.float64)
  m = logits.max(1, keepdims=True)
  log_z = m[:, 0] + np.log(np.exp(logits - m).sum(1))
  return log_z - logits[np.arange(len(y)), y]


def _sum_sq(params):
  return sum(float(np.sum(np.square(np.asarray(a, np.float64)))) for a in jax.tree.leaves(params))


@pytest.fixture(scope="module")
def setup():
  ds = toy_dataset()
  model = models.make("logreg", num_classes=3, is_image=False)
  params = model.init(jax.random.PRNGKey(1), jnp.zeros((1, 5)))["params"]
  return ds, model, params


def test_loss_adds_half_l2_times_the_squared_norm(setup):
  ds, model, params = setup
  l2 = 0.37
  task = make_task(ds, model, l2=l2)
  x, y = ds.train.x[:9], ds.train.y[:9]
  w = np.array([1, 1, 0.5, 0, 1, 2, 1, 1, 0], np.float32)
  ce = _cross_entropy(params, x.astype(np.float64), y)
  want = np.sum(w * ce) / np.sum(w) + l2 / 2 * _sum_sq(params)
  got = float(task.loss(params, jnp.asarray(x), jnp.asarray(y), jnp.asarray(w)))
  assert got == pytest.approx(want, rel=1e-6)


def test_evaluate_train_loss_is_f_and_test_loss_is_plain(setup):
  ds, model, params = setup
  l2 = 0.25
  task = make_task(ds, model, l2=l2, train_eval_examples=0)
  out = task.evaluate(params)
  f = np.mean(_cross_entropy(params, ds.train.x.astype(np.float64), ds.train.y))
  f += l2 / 2 * _sum_sq(params)
  test = np.mean(_cross_entropy(params, ds.test_x.astype(np.float64), ds.test_y))
  assert float(out["train_loss"]) == pytest.approx(f, rel=1e-6)
  assert float(out["test_loss"]) == pytest.approx(test, rel=1e-6)
  assert set(out) == {"test_accuracy", "test_loss", "train_loss"}


def test_l2_zero_is_bitwise_unchanged(setup):
  ds, model, params = setup
  plain, zero = make_task(ds, model), make_task(ds, model, l2=0.0)
  x, y = jnp.asarray(ds.train.x[:8]), jnp.asarray(ds.train.y[:8])
  w = jnp.ones(8)
  per_example = plain.pointwise_loss(plain.logits(params, x), y)
  old = jnp.sum(w * per_example) / jnp.maximum(jnp.sum(w), 1e-12)  # the l2-free formula
  assert np.array_equal(np.asarray(zero.loss(params, x, y, w)), np.asarray(old))
  a, b = plain.evaluate(params), zero.evaluate(params)
  assert a.keys() == b.keys()
  for k in a:
    assert np.array_equal(np.asarray(a[k]), np.asarray(b[k]), equal_nan=True), k


def test_grad_norm_includes_the_penalty(setup):
  ds, model, params = setup
  l2 = 0.5
  task = make_task(ds, model, l2=l2, train_eval_examples=0, eval_grad_norm=True)
  x, y = jnp.asarray(ds.train.x), jnp.asarray(ds.train.y)
  g = jax.grad(lambda p: task.loss(p, x, y, jnp.ones(x.shape[0])))(params)
  want = sum(float(jnp.sum(jnp.square(a))) for a in jax.tree.leaves(g))
  assert float(task.evaluate(params)["grad_norm_sq"]) == pytest.approx(want, rel=1e-5)


def test_negative_l2_is_refused(setup):
  ds, model, _ = setup
  with pytest.raises(ValueError, match="l2"):
    make_task(ds, model, l2=-1.0)


def test_an_optimum_scores_the_full_training_set(setup):
  ds, model, params = setup
  opt = Optimum(f_star=0.125, params=jax.tree.map(lambda a: np.asarray(a, np.float64) * 0.5,
                                                  params))
  task = make_task(ds, model, train_eval_examples=10, l2=0.1, optimum=opt)
  assert task.train_eval_x.shape == task.x.shape
  full = make_task(ds, model, train_eval_examples=0, l2=0.1)
  out, ref = task.evaluate(params), full.evaluate(params)
  assert float(out["train_loss"]) == float(ref["train_loss"])
  assert float(out["optimality_gap"]) == pytest.approx(float(ref["train_loss"]) - 0.125,
                                                       abs=1e-7)
  # θ - θ* = θ/2: dist = ||θ||²/4, rel = 1.
  assert float(out["dist_sq"]) == pytest.approx(_sum_sq(params) / 4, rel=1e-6)
  assert float(out["rel_dist_sq"]) == pytest.approx(1.0, rel=1e-6)
  # The subset variant keeps its subset; with_optimum(None) removes the metrics only.
  subset = make_task(ds, model, train_eval_examples=10)
  assert subset.train_eval_x.shape[0] == 10
  assert "optimality_gap" not in with_optimum(task, None).evaluate(params)


def test_zero_optimum_reports_no_relative_distance(setup):
  ds, model, params = setup
  zero = jax.tree.map(lambda a: np.zeros(a.shape), params)
  task = make_task(ds, model, optimum=Optimum(f_star=0.0, params=zero))
  out = task.evaluate(params)
  assert "rel_dist_sq" not in out
  assert float(out["dist_sq"]) == pytest.approx(_sum_sq(params), rel=1e-6)
  no_theta = make_task(ds, model, optimum=Optimum(f_star=0.0)).evaluate(params)
  assert "dist_sq" not in no_theta and "optimality_gap" in no_theta


def test_evaluate_jits_with_an_optimum(setup):
  ds, model, params = setup
  opt = Optimum(f_star=0.1, params=jax.tree.map(np.asarray, params))
  task = make_task(ds, model, l2=1e-3, optimum=opt)
  out = jax.jit(task.evaluate)(params)
  assert float(out["dist_sq"]) == 0.0 and float(out["rel_dist_sq"]) == 0.0


# --- logistic regression without bias -----------------------------------------------

def test_logreg_without_bias_has_d_times_c_parameters():
  model = models.make("logreg", num_classes=10, is_image=True, bias=False)
  p = model.init(jax.random.PRNGKey(0), jnp.zeros((2, 28, 28, 1)))["params"]
  assert sum(a.size for a in jax.tree.leaves(p)) == 7840
  assert jax.tree.map(jnp.shape, p) == {"DenseOI_0": {"kernel": (10, 784)}}
  x = jax.random.uniform(jax.random.PRNGKey(2), (3, 28, 28, 1))
  assert jnp.allclose(model.apply({"params": p}, x), x.reshape(3, -1) @ p["DenseOI_0"]["kernel"].T)
  default = models.make("logreg", num_classes=10, is_image=True)
  assert default == models.make("logreg", num_classes=10, is_image=True, bias=True)
  zero = models.make("logreg", num_classes=10, is_image=True, bias=False, zero_init=True)
  pz = zero.init(jax.random.PRNGKey(0), jnp.zeros((1, 28, 28, 1)))["params"]
  assert not np.any(np.asarray(pz["DenseOI_0"]["kernel"]))


def test_bias_option_is_for_logreg_and_linear_only():
  with pytest.raises(UsageError, match="bias"):
    models.make("mlp", num_classes=10, is_image=False, bias=False)
