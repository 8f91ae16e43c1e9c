"""task/optimum.py: the L-BFGS f* against a NumPy Newton solve, the closed form, the cache."""

import time

import jax
import numpy as np
import pytest
from tests.conftest import shared_tfds_dir, toy_dataset

from fedjax_bench import data, models
from fedjax_bench.task import optimum
from fedjax_bench.task.build import make_task
from fedjax_bench.data.federated import Dataset, FederatedData


def _features(x, bias):
  x = np.asarray(x, np.float64).reshape(len(x), -1)
  return np.concatenate([x, np.ones((len(x), 1))], 1) if bias else x


def _newton(x, y, classes, l2, iters=30):
  """Independent reference: Newton's method on mean softmax cross-entropy + (l2/2)||W||²
  with the exact Hessian. Returns (f*, W* [C, D], ||grad||)."""
  n, d = x.shape
  onehot = np.eye(classes)[y]

  def parts(w):
    z = x @ w.T
    z = z - z.max(1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    f = np.mean(np.log(np.exp(z).sum(1)) - z[np.arange(n), y]) + l2 / 2 * np.sum(w * w)
    return f, p, (p - onehot).T @ x / n + l2 * w

  w = np.zeros((classes, d))
  for _ in range(iters):
    _, p, g = parts(w)
    a = np.einsum("ja,ab->jab", p, np.eye(classes)) - np.einsum("ja,jb->jab", p, p)
    h = np.einsum("jab,jd,je->adbe", a, x, x).reshape(classes * d, classes * d) / n
    h += l2 * np.eye(classes * d)
    w = w - np.linalg.solve(h, g.ravel()).reshape(classes, d)
  f, _, g = parts(w)
  return f, w, np.linalg.norm(g)


@pytest.mark.parametrize("bias", [True, False])
def test_lbfgs_matches_newton(bias):
  ds = toy_dataset()
  l2 = 0.02
  task = make_task(ds, models.make("logreg", num_classes=3, is_image=False, bias=bias), l2=l2)
  opt = optimum.solve(task, verbose=False)
  f_ref, w_ref, g_ref = _newton(_features(ds.train.x, bias), ds.train.y, 3, l2)
  assert g_ref < 1e-12
  assert opt.method == "lbfgs" and opt.grad_norm <= 1e-7 and opt.iterations > 0
  assert abs(opt.f_star - f_ref) < 1e-12
  kernel = opt.params["DenseOI_0"]["kernel"]
  w = np.concatenate([kernel, opt.params["DenseOI_0"]["bias"][:, None]], 1) if bias else kernel
  assert kernel.dtype == np.float64 and np.max(np.abs(w - w_ref)) < 1e-6
  # f* does not depend on the partition: the same examples split otherwise, same key.
  x, y = ds.train.x, ds.train.y
  perm = np.random.default_rng(0).permutation(len(y))
  parts = np.array_split(perm, 4)
  other = Dataset("toy", FederatedData.from_partition(x, y, parts), ds.test_x, ds.test_y, 3,
                  (5,), False)
  resplit = make_task(other, task.model, l2=l2)
  assert optimum.cache_key(resplit) == optimum.cache_key(task)
  assert optimum.cache_key(make_task(ds, task.model, l2=0.03)) != optimum.cache_key(task)
  dropped = Dataset("toy", FederatedData.from_partition(x, y, [perm[1:]]), ds.test_x,
                    ds.test_y, 3, (5,), False)
  assert optimum.cache_key(make_task(dropped, task.model, l2=l2)) != optimum.cache_key(task)


def test_cache_hit_and_corrupt_cache(tmp_path, monkeypatch, capsys):
  ds = toy_dataset()
  task = make_task(ds, models.make("logreg", num_classes=3, is_image=False), l2=0.05)
  first = optimum.find(task, cache_dir=str(tmp_path))
  assert "solving for f*" in capsys.readouterr().out and not first.from_cache
  [path] = (tmp_path / "optimum").glob("*.npz")
  assert path == optimum.cache_path(optimum.cache_key(task, tol=1e-7, max_iter=10000),
                                    str(tmp_path))
  real_solve = optimum.solve
  calls = []

  def counting_solve(*args, **kwargs):
    calls.append(1)
    return real_solve(*args, **kwargs)

  monkeypatch.setattr(optimum, "solve", counting_solve)
  hit = optimum.find(task, cache_dir=str(tmp_path))
  assert not calls and hit.from_cache and "cached" in capsys.readouterr().out
  assert hit.f_star == first.f_star and hit.grad_norm == first.grad_norm
  assert hit.iterations == first.iterations
  for a, b in zip(jax.tree.leaves(hit.params), jax.tree.leaves(first.params)):
    assert np.array_equal(a, b)
  assert jax.tree.structure(hit.params) == jax.tree.structure(first.params)

  for damage in (b"not an npz", path.read_bytes()[:100]):
    path.write_bytes(damage)
    again = optimum.find(task, cache_dir=str(tmp_path))
    assert calls and not again.from_cache and "corrupt" in capsys.readouterr().out
    assert again.f_star == first.f_star
    calls.clear()
    assert optimum.find(task, cache_dir=str(tmp_path)).from_cache and not calls


def test_cache_dir_follows_the_environment(tmp_path, monkeypatch):
  monkeypatch.setenv("FEDJAX_BENCH_CACHE", str(tmp_path))
  assert optimum.cache_path({"a": 1}).parent == tmp_path / "optimum"


@pytest.mark.parametrize("bias,l2", [(False, 0.0), (True, 0.3)])
def test_least_squares_closed_form(bias, l2):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(40, 3)).astype(np.float32)
  y = (x @ [1.0, -2.0, 0.5] + 0.3 * rng.normal(size=40)).astype(np.float32)
  ds = Dataset("ls", FederatedData.from_partition(x, y, np.array_split(np.arange(40), 4)),
               x[:5], y[:5], 1, (3,), False)
  task = make_task(ds, models.make("linear", num_classes=1, is_image=False, bias=bias),
                   loss_type="squared_error", l2=l2)
  opt = optimum.find(task, cache_dir="/nonexistent")  # a closed form needs no cache
  a = _features(x, bias)
  theta = np.linalg.solve(a.T @ a / 40 + l2 * np.eye(a.shape[1]), a.T @ y / 40)
  f = 0.5 * np.mean(np.square(a @ theta - y)) + l2 / 2 * theta @ theta
  assert opt.method == "closed_form" and opt.grad_norm < 1e-12
  assert opt.f_star == pytest.approx(f, rel=1e-12)
  got = opt.params["DenseOI_0"]
  np.testing.assert_allclose(got["kernel"][0], theta[:3], rtol=1e-10)
  if bias:
    np.testing.assert_allclose(got["bias"], theta[3:], rtol=1e-10)
  assert "bias" in got if bias else "bias" not in got


