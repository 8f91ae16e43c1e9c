"""FedDyn (Acar et al. 2021): Algorithm 1 written as a plain per-client loop, round by
round under partial participation, and its reduction to FedAvg at alpha = 0."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import run_rounds, toy_setup
from fedjax_bench.algorithms import fedavg, feddyn
from fedjax_bench.core import keys, local

N, COHORT = 8, 3


def _loop_round(task, world, hp, theta, h, grads, key, t):
  """Algorithm 1 with NumPy arrays: loops over P_t and the local steps, each step on the
  gradient of L_k(theta) - <g_k, theta> + alpha/2 ||theta - theta^{t-1}||^2."""
  mask = np.asarray(world.participation.sample(keys.for_purpose(key, "participation"), t))
  grad = jax.jit(jax.grad(task.loss))
  train_key = keys.for_purpose(key, "local_train")
  eta, alpha = hp["client_lr"], hp["feddyn_alpha"]
  grads = jax.tree.map(np.array, grads)
  thetas = []
  for i in np.flatnonzero(mask):
    k = keys.for_purpose(jax.random.fold_in(train_key, int(i)), "local_sampling")
    off, cnt, steps = int(task.offsets[i]), int(task.counts[i]), int(world.client_steps[i])
    g_k = jax.tree.map(lambda a: a[i], grads)
    th, perm = theta, jnp.arange(task.max_count, dtype=jnp.int32)
    for s in range(steps):
      pos, w, perm = local.batch_positions(k, s, cnt, perm, batch_size=hp["batch_size"],
                                           sampling="shuffle")
      g = grad(th, task.x[off + pos], task.y[off + pos], w)
      th = jax.tree.map(lambda a, b, gk, a0: np.asarray(a) - eta * (
          np.asarray(b) - gk + alpha * (np.asarray(a) - a0)), th, g, g_k, theta)
    for a, gk, tk, t0 in zip(*map(jax.tree.leaves, (grads, g_k, th, theta))):
      a[i] = gk - alpha * (tk - t0)
    thetas.append(th)
  # Uniform: 1/N in h and the mean over P_t; data_size: n_k / sum_all n_j and the n_k mean.
  by_size = hp.get("weighting") == "data_size"
  w = [float(task.counts[i]) if by_size else 1.0 for i in np.flatnonzero(mask)]
  population = float(np.sum(task.counts)) if by_size else N
  h = jax.tree.map(lambda a, t0, *tk: a - alpha / population * sum(
      wi * (x - t0) for wi, x in zip(w, tk)), h, theta, *thetas)
  theta = jax.tree.map(lambda a, *tk: sum(wi * x for wi, x in zip(w, tk)) / sum(w) - a / alpha,
                       h, *thetas)
  return theta, h, grads


@pytest.mark.parametrize("local_epochs,model,weighting", [
    (1.0, "logreg", None), (2.0, "mlp", None), (1.0, "logreg", "data_size")])
def test_rounds_equal_algorithm_1(local_epochs, model, weighting):
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_epochs=local_epochs,
                          batch_size=4, model=model)
  hp = dict(client_lr=0.2, batch_size=4, local_epochs=local_epochs, feddyn_alpha=0.1,
            **({"weighting": weighting} if weighting else {}))
  alg = feddyn.build(task, world, hp)
  server, grads = alg.init(jax.random.PRNGKey(0))
  step = jax.jit(alg.round)
  theta, h, gs = server.params, server.aux, grads
  seen = np.zeros(N, bool)
  for t in range(3):
    key = jax.random.PRNGKey(40 + t)
    theta, h, gs = _loop_round(task, world, hp, theta, h, gs, key, t)
    server, grads, _ = step(server, grads, key)
    close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    jax.tree.map(close, server.params, theta)
    jax.tree.map(close, server.aux, h)
    jax.tree.map(close, grads, gs)
    seen |= np.asarray(world.participation.sample(keys.for_purpose(key, "participation"), t))
  rows = np.abs(np.asarray(jax.tree.leaves(grads)[0])).reshape(N, -1).sum(axis=1)
  assert (~seen).any() and np.all(rows[~seen] == 0) and np.all(rows[seen] > 0)


def test_alpha_zero_is_fedavg_bit_for_bit():
  """FedDyn sums with FedAvg's streamed sum and keeps each client's theta_k for its g_k:
  alpha = 0 is FedAvg bit for bit. Swept (traced) alpha = 0 keeps the proximal term in the
  compiled step, multiplied by 0, and XLA fuses the gradient around it otherwise: equal
  to float rounding."""
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_epochs=1.0, batch_size=4)
  # XLA's loop on both sides: the fused kernel takes FedAvg's plain SGD only (it is pinned
  # to the loop to rounding in tests/core/test_logreg_sgd.py).
  hp = dict(client_lr=0.3, batch_size=4, local_epochs=1.0, fused_logreg=False)
  out = []
  for alg in (feddyn.build(task, world, {**hp, "feddyn_alpha": 0.0}),
              feddyn.build(task, world, {**hp, "feddyn_alpha": jnp.float32(0.0)}),
              fedavg.build(task, world, hp)):
    out.append(run_rounds(alg)[0].params)
  jax.tree.map(np.testing.assert_array_equal, out[0], out[2])
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7),
               out[1], out[2])
