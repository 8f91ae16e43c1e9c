"""The minimum f* of a task's training objective, for optimality gaps f(x) - f*.

f(θ) = mean loss over ALL training examples + (l2/2)||θ||² (``Task.l2``), which is
Σ_i (s_i/S) f̂_i(θ) for any partition: f* depends on the training set as a multiset of
examples, not on how it is split, and the cache key says so.

* Least squares (the ``linear`` model, ``loss_type="squared_error"``): closed form,
  solved in float64 NumPy.
* Otherwise (meant for convex models such as logreg with l2 > 0): full-batch L-BFGS
  (optax.lbfgs, zoom line search) in float64, until ||∇f|| <= ``tol`` or the gradient
  norm stops decreasing. Features are the float32 values the task trains on, so θ* is
  the optimum of the very problem the float32 runs see. The result is cached in
  ``<cache_dir>/optimum/`` (cache_dir as in data.tfds_data: --cache_dir,
  $FEDJAX_BENCH_CACHE, ~/.cache/fedjax_bench); a corrupt cache file is recomputed.
"""

import hashlib
import json
import os
import pathlib
import time
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_bench.task.task import Optimum, Task, with_optimum
from fedjax_bench.data.federated import pixels_to_float
from fedjax_bench.data.tfds_data import resolve_cache_dir
from fedjax_bench.models.dense import Linear

SOLVER_VERSION = 1  # bump when a change alters cached results


def attach(task: Task, **kwargs) -> Task:
  """``task`` with its optimum (`find`'s keyword arguments); see task.with_optimum."""
  return with_optimum(task, find(task, **kwargs))


def find(task: Task, *, cache_dir: str | None = None, use_cache: bool = True,
         tol: float = 1e-7, max_iter: int = 10000, verbose: bool = True) -> Optimum:
  """The closed form when there is one, else the cached or freshly solved L-BFGS optimum."""
  exact = closed_form(task)
  if exact is not None:
    return exact
  if not use_cache:
    return solve(task, tol=tol, max_iter=max_iter, verbose=verbose)
  key = cache_key(task, tol=tol, max_iter=max_iter)
  path = cache_path(key, cache_dir)
  cached, corrupt = _read(path, key, task)
  shown = _home_relative(path)  # logs get committed; keep user names out of them
  if cached is not None:
    if verbose:
      print(f"f*={cached.f_star:.10g}, |grad|={cached.grad_norm:.1e} (cached in {shown})",
            flush=True)
    return cached
  if corrupt and verbose:
    print(f"the cached optimum {shown} is corrupt; recomputing", flush=True)
  opt = solve(task, tol=tol, max_iter=max_iter, verbose=verbose)
  _write(path, key, opt)
  return opt


def solve(task: Task, *, tol: float = 1e-7, max_iter: int = 10000,
          patience: int = 100, verbose: bool = True) -> Optimum:
  """L-BFGS from θ = 0 in float64; stops at ||∇f|| <= tol, after max_iter iterations,
  or when the best gradient norm has not improved for ``patience`` iterations."""
  if verbose:
    print(f"solving for f* ({type(task.model).__name__}, l2={task.l2:g}, "
          f"{task.x.shape[0]} examples) ...", end=" ", flush=True)
  start = time.perf_counter()
  shapes = jax.eval_shape(task.init_params, jax.random.PRNGKey(0))
  with jax.enable_x64(True):
    x = jnp.asarray(pixels_to_float(task.x), jnp.float64)
    y = task.y.astype(jnp.float64) if task.loss_type == "squared_error" else task.y
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, jnp.float64), shapes)
    params, f_star, grad_norm, iterations = jax.device_get(
        jax.jit(_lbfgs, static_argnums=(0, 4, 5, 6))(task, zeros, x, y, tol, max_iter,
                                                     patience))
  seconds = time.perf_counter() - start
  if verbose:
    print(f"done in {seconds:.1f}s, f*={f_star:.10g}, |grad|={grad_norm:.1e}, "
          f"{int(iterations)} iterations", flush=True)
  return Optimum(f_star=float(f_star), params=jax.tree.map(np.asarray, params),
                 grad_norm=float(grad_norm), iterations=int(iterations), seconds=seconds,
                 method="lbfgs")


def objective(task: Task, x, y):
  """θ -> mean loss over (x, y) + the task's l2 penalty, full batch."""
  return lambda params: (jnp.mean(task.pointwise_loss(task.logits(params, x), y))
                         + task.penalty(params))


def _lbfgs(task, params, x, y, tol, max_iter, patience):
  f = objective(task, x, y)
  opt = optax.lbfgs(memory_size=20)
  value_and_grad = optax.value_and_grad_from_state(f)

  def cond(carry):
    _, _, it, best, stall = carry
    return (it < max_iter) & (best > tol) & (stall < patience)

  def body(carry):
    params, state, it, best, stall = carry
    value, grad = value_and_grad(params, state=state)
    updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=f)
    params = optax.apply_updates(params, updates)
    norm = optax.tree.norm(optax.tree.get(state, "grad"))
    improved = norm < best
    return (params, state, it + 1, jnp.where(improved, norm, best),
            jnp.where(improved, 0, stall + 1))

  inf = jnp.asarray(jnp.inf, jnp.float64)
  carry = (params, opt.init(params), jnp.asarray(0), inf, jnp.asarray(0))
  params, _, iterations, _, _ = jax.lax.while_loop(cond, body, carry)
  value, grad = jax.value_and_grad(f)(params)
  return params, value, optax.tree.norm(grad), iterations