@pytest.mark.skipif(shared_tfds_dir() is None, reason="real MNIST (../shared/tfds) not found")
def test_mnist_f_star(tmp_path):
  """The AREA paper's §5.1: logreg without bias, ν = 1e-3 on MNIST (about a minute)."""
  ds = data.load("mnist", num_clients=128, partition="dirichlet", alpha=0.1,
                 data_dir=str(shared_tfds_dir()))
  model = models.make("logreg", num_classes=10, is_image=True, bias=False)
  task = make_task(ds, model, l2=1e-3)
  start = time.perf_counter()
  opt = optimum.find(task, cache_dir=str(tmp_path))
  seconds = time.perf_counter() - start
  scored = optimum.attach(task, cache_dir=str(tmp_path))
  out = jax.jit(scored.evaluate)(jax.tree.map(lambda a: a.astype(np.float32), opt.params))
  print(f"\nMNIST f*={opt.f_star:.10f} |grad|={opt.grad_norm:.1e} "
        f"iterations={opt.iterations} solve={seconds:.1f}s "
        f"test_accuracy={float(out['test_accuracy']):.4f} "
        f"float32 gap at θ*={float(out['optimality_gap']):.1e}")
  assert opt.grad_norm <= 1e-7
  assert 0.91 < float(out["test_accuracy"]) < 0.94
  assert abs(float(out["optimality_gap"])) < 1e-6  # the float32 gap floor
  assert 0.3 < opt.f_star < 0.4
  iid = data.load("mnist", num_clients=4, partition="iid", data_dir=str(shared_tfds_dir()))
  assert optimum.cache_key(make_task(iid, model, l2=1e-3)) == optimum.cache_key(task)
