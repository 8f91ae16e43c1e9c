"""The AREA quadratic toys (docs/papers/area.md, our E5) with the scalar linear model."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_bench import data, models
from fedjax_bench.task import optimum
from fedjax_bench.task.build import make_task
from fedjax_bench.data import quadratic
from fedjax_bench.errors import UsageError


def _task(variant="heterogeneous", num_clients=50, l2=0.0):
  ds = data.load("quadratic", num_clients=num_clients, quadratic_variant=variant)
  model = models.make("linear", num_classes=ds.num_classes, is_image=ds.is_image)
  task = make_task(ds, model, loss_type=data.LOSS_TYPES["quadratic"], l2=l2)
  return ds, optimum.attach(task)


def _x(value, dtype=jnp.float32):
  return {"DenseOI_0": {"kernel": jnp.full((1, 1), value, dtype)}}


def test_layout_and_client_losses():
  ds, task = _task()
  assert ds.train.num_clients == 50 and list(ds.train.counts) == [1] * 50
  assert np.array_equal(ds.train.x[:, 0], 100 * np.arange(1, 51))
  assert np.array_equal(ds.train.y, np.ones(50)) and ds.train.y.dtype == np.float32
  assert np.array_equal(ds.test_x, ds.train.x) and np.array_equal(ds.test_y, ds.train.y)
  params = task.init_params(jax.random.PRNGKey(3))
  assert jax.tree.map(jnp.shape, params) == {"DenseOI_0": {"kernel": (1, 1)}}
  assert float(params["DenseOI_0"]["kernel"][0, 0]) == 0.0  # x0 = 0
  x = 1e-3
  for i in (1, 7, 50):
    row = slice(i - 1, i)
    got = task.loss(_x(x), task.x[row], task.y[row], jnp.ones(1))
    assert float(got) == pytest.approx(0.5 * (100 * i * x - 1) ** 2, rel=1e-6)


def test_x_star_matches_the_spec():
  _, task = _task()
  x_star = float(task.optimum.params["DenseOI_0"]["kernel"][0, 0])
  assert x_star == pytest.approx(quadratic.heterogeneous_x_star(50), rel=1e-12)
  assert x_star == pytest.approx(1275 / (100 * 42925), rel=1e-12)
  assert round(x_star, 8) == 2.9703e-4
  a = 100.0 * np.arange(1, 51)
  f_star = 0.5 - 0.5 * a.sum() ** 2 / (50 * np.square(a).sum())
  assert task.optimum.f_star == pytest.approx(f_star, rel=1e-12)
  assert task.optimum.method == "closed_form"


def test_gap_and_relative_distance_at_known_points():
  _, task = _task()
  x_star, f_star = quadratic.heterogeneous_x_star(50), task.optimum.f_star
  at_zero = task.evaluate(_x(0.0))
  assert float(at_zero["train_loss"]) == pytest.approx(0.5, rel=1e-7)
  assert float(at_zero["optimality_gap"]) == pytest.approx(0.5 - f_star, rel=1e-6)
  assert float(at_zero["rel_dist_sq"]) == pytest.approx(1.0, rel=1e-6)
  at_double = task.evaluate(_x(2 * x_star))
  assert float(at_double["rel_dist_sq"]) == pytest.approx(1.0, rel=1e-5)
  # f(x) - f* = ½ (Σ a²/n) (x - x*)² exactly for a quadratic.
  curvature = np.mean(np.square(100.0 * np.arange(1, 51)))
  assert float(at_double["optimality_gap"]) == pytest.approx(0.5 * curvature * x_star ** 2,
                                                             rel=1e-5)
  with jax.enable_x64(True):  # float64 runs resolve our E1's tiny distances (docs/papers/area.md)
    near = jax.jit(task.evaluate)(_x(x_star * (1 + 1e-9), jnp.float64))
    assert near["rel_dist_sq"].dtype == jnp.float64
    assert float(near["rel_dist_sq"]) == pytest.approx(1e-18, rel=1e-3)
    assert float(task.evaluate(_x(x_star, jnp.float64))["rel_dist_sq"]) == 0.0
    assert abs(float(task.evaluate(_x(x_star, jnp.float64))["optimality_gap"])) < 1e-15


def test_l2_moves_the_closed_form():
  _, task = _task(l2=1e4)
  a = 100.0 * np.arange(1, 51)
  x_star = float(task.optimum.params["DenseOI_0"]["kernel"][0, 0])
  assert x_star == pytest.approx(a.sum() / (np.square(a).sum() + 50 * 1e4), rel=1e-12)


def test_two_clients_variant():
  ds, task = _task("two_clients", num_clients=2)
  assert list(ds.train.counts) == [1, 1]
  for x in (-0.7, 0.0, 3.0):
    for row, sign in ((0, 1.0), (1, -1.0)):
      got = task.loss(_x(x), task.x[row:row + 1], task.y[row:row + 1], jnp.ones(1))
      assert float(got) == pytest.approx((x - sign) ** 2, rel=1e-6)
  assert task.optimum.params["DenseOI_0"]["kernel"][0, 0] == 0.0
  assert task.optimum.f_star == pytest.approx(1.0, rel=1e-6)
  out = task.evaluate(_x(3.0))
  assert "rel_dist_sq" not in out  # θ* = 0
  assert float(out["dist_sq"]) == pytest.approx(9.0)
  assert float(out["optimality_gap"]) == pytest.approx(9.0, rel=1e-5)


def test_bad_options():
  with pytest.raises(UsageError, match="num_clients=2"):
    data.load("quadratic", num_clients=5, quadratic_variant="two_clients")
  with pytest.raises(UsageError, match="heterogeneous, two_clients"):
    data.load("quadratic", num_clients=5, quadratic_variant="cubic")
  with pytest.raises(UsageError, match="natural"):
    data.load("quadratic", num_clients=5, partition="dirichlet")
  assert "quadratic" in data.DATASETS and "linear" in models.MODELS


def test_linear_model_options():
  with_bias = models.make("linear", num_classes=1, is_image=False, bias=True)
  p = with_bias.init(jax.random.PRNGKey(0), jnp.zeros((1, 1)))["params"]
  assert sum(a.size for a in jax.tree.leaves(p)) == 2
  assert not any(np.any(np.asarray(a)) for a in jax.tree.leaves(p))
  with pytest.raises(UsageError, match="normalization"):
    models.make("linear", num_classes=1, is_image=True, normalize=((0.5,), (0.2,)))
