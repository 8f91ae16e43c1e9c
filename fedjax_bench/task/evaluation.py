"""A task's central evaluation: mean loss and accuracy scored in chunks, the statistics over
clients of their accuracy on their own test data, and the distance to a known optimum."""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

if TYPE_CHECKING:  # annotations only: task.py imports this module
  from fedjax_bench.task.task import Optimum, Task


def _over_clients(acc, has, tail: int, prefix: str) -> dict:
  n = jnp.maximum(jnp.sum(has), 1)
  mean = jnp.sum(jnp.where(has, acc, 0.0)) / n
  std = jnp.sqrt(jnp.sum(jnp.where(has, jnp.square(acc - mean), 0.0)) / n)
  ranked = jnp.sort(jnp.where(has, acc, jnp.inf))
  worst = jnp.mean(ranked[:tail])
  best = jnp.mean(jnp.sort(jnp.where(has, acc, -jnp.inf))[-tail:])
  return {prefix + "_accuracy": mean, prefix + "_accuracy_std": std,
          prefix + "_accuracy_worst10": worst, prefix + "_accuracy_best10": best}


def _optimum_metrics(optimum: Optimum, params, train_loss) -> dict:
  out = {"optimality_gap": train_loss - optimum.f_star}
  if optimum.params is None:
    return out
  # θ* is float64 on the host: cast to the parameters' dtype, so that float64 runs
  # (jax_enable_x64) resolve distances far below float32's rounding of θ*.
  diff = jax.tree.map(lambda p, s: p - jnp.asarray(s, p.dtype), params, optimum.params)
  out["dist_sq"] = sum(jnp.sum(jnp.square(d)) for d in jax.tree.leaves(diff))
  norm_sq = float(sum(np.sum(np.square(s)) for s in jax.tree.leaves(optimum.params)))
  if norm_sq > 0:
    out["rel_dist_sq"] = out["dist_sq"] / norm_sq
  return out


def _chunked(task: Task, x, y, rows=None, count=None):
  """(chunks, read): the examples ``x[rows]`` (x itself when rows is None) zero-padded to
  whole chunks of ``eval_chunk``, reshaped [chunks, chunk, ...], and ``read(chunk) ->
  (x, y, weights)``; padding rows weigh 0, and so do rows from ``count`` on. With
  ``rows`` each chunk is gathered when it is read, so the set is never copied whole."""
  n = x.shape[0] if rows is None else rows.shape[0]
  chunk = min(task.eval_chunk, n)
  pad = (-n) % chunk
  real = jnp.ones(n) if count is None else (jnp.arange(n) < count).astype(jnp.float32)
  w = jnp.concatenate([real, jnp.zeros(pad)])
  shape = lambda a: a.reshape((-1, chunk) + a.shape[1:])
  if rows is not None:
    rp = jnp.concatenate([rows, jnp.zeros(pad, rows.dtype)])
    return (shape(rp), shape(w)), lambda b: (x[b[0]], y[b[0]], b[1])
  xp = jnp.concatenate([x, jnp.zeros((pad,) + x.shape[1:], x.dtype)])
  yp = jnp.concatenate([y, jnp.zeros(pad, y.dtype)])
  return (shape(xp), shape(yp), shape(w)), lambda b: b


def _mean_loss_and_accuracy(task: Task, params, x, y, rows=None, count=None):
  """Scores ``x[rows]`` (x when rows is None) in chunks of ``eval_chunk`` examples to
  bound memory; only the first ``count`` rows (default: all) count."""
  n = (x.shape[0] if rows is None else rows.shape[0]) if count is None else count
  chunks, read = _chunked(task, x, y, rows, count)

  def one(batch):
    xb, yb, wb = read(batch)
    outputs = task.logits(params, xb)
    correct = (jnp.argmax(outputs, -1) == yb if task.loss_type == "cross_entropy"
               else jnp.full(yb.shape, jnp.nan))
    return jnp.sum(wb * task.pointwise_loss(outputs, yb)), jnp.sum(wb * correct)

  loss_sum, correct = jax.lax.map(one, chunks)
  return _divide(jnp.sum(loss_sum), n), _divide(jnp.sum(correct), n)


def _divide(total, n):
  """total / n. XLA compiles a division by a constant n as a multiplication by its
  float32 reciprocal, so a run's traced count (a view's) multiplies by 1/n too: the
  same numbers as a task built for that run alone."""
  if isinstance(n, int):
    return total / n
  return total * (1.0 / jnp.asarray(n, jnp.float32))
