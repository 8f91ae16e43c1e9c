"""The toyfl Gaussian mixture (docs/papers/fedawe.md): sizes, seeding, difficulty."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_bench import data, models
from fedjax_bench.data import toyfl
from fedjax_bench.errors import UsageError


@pytest.fixture(scope="module")
def toy():
  return data.load("toyfl", num_clients=100, partition_seed=0, alpha=0.1)


def _means(seed):
  """The class means, drawn first from the documented stream."""
  return np.random.default_rng(seed + toyfl.DATA_SEED_OFFSET).normal(0.0, 0.4, (10, 32))


def test_sizes_types_and_default_partition(toy):
  assert toy.name == "toyfl" and not toy.is_image and toy.num_classes == 10
  assert toy.feature_shape == (32,) and toy.augmentation == "none" and toy.normalize is None
  assert toy.train.x.shape == (20000, 32) and toy.train.x.dtype == np.float32
  assert toy.test_x.shape == (5000, 32) and toy.test_x.dtype == np.float32
  assert toy.train.y.dtype == np.int32 and toy.test_y.dtype == np.int32
  assert toy.train.num_clients == 100 and int(toy.train.counts.sum()) == 20000
  # Dirichlet(0.1) by default: most clients see a few classes only.
  assert toy.report()["mean_classes_per_client"] < 5
  counts = np.bincount(toy.train.y, minlength=10)
  assert counts.min() > 1800 and counts.max() < 2200  # uniform labels


def test_follows_the_generative_model(toy):
  x = np.concatenate([toy.train.x, toy.test_x])
  y = np.concatenate([toy.train.y, toy.test_y])
  noise = x - _means(0)[y]
  assert abs(noise.mean()) < 0.01 and abs(noise.std() - 1.0) < 0.01


def test_sizes_are_arguments_and_partition_is_chosen():
  d = data.load("toyfl", num_clients=7, partition="iid", partition_seed=3,
                toyfl_num_train=700, toyfl_num_test=90)
  assert d.train.num_examples == 700 and d.test_y.shape == (90,)
  assert sorted(d.train.counts.tolist()) == [100] * 7
  with pytest.raises(UsageError, match="natural"):
    data.load("toyfl", num_clients=7, partition="natural")


def test_deterministic_per_seed():
  kw = {"num_clients": 10, "toyfl_num_train": 500, "toyfl_num_test": 100}
  a = data.load("toyfl", partition_seed=1, **kw)
  b = data.load("toyfl", partition_seed=1, **kw)
  c = data.load("toyfl", partition_seed=2, **kw)
  assert np.array_equal(a.train.x, b.train.x) and np.array_equal(a.train.counts, b.train.counts)
  assert np.array_equal(a.test_x, b.test_x) and np.array_equal(a.test_y, b.test_y)
  assert not np.array_equal(a.test_x, c.test_x)
  # The data stream (seed + 1000) is apart from the partition's (seed).
  d = toyfl.gaussian_mixture(10, 1, partition="iid", num_train=500, num_test=100)
  assert np.array_equal(np.sort(a.test_x, axis=0), np.sort(d.test_x, axis=0))


def _fit_softmax_regression(x, y, steps=60):
  def loss(p):
    return optax.softmax_cross_entropy_with_integer_labels(x @ p["w"] + p["b"], y).mean()

  opt = optax.lbfgs()
  value_and_grad = optax.value_and_grad_from_state(loss)

  def step(carry, _):
    p, state = carry
    v, g = value_and_grad(p, state=state)
    updates, state = opt.update(g, state, p, value=v, grad=g, value_fn=loss)
    return (optax.apply_updates(p, updates), state), None

  p = {"w": jnp.zeros((x.shape[1], 10)), "b": jnp.zeros(10)}
  (p, _), _ = jax.jit(lambda p: jax.lax.scan(step, (p, opt.init(p)), None, length=steps))(p)
  return p


def test_centralised_softmax_regression_is_bayes_limited(toy):
  p = _fit_softmax_regression(jnp.asarray(toy.train.x), jnp.asarray(toy.train.y))
  pred = np.asarray(jnp.argmax(toy.test_x @ p["w"] + p["b"], -1))
  acc = float((pred == toy.test_y).mean())
  # Equal priors and identity covariance: the Bayes classifier is the nearest true mean.
  dist = ((toy.test_x[:, None, :] - _means(0)[None]) ** 2).sum(-1)
  bayes = float((dist.argmin(1) == toy.test_y).mean())
  assert 0.66 <= acc <= 0.75, acc  # about 70.7 % (docs/papers/fedawe.md, toyfl)
  assert abs(acc - bayes) < 0.015, (acc, bayes)


def test_zero_init_logreg_on_toyfl(toy):
  model = models.make("logreg", num_classes=10, is_image=False, zero_init=True)
  variables = model.init(jax.random.PRNGKey(0), jnp.asarray(toy.test_x[:2]))
  assert sum(a.size for a in jax.tree.leaves(variables)) == 330
  assert not np.any(np.asarray(model.apply(variables, jnp.asarray(toy.test_x[:5]))))
