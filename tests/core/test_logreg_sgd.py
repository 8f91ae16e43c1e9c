"""The fused logistic-regression kernel: against a NumPy transcription of local SGD, inside
the engine against XLA's loop, and where it applies."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_bench.core import kernels, local, rounds
from fedjax_bench.core.kernels import logreg_sgd
from fedjax_bench.settings import coerce
from tests.conftest import toy_setup

pytestmark = pytest.mark.skipif(kernels.compiler() is None, reason="no C++ compiler here")


def numpy_sgd(kernel, bias, x, y, w, steps, lr):
  """Softmax regression's local SGD in float64, step by step as written in the kernel's
  header: (kernel, bias, sum of the step losses)."""
  k, b = kernel.astype(np.float64), None if bias is None else bias.astype(np.float64)
  total = 0.0
  for s in range(min(steps, x.shape[0])):
    xs = x[s].astype(np.float64) / (255.0 if x.dtype == np.uint8 else 1.0)
    z = xs @ k.T + (0.0 if b is None else b)
    lse = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
    denom = max(w[s].sum(), 1e-12)
    total += np.sum(w[s] * (lse - z[np.arange(len(y[s])), y[s]])) / denom
    g = (np.exp(z - lse[:, None]) - np.eye(k.shape[0])[y[s]]) * w[s][:, None] / denom
    k = k - lr * g.T @ xs
    if b is not None:
      b = b - lr * g.sum(0)
  return k, b, total


def problem(dtype, *, steps=6, batch=7, dim=37, classes=5, seed=0):
  """Minibatches with a padding row (weight 0) and a step whose weights are all 0;
  dimensions that fill no whole vector or tile."""
  rng = np.random.default_rng(seed)
  x = (rng.integers(0, 256, (steps, batch, dim)).astype(np.uint8) if dtype == np.uint8
       else rng.normal(size=(steps, batch, dim)).astype(np.float32))
  y = rng.integers(0, classes, (steps, batch)).astype(np.int32)
  w = np.ones((steps, batch), np.float32)
  w[1, -1] = 0.0
  w[3] = 0.0
  kernel = (0.3 * rng.normal(size=(classes, dim))).astype(np.float32)
  bias = (0.1 * rng.normal(size=classes)).astype(np.float32)
  return kernel, bias, x, y, w


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("use_bias", [True, False])
@pytest.mark.parametrize("steps", [6, 4, 0])
def test_kernel_is_local_sgd(dtype, use_bias, steps):
  kernel, bias, x, y, w = problem(dtype)
  bias = bias if use_bias else None
  name = logreg_sgd.target(dtype)
  got = jax.jit(lambda k, b: logreg_sgd.train(k, b, x, y, w, steps, 0.5, name=name))(kernel,
                                                                                    bias)
  want = numpy_sgd(kernel, bias, x, y, w, steps, 0.5)
  np.testing.assert_allclose(got[0], want[0], rtol=2e-5, atol=2e-6)
  if use_bias:
    np.testing.assert_allclose(got[1], want[1], rtol=2e-5, atol=2e-6)
  else:
    assert got[1] is None
  np.testing.assert_allclose(got[2], want[2], rtol=2e-5, atol=2e-6)
  if steps == 0:
    np.testing.assert_array_equal(got[0], kernel)


def test_vmapped_clients_each_train_their_own():
  """Under vmap (a chunk of clients, and a grid of step sizes above it) every client's
  row is its own local SGD, bit for bit as trained alone."""
  probs = [problem(np.uint8, seed=s) for s in range(3)]
  stack = [np.stack(a) for a in zip(*probs)]
  steps, lrs = np.array([6, 2, 5], np.int32), np.array([0.1, 0.4], np.float32)
  name = logreg_sgd.target(np.uint8)
  one = lambda k, b, x, y, w, s, lr: logreg_sgd.train(k, b, x, y, w, s, lr, name=name)
  over_clients = jax.vmap(one, in_axes=(0, 0, 0, 0, 0, 0, None))
  over_grid = jax.jit(jax.vmap(over_clients, in_axes=(None,) * 6 + (0,)))
  k, b, loss = over_grid(*stack, steps, lrs)
  assert k.shape == (2, 3) + probs[0][0].shape and loss.shape == (2, 3)
  for g, lr in enumerate(lrs):
    for c, (kernel, bias, x, y, w) in enumerate(probs):
      alone = jax.jit(lambda k, b: one(k, b, x, y, w, steps[c], lr))(kernel, bias)
      np.testing.assert_array_equal(k[g, c], alone[0])
      np.testing.assert_array_equal(b[g, c], alone[1])
      np.testing.assert_array_equal(loss[g, c], alone[2])


def _round(task, world, fused: bool, **extra):
  hp = dict(client_lr=0.3, batch_size=5, sampling="shuffle", client_width=2,
            fused_logreg=fused, **extra)
  hp = coerce(rounds.Synchronous, hp)
  params = task.init_params(jax.random.PRNGKey(1))
  c = rounds.Cohort(jnp.arange(task.num_clients), jnp.ones(task.num_clients, bool))
  return jax.jit(lambda p: rounds.train(task, world, hp, p, c, jax.random.PRNGKey(2), 0))(params)


def _calls_kernel(task, world, **hp) -> bool:
  hp = coerce(rounds.Synchronous, dict(client_lr=0.3, batch_size=5, **hp))
  params = task.init_params(jax.random.PRNGKey(1))
  c = rounds.Cohort(jnp.arange(task.num_clients), jnp.ones(task.num_clients, bool))
  hlo = jax.jit(lambda p: rounds.train(task, world, hp, p, c, jax.random.PRNGKey(2), 0)
                ).lower(params).as_text()
  return "fedjax_bench_LogregSgd" in hlo


def test_engine_round_matches_xla_loop():
  """One round of local training of a cohort: the kernel's deltas and losses are XLA's
  loop's to float rounding."""
  task, world = toy_setup()
  assert _calls_kernel(task, world) and not _calls_kernel(task, world, fused_logreg=False)
  (fused_deltas, fused_losses), (xla_deltas, xla_losses) = (
      _round(task, world, True), _round(task, world, False))
  for a, b in zip(jax.tree.leaves(fused_deltas), jax.tree.leaves(xla_deltas)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert np.abs(b).max() > 1e-3  # the clients moved
  np.testing.assert_allclose(fused_losses, xla_losses, rtol=1e-5)


def test_only_plain_sgd_on_the_task_loss_takes_the_kernel():
  task, world = toy_setup()
  assert _calls_kernel(task, world)
  assert not _calls_kernel(task, world, client_opt="momentum")
  assert not _calls_kernel(task, world, client_grad_clip=1.0)
  params = task.init_params(jax.random.PRNGKey(1))
  hp = coerce(rounds.Synchronous, dict(client_lr=0.3, batch_size=5))
  c = rounds.Cohort(jnp.arange(task.num_clients), jnp.ones(task.num_clients, bool))
  own = lambda p, *a: task.loss(p, *a)  # an algorithm's own objective (FedProx's, say)
  hlo = jax.jit(lambda p: rounds.train(task, world, hp, p, c, jax.random.PRNGKey(2), 0,
                                       loss_fn=own)).lower(params).as_text()
  assert "fedjax_bench_LogregSgd" not in hlo


def test_other_models_and_objectives_have_no_kernel():
  from dataclasses import replace
  from fedjax_bench import models
  task, _ = toy_setup()
  assert task.sgd_kernel(task.x.dtype) is not None
  assert replace(task, l2=0.1).sgd_kernel(task.x.dtype) is None
  assert replace(task, loss_type="squared_error").sgd_kernel(task.x.dtype) is None
  assert replace(task, model=models.MLP((8,), 3)).sgd_kernel(task.x.dtype) is None
  assert task.sgd_kernel(np.int8) is None


def test_without_a_compiler_xla_runs(monkeypatch, capsys, tmp_path):
  monkeypatch.setattr(kernels, "_targets", {})
  monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
  monkeypatch.setenv("FEDJAX_BENCH_CACHE", str(tmp_path / "cache"))
  assert logreg_sgd.target(np.uint8) is None
  assert "not available" in capsys.readouterr().err
  monkeypatch.setattr(kernels, "_targets", {})
  monkeypatch.setenv(kernels.DISABLE_ENV, "off")
  assert logreg_sgd.target(np.uint8) is None


def test_source_hash_is_the_kernels():
  """An edit of the C++ must change a binding the runs' code records hold."""
  import hashlib
  from pathlib import Path
  source = Path(logreg_sgd.__file__).with_name(logreg_sgd.SOURCE).read_bytes()
  assert hashlib.sha256(source).hexdigest() == logreg_sgd.SOURCE_SHA256, (
      "logreg_sgd.cc changed: set logreg_sgd.SOURCE_SHA256 to its new SHA-256")
