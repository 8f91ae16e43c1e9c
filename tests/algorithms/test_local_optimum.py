"""The F_i* estimate of loss-aware aggregation (--local_optimum=estimate, docs/papers/hetero_agg.md):
against closed-form per-client minima on convex tasks, through the algorithm, per seed
with --data_per_seed, and "zero" (the default) leaving the round unchanged."""

import jax
import numpy as np
import pytest

from tests.conftest import toy_dataset
from tests.data.test_data_per_seed import _fake_mnist, _run
from fedjax_bench import models
from fedjax_bench.algorithms import fedmax, local_optimum
from fedjax_bench.core import keys
from fedjax_bench.task.build import make_task
from fedjax_bench.data.federated import Dataset, FederatedData
from fedjax_bench.errors import UsageError
from fedjax_bench.sim import participation, world as world_lib

HP = dict(client_lr=0.1, batch_size=64, sampling="shuffle", server_opt="sgd", server_lr=1.0,
          client_width=0, local_steps=2, softmax_beta=1.0)


def _least_squares(sizes=(5, 9, 14, 20), dim=3, seed=0):
  """Noisy linear targets, a different line per client: F_i* = its residual > 0."""
  rng = np.random.default_rng(seed)
  xs, ys = [], []
  for n in sizes:
    x = rng.normal(size=(n, dim)).astype(np.float32)
    ys.append((x @ rng.normal(size=dim) + rng.normal() + rng.normal(size=n)).astype(np.float32))
    xs.append(x)
  ds = Dataset("ls_toy", FederatedData.from_clients(xs, ys), xs[0], ys[0], 1, (dim,), False)
  task = make_task(ds, models.make("linear", num_classes=1, is_image=False, bias=True),
                   loss_type="squared_error", train_eval_examples=0)
  return task, xs, ys


def _lstsq_minimum(x, y):
  a = np.concatenate([x, np.ones((len(x), 1))], 1).astype(np.float64)
  theta = np.linalg.lstsq(a, y.astype(np.float64), rcond=None)[0]
  return 0.5 * np.mean(np.square(a @ theta - y))


def test_purpose_key_is_its_own():
  import zlib
  k = keys.init_key(keys.root(0))
  mine = local_optimum.key_of(k)
  # the key it had as its own crc32 fold before the purpose joined keys.PURPOSES
  np.testing.assert_array_equal(mine, jax.random.fold_in(
      k, np.uint32(zlib.crc32(b"fedjax_bench/local_optimum"))))
  for name in keys.PURPOSES:
    if name != "local_optimum":
      assert not np.array_equal(mine, keys.for_purpose(k, name)), name


def test_estimate_is_each_clients_least_squares_minimum():
  """Full-batch GD (every client smaller than the batch) to the NumPy minimum."""
  task, xs, ys = _least_squares()
  params = task.init_params(jax.random.PRNGKey(0))
  est = local_optimum.estimate(task, params, jax.random.PRNGKey(1), steps=3000, lr=0.1,
                               batch_size=64)
  want = [_lstsq_minimum(x, y) for x, y in zip(xs, ys)]
  assert min(want) > 0.02  # a real per-client constant, not 0
  np.testing.assert_allclose(np.asarray(est), want, rtol=1e-4)


def test_estimate_is_the_label_entropy_of_a_constant_input_classifier():
  """Logistic regression on all-zero inputs: min of the mean cross-entropy is the entropy
  of the client's label mix; with minibatches of 4 (shuffled epochs) to 1%."""
  mixes = [(4, 4, 4), (10, 1, 1), (2, 6, 4), (6, 6, 0)]
  ys = [np.repeat(np.arange(3), m).astype(np.int32) for m in mixes]
  xs = [np.zeros((len(y), 2), np.float32) for y in ys]
  ds = Dataset("const", FederatedData.from_clients(xs, ys), xs[0], ys[0], 3, (2,), False)
  task = make_task(ds, models.make("logreg", num_classes=3, is_image=False),
                   train_eval_examples=0)
  params = task.init_params(jax.random.PRNGKey(0))
  est = np.asarray(local_optimum.estimate(task, params, jax.random.PRNGKey(1), steps=4000,
                                          lr=0.5, batch_size=4))
  freq = [np.asarray(m, float) / sum(m) for m in mixes]
  entropy = [-np.sum(f[f > 0] * np.log(f[f > 0])) for f in freq]
  np.testing.assert_allclose(est[:3], entropy[:3], rtol=1e-2)
  # the two-class client's infimum (ln 2) is approached from above
  assert entropy[3] <= est[3] < entropy[3] + 0.01
  # never above the loss at the start
  start = np.asarray([local_optimum.own_loss(task, params, i) for i in range(4)])
  assert np.all(est <= start)


