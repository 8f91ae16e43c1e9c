"""APFL (Deng, Kamani & Mahdavi 2020): Algorithm 1 with the adaptive alpha written as a plain
per-client loop (float64 NumPy), round by round under partial participation; alpha = 0 fixed
is FedAvg's global model bit for bit; evaluation scores alpha_i v_i + (1 - alpha_i) w."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import float64_gradient, one_line, run_rounds, toy_setup
from fedjax_bench import api, config
from fedjax_bench.algorithms import apfl, fedavg
from fedjax_bench.core import keys, local
from fedjax_bench.errors import UsageError

N, COHORT = 8, 3


def _loop_round(task, world, hp, w, v, alpha, key, t):
  """Algorithm 1 with NumPy: each sampled client's local steps from (w^t, v_i, alpha_i),
  every update from the step's old values, then the (weighted) average of the w_i."""
  mask = np.asarray(world.participation.sample(keys.for_purpose(key, "participation"), t))
  grad, eta = float64_gradient(task), hp["client_lr"]
  train_key = keys.for_purpose(key, "local_train")
  v, alpha = [a.copy() for a in v], alpha.copy()
  local_models, weights = [], []
  for i in np.flatnonzero(mask):
    k = keys.for_purpose(jax.random.fold_in(train_key, int(i)), "local_sampling")
    off, cnt = int(task.offsets[i]), int(task.counts[i])
    wi, vi, ai = list(w), [a[i] for a in v], alpha[i]
    perm = jnp.arange(task.max_count, dtype=jnp.int32)
    for s in range(int(world.client_steps[i])):
      pos, wt, perm = local.batch_positions(k, s, cnt, perm, batch_size=hp["batch_size"],
                                            sampling="shuffle")
      batch = (task.x[off + pos], task.y[off + pos], wt)
      v_bar = [ai * a + (1 - ai) * b for a, b in zip(vi, wi)]
      g_w, g_bar = grad(wi, *batch), grad(v_bar, *batch)
      new_w = [a - eta * g for a, g in zip(wi, g_w)]
      new_v = [a - eta * ai * g for a, g in zip(vi, g_bar)]  # grad_v f(v_bar) = alpha grad f
      if hp["apfl_adaptive"]:  # grad_alpha f(v_bar) = <v - w, grad f(v_bar)>, projected
        ai = float(np.clip(ai - eta * sum(np.sum((a - b) * g)
                                          for a, b, g in zip(vi, wi, g_bar)), 0.0, 1.0))
      wi, vi = new_w, new_v
    for a, b in zip(v, vi):
      a[i] = b
    alpha[i] = ai
    local_models.append(wi)
    weights.append(float(task.counts[i]) if hp["weighting"] == "data_size" else 1.0)
  w = [sum(c * m[j] for c, m in zip(weights, local_models)) / sum(weights)
       for j in range(len(w))]
  return w, v, alpha


@pytest.mark.parametrize("adaptive,alpha0", [(True, 0.25), (False, 0.6)])
def test_rounds_follow_algorithm_1_under_partial_participation(adaptive, alpha0):
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_epochs=1.0, batch_size=4,
                          holdout=0.3)
  hp = dict(client_lr=0.3, batch_size=4, local_epochs=1.0, apfl_alpha=alpha0,
            apfl_adaptive=adaptive, weighting="data_size")
  alg = apfl.build(task, world, hp)
  server, clients = alg.init(jax.random.PRNGKey(0))
  step = jax.jit(alg.round)
  w = [np.asarray(a, np.float64) for a in jax.tree.leaves(server.params)]
  v = [np.asarray(a, np.float64) for a in jax.tree.leaves(clients[0])]
  alpha = np.asarray(clients[1], np.float64)
  for t in range(3):
    key = jax.random.PRNGKey(9 + t)
    w, v, alpha = _loop_round(task, world, hp, w, v, alpha, key, t)
    server, clients, m = step(server, clients, key)
    for a, b in zip(jax.tree.leaves(server.params), w):
      np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
    for a, b in zip(jax.tree.leaves(clients[0]), v):
      np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(clients[1], alpha, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(m["alpha_mean"], alpha.mean(), rtol=1e-5)
  v0 = np.asarray(jax.tree.leaves(alg.init(jax.random.PRNGKey(0))[1][0])[0])
  moved = np.any(v[0] != v0, axis=tuple(range(1, v0.ndim)))
  assert 0 < moved.sum() < N  # the sampled clients' local models moved, the others' did not
  if adaptive:
    assert np.any(alpha != alpha0) and np.all((alpha >= 0) & (alpha <= 1))
  else:
    assert np.all(alpha == np.float32(alpha0))
  # The personalized models scored: alpha_i v_i + (1 - alpha_i) w.
  personal = alg.personal_params(server, clients)
  for a, vi, wi in zip(jax.tree.leaves(personal), v, w):
    expected = alpha.reshape((-1,) + (1,) * (vi.ndim - 1)) * vi + (1 - alpha.reshape(
        (-1,) + (1,) * (vi.ndim - 1))) * wi
    np.testing.assert_allclose(a, expected, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("client_opt", ["sgd", "adam"])
def test_alpha_zero_fixed_is_fedavg_bit_for_bit(client_opt):
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_steps=3, batch_size=4,
                          holdout=0.3)
  # XLA's loop on both sides: the fused kernel takes FedAvg's plain SGD only (it is pinned
  # to the loop to rounding in tests/core/test_logreg_sgd.py).
  hp = dict(client_lr=0.3, batch_size=4, local_steps=3, weighting="data_size",
            client_opt=client_opt, fused_logreg=False)
  server, clients, m = run_rounds(apfl.build(task, world, {**hp, "apfl_alpha": 0.0,
                                                           "apfl_adaptive": False}))
  reference, _, m_ref = run_rounds(fedavg.build(task, world, hp))
  jax.tree.map(np.testing.assert_array_equal, server.params, reference.params)
  np.testing.assert_array_equal(m["client_loss"], m_ref["client_loss"])
  assert np.all(np.asarray(clients[1]) == 0.0)
  # An adaptive alpha from 0 is no longer FedAvg's run (its global model still is:
  # w never reads v or alpha), so the reduction is the fixed alpha's.
  adaptive, moved, _ = run_rounds(apfl.build(task, world, {**hp, "apfl_alpha": 0.0}))
  jax.tree.map(np.testing.assert_array_equal, adaptive.params, reference.params)
  assert np.any(np.asarray(moved[1]) > 0)


def test_a_run_scores_the_personalized_models():
  common = dict(dataset="synthetic", num_clients=10, rounds=4, eval_every=4, seeds=[0],
                progress=False, holdout_fraction=0.25, clients_per_round=5, host_devices=1)
  curves = api.run(algo="apfl", apfl_alpha=0.5, **common).curves
  assert {"personal_test_accuracy", "personal_test_accuracy_worst10", "client_test_accuracy",
          "alpha_mean"} <= set(curves)
  assert np.all(np.isfinite(curves["personal_test_accuracy"]))


def test_bad_settings_are_one_line_errors():
  task, world = toy_setup(num_clients=4, cohort=2)
  with pytest.raises(UsageError, match="give --holdout_fraction") as e:
    apfl.build(task, world, {})
  one_line(e)
  with pytest.raises(UsageError, match=r"--apfl_alpha must be in \[0, 1\]") as e:
    config.resolve(algo="apfl", apfl_alpha=1.5)
  one_line(e)
