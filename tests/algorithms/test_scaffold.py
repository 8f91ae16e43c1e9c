"""SCAFFOLD (Karimireddy et al. 2020): Algorithm 1 with option II written as a plain
per-client loop, round by round under partial participation, and its reduction to
FedAvg with the control variates held at zero."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import run_rounds, toy_setup
from fedjax_bench.algorithms import fedavg, scaffold
from fedjax_bench.core import keys, local

N, COHORT = 8, 3


def _loop_round(task, world, hp, x, c, c_clients, key, t):
  """Algorithm 1 (option II) with NumPy arrays: Python loops over S and the local steps."""
  mask = np.asarray(world.participation.sample(keys.for_purpose(key, "participation"), t))
  grad = jax.jit(jax.grad(task.loss))
  train_key = keys.for_purpose(key, "local_train")
  eta = hp["client_lr"]
  dys, dcs = [], []
  c_clients = jax.tree.map(np.array, c_clients)
  for i in np.flatnonzero(mask):
    k = keys.for_purpose(jax.random.fold_in(train_key, int(i)), "local_sampling")
    off, cnt, steps = int(task.offsets[i]), int(task.counts[i]), int(world.client_steps[i])
    ci = jax.tree.map(lambda a: a[i], c_clients)
    y, perm = x, jnp.arange(task.max_count, dtype=jnp.int32)
    for s in range(steps):
      pos, w, perm = local.batch_positions(k, s, cnt, perm, batch_size=hp["batch_size"],
                                           sampling="shuffle")
      g = grad(y, task.x[off + pos], task.y[off + pos], w)
      y = jax.tree.map(lambda a, b, cg, cl: np.asarray(a) - eta * (np.asarray(b) + cg - cl),
                       y, g, c, ci)
    c_plus = jax.tree.map(lambda cl, cg, x0, yi: cl - cg + (x0 - yi) / (steps * eta),
                          ci, c, x, y)
    dys.append(jax.tree.map(np.subtract, y, x))
    dcs.append(jax.tree.map(np.subtract, c_plus, ci))
    for a, b in zip(jax.tree.leaves(c_clients), jax.tree.leaves(c_plus)):
      a[i] = b
  # Uniform: Delta x the mean, c + (|S| / N) times the mean Delta c_i; data_size: weights n_i,
  # c + sum_S n_i Delta c_i / sum_all n_j.
  by_size = hp.get("weighting") == "data_size"
  w = [float(task.counts[i]) if by_size else 1.0 for i in np.flatnonzero(mask)]
  population = float(np.sum(task.counts)) if by_size else N
  dx = jax.tree.map(lambda *d: sum(wi * di for wi, di in zip(w, d)) / sum(w), *dys)
  dc = jax.tree.map(lambda *d: sum(wi * di for wi, di in zip(w, d)) / population, *dcs)
  x = jax.tree.map(lambda a, d: np.asarray(a) + hp["server_lr"] * d, x, dx)
  c = jax.tree.map(lambda a, d: np.asarray(a) + d, c, dc)
  return x, c, c_clients


@pytest.mark.parametrize("local_epochs,model,weighting", [
    (1.0, "logreg", None), (2.0, "mlp", None), (1.0, "logreg", "data_size")])
def test_rounds_equal_algorithm_1_option_ii(local_epochs, model, weighting):
  # Clients of 7..14 examples, batch 4: 2 or 3 steps an epoch, so K_i differs by client.
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_epochs=local_epochs,
                          batch_size=4, model=model)
  hp = dict(client_lr=0.2, server_lr=0.7, batch_size=4, local_epochs=local_epochs,
            **({"weighting": weighting} if weighting else {}))
  alg = scaffold.build(task, world, hp)
  server, c_clients = alg.init(jax.random.PRNGKey(0))
  step = jax.jit(alg.round)
  x, c, cc = server.params, server.aux, c_clients
  seen = np.zeros(N, bool)
  for t in range(3):
    key = jax.random.PRNGKey(30 + t)
    x, c, cc = _loop_round(task, world, hp, x, c, cc, key, t)
    server, c_clients, _ = step(server, c_clients, key)
    close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    jax.tree.map(close, server.params, x)
    jax.tree.map(close, server.aux, c)
    jax.tree.map(close, c_clients, cc)
    seen |= np.asarray(world.participation.sample(
        keys.for_purpose(key, "participation"), t))
  # Partial participation: some client sat out, its c_i still 0; the others' moved.
  rows = np.abs(np.asarray(jax.tree.leaves(c_clients)[0])).reshape(N, -1).sum(axis=1)
  assert (~seen).any() and np.all(rows[~seen] == 0) and np.all(rows[seen] > 0)


def test_control_variates_held_at_zero_are_fedavg_bit_for_bit():
  """SCAFFOLD sums its Delta y_i with FedAvg's streamed sum and keeps each client's for
  its c_i+ (`train_cohort`'s keep); the correction term adds exact zeros."""
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_epochs=1.0, batch_size=4)
  for weighting in ("uniform", "data_size"):
    # XLA's loop on both sides: the fused kernel takes FedAvg's plain SGD only (it is pinned
    # to the loop to rounding in tests/core/test_logreg_sgd.py).
    _zero_is_fedavg(task, world, dict(client_lr=0.3, server_lr=0.7, batch_size=4,
                                      local_epochs=1.0, weighting=weighting,
                                      fused_logreg=False))


def _zero_is_fedavg(task, world, hp):
  out = []
  for alg in (scaffold.build(task, world, {**hp, "control_variates": "zero"}),
              fedavg.build(task, world, hp)):
    server, _, m = run_rounds(alg)
    out.append((server.params, float(m["client_loss"])))
  jax.tree.map(np.testing.assert_array_equal, out[0][0], out[1][0])
  assert out[0][1] == out[1][1]  # the loss is the data loss