def _fedsoftmax_round(task, **hp):
  n = task.num_clients
  world = world_lib.make(participation.full(n), np.full(n, 2))
  alg = fedmax.fedsoftmax.build(task, world, {**HP, "record_alpha": True, **hp})
  server, clients = jax.jit(alg.init)(jax.random.PRNGKey(3))
  server2, _, metrics = jax.jit(alg.round)(server, clients, jax.random.PRNGKey(4))
  return server, server2, metrics


def test_weights_read_the_gap_to_the_estimate():
  """A round's α is softmax(log p + β (F_i(w_0) − F̂_i*)) with F̂_i* the closed form's."""
  task, xs, ys = _least_squares()
  server, _, m = _fedsoftmax_round(task, local_optimum="estimate", local_optimum_steps=3000)
  want_fstar = np.array([_lstsq_minimum(x, y) for x, y in zip(xs, ys)])
  np.testing.assert_allclose(np.asarray(server.aux), want_fstar, rtol=1e-4)
  np.testing.assert_allclose(float(m["local_optimum_mean"]), want_fstar.mean(), rtol=1e-4)
  f0 = np.array([float(local_optimum.own_loss(task, server.params, i)) for i in range(4)])
  p = np.array([len(y) for y in ys], float)
  logits = np.log(p / p.sum()) + (f0 - want_fstar)
  alpha = np.exp(logits - logits.max())
  np.testing.assert_allclose([float(m[fedmax.alpha_name(i)]) for i in range(4)],
                             alpha / alpha.sum(), rtol=1e-4)
  # F_i* = 0 weighs by the losses themselves: another α here
  _, _, zero = _fedsoftmax_round(task)
  assert not np.allclose([float(zero[fedmax.alpha_name(i)]) for i in range(4)],
                         alpha / alpha.sum(), rtol=1e-3)
  assert "local_optimum_mean" not in zero


def test_zero_is_the_round_without_the_setting():
  """--local_optimum=zero (the default) builds the round it replaced: no aux, same
  numbers bit for bit (tests/algorithms/test_reference_curves.py guards the curves too)."""
  task = make_task(toy_dataset(), models.make("logreg", num_classes=3, is_image=False),
                   train_eval_examples=0)
  default, after, m = _fedsoftmax_round(task)
  given, after_given, m_given = _fedsoftmax_round(task, local_optimum="zero")
  assert default.aux == () and given.aux == ()
  for a, b in zip(jax.tree.leaves((after, m)), jax.tree.leaves((after_given, m_given))):
    np.testing.assert_array_equal(a, b)


def test_each_seed_estimates_on_its_own_data(monkeypatch):
  """--data_per_seed: seed s's estimate (inside the vectorized init, on its traced view)
  is that of the run of seed s alone on its data seed."""
  from fedjax_bench import data
  monkeypatch.setattr(data, "load_arrays", _fake_mnist)
  cfg = dict(algo="fedsoftmax", dataset="mnist", model="logreg", num_clients=8,
             partition="dirichlet", alpha=0.3, local_epochs=1.0, batch_size=32,
             client_lr=0.1, train_eval_examples=0, local_optimum="estimate",
             local_optimum_steps=30)
  together, _ = _run({**cfg, "data_per_seed": True}, [0, 2])
  for k, seed in enumerate((0, 2)):
    alone, _ = _run({**cfg, "partition_seed": seed}, [seed])
    for name in ("local_optimum_mean", "local_optimum_max", "alpha_p_l1", "test_loss"):
      np.testing.assert_allclose(together[name][:, 0, k], alone[name][:, 0, 0], rtol=1e-5,
                                 atol=1e-6, err_msg=name)
  assert together["local_optimum_mean"][-1, 0, 0] != together["local_optimum_mean"][-1, 0, 1]


def test_steps_without_estimate_are_refused():
  from fedjax_bench import config
  with pytest.raises(UsageError, match="local_optimum_steps"):
    config.resolve(dict(algo="fedsoftmax", dataset="synthetic", local_optimum_steps=10))
  with pytest.raises(UsageError, match="local_optimum"):
    config.resolve(dict(algo="fedsoftmax", dataset="synthetic", local_optimum="exact"))