def closed_form(task: Task) -> Optimum | None:
  """Least squares: θ* = argmin mean ½(<θ, x> - y)² + (l2/2)||θ||² (min-norm if not
  unique), for the scalar ``linear`` model; None for any other task."""
  model = task.model
  if (task.loss_type != "squared_error" or not isinstance(model, Linear)
      or model.features != 1):
    return None
  x = np.asarray(pixels_to_float(np.asarray(task.x)), np.float64)
  x = x.reshape(x.shape[0], -1)
  y = np.asarray(task.y, np.float64)
  n, d = x.shape
  if model.bias:
    x = np.concatenate([x, np.ones((n, 1))], axis=1)
  # The normal equations: exact for the toys (x* = Σ a b / Σ a², 0 when Σ a b = 0);
  # the min-norm least-squares solution when singular.
  gram = x.T @ x / n + task.l2 * np.eye(x.shape[1])
  rhs = x.T @ y / n
  if np.linalg.matrix_rank(gram) == gram.shape[0]:
    theta = np.linalg.solve(gram, rhs)
  else:
    theta = np.linalg.lstsq(x, y, rcond=None)[0]  # l2 = 0 here
  residual = x @ theta - y
  f_star = 0.5 * np.mean(np.square(residual)) + 0.5 * task.l2 * np.sum(np.square(theta))
  grad = x.T @ residual / n + task.l2 * theta
  params = {"DenseOI_0": {"kernel": theta[:d].reshape(1, d)}}
  if model.bias:
    params["DenseOI_0"]["bias"] = theta[d:]
  shapes = jax.eval_shape(task.init_params, jax.random.PRNGKey(0))
  if jax.tree.structure(shapes) != jax.tree.structure(params):
    raise ValueError(f"unexpected linear-model parameters {shapes}")
  return Optimum(f_star=float(f_star), params=params, grad_norm=float(np.linalg.norm(grad)),
                 method="closed_form")


# --- the cache ------------------------------------------------------------------------

def _home_relative(path) -> str:
  path, home = str(path), os.path.expanduser("~")
  return "~" + path[len(home):] if path.startswith(home + os.sep) else path


def cache_key(task: Task, **solver_options) -> dict:
  """What f* depends on: the training examples as a multiset (row order, hence the
  partition, does not matter), the model and its options, the loss, l2 and the solver."""
  return {"solver": [SOLVER_VERSION, solver_options],
          "data": _multiset_digest(task.x, task.y),
          "feature_shape": list(task.feature_shape), "model": repr(task.model),
          "loss_type": task.loss_type, "l2": repr(float(task.l2))}


def cache_path(key: dict, cache_dir: str | None = None) -> pathlib.Path:
  digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
  return resolve_cache_dir(cache_dir) / "optimum" / f"f_star-{digest}.npz"


def _multiset_digest(x, y) -> str:
  """sha256 of the sorted (x row bytes, y bytes) records, with shapes and dtypes."""
  x, y = np.asarray(x), np.asarray(y)
  n = x.shape[0]
  as_bytes = lambda a: np.ascontiguousarray(a).reshape(n, -1).view(np.uint8)
  rows = np.ascontiguousarray(np.concatenate([as_bytes(x), as_bytes(y)], axis=1))
  records = np.sort(rows.view(np.dtype((np.void, rows.shape[1]))).ravel())
  h = hashlib.sha256(f"{x.shape}{x.dtype}{y.shape}{y.dtype}".encode())
  h.update(records.tobytes())
  return h.hexdigest()


def _read(path: pathlib.Path, key: dict, task: Task) -> tuple[Optimum | None, bool]:
  """(optimum, corrupt); (None, False) when there is no cache file."""
  if not path.exists():
    return None, False
  shapes = jax.eval_shape(task.init_params, jax.random.PRNGKey(0))
  leaves, treedef = jax.tree.flatten(shapes)
  try:
    with np.load(path, allow_pickle=False) as z:
      if json.loads(str(z["key"])) != key:
        return None, True
      theta = [np.asarray(z[f"theta_{i}"], np.float64) for i in range(len(leaves))]
      f_star, grad_norm = float(z["f_star"]), float(z["grad_norm"])
      iterations, seconds = int(z["iterations"]), float(z["seconds"])
      method = str(z["method"])
  except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
    return None, True
  if (any(t.shape != s.shape for t, s in zip(theta, leaves))
      or not all(np.isfinite(t).all() for t in theta)
      or not np.isfinite([f_star, grad_norm]).all()):
    return None, True
  return Optimum(f_star=f_star, params=jax.tree.unflatten(treedef, theta),
                 grad_norm=grad_norm, iterations=iterations, seconds=seconds,
                 method=method, from_cache=True), False


def _write(path: pathlib.Path, key: dict, opt: Optimum) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  theta = {f"theta_{i}": leaf for i, leaf in enumerate(jax.tree.leaves(opt.params))}
  tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
  with open(tmp, "wb") as f:
    np.savez(f, key=np.asarray(json.dumps(key, sort_keys=True)), f_star=opt.f_star,
             grad_norm=opt.grad_norm, iterations=opt.iterations, seconds=opt.seconds,
             method=np.asarray(opt.method), **theta)
  os.replace(tmp, path)
