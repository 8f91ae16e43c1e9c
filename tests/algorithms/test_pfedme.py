"""pFedMe (T Dinh, Tran & Nguyen 2020): Algorithm 1 written as a plain per-client loop (float64
NumPy), round by round under partial participation, for beta = 1 (the plain average of the
local models) and beta != 1; K = 1 with eta lambda = 1 is FedAvg at the personal learning
rate; evaluation scores each client's theta_i."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import float64_gradient, one_line, run_rounds, toy_setup
from fedjax_bench import api, config
from fedjax_bench.algorithms import fedavg, pfedme
from fedjax_bench.core import keys, local
from fedjax_bench.errors import UsageError

N, COHORT = 8, 3


def _loop_round(task, world, hp, w, theta, key, t):
  """Algorithm 1 with NumPy: each sampled client's R local rounds from w^t, each on a fresh
  minibatch: K steps on f_i(theta; D) + lambda/2 ||theta - w_{i,r}||^2 (from the previous
  theta_hat, w^t at first), then w_{i,r+1} = w_{i,r} - eta lambda (w_{i,r} - theta_hat);
  w^{t+1} = (1 - beta) w^t + beta (weighted) mean of the w_{i,R}."""
  mask = np.asarray(world.participation.sample(keys.for_purpose(key, "participation"), t))
  grad, eta = float64_gradient(task), hp["client_lr"]
  lam, p, beta = hp["pfedme_lambda"], hp["pfedme_personal_lr"], hp["pfedme_beta"]
  train_key = keys.for_purpose(key, "local_train")
  theta = [a.copy() for a in theta]
  local_models, weights = [], []
  for i in np.flatnonzero(mask):
    k = keys.for_purpose(jax.random.fold_in(train_key, int(i)), "local_sampling")
    off, cnt = int(task.offsets[i]), int(task.counts[i])
    wi, th = list(w), list(w)
    perm = jnp.arange(task.max_count, dtype=jnp.int32)
    for r in range(int(world.client_steps[i])):
      pos, wt, perm = local.batch_positions(k, r, cnt, perm, batch_size=hp["batch_size"],
                                            sampling="shuffle")
      batch = (task.x[off + pos], task.y[off + pos], wt)
      for _ in range(hp["pfedme_k"]):
        th = [a - p * (g + lam * (a - b)) for a, g, b in zip(th, grad(th, *batch), wi)]
      wi = [a - eta * lam * (a - b) for a, b in zip(wi, th)]
    for a, b in zip(theta, th):
      a[i] = b
    local_models.append(wi)
    weights.append(float(task.counts[i]) if hp["weighting"] == "data_size" else 1.0)
  average = [sum(c * m[j] for c, m in zip(weights, local_models)) / sum(weights)
             for j in range(len(w))]
  return [(1 - beta) * a + beta * b for a, b in zip(w, average)], theta


@pytest.mark.parametrize("beta,weighting", [(1.0, "uniform"), (1.7, "data_size")])
def test_rounds_follow_algorithm_1_under_partial_participation(beta, weighting):
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_epochs=1.0, batch_size=4,
                          holdout=0.3)
  hp = dict(client_lr=0.05, batch_size=4, local_epochs=1.0, pfedme_lambda=3.0, pfedme_k=3,
            pfedme_personal_lr=0.1, pfedme_beta=beta, weighting=weighting)
  alg = pfedme.build(task, world, hp)
  server, theta_clients = alg.init(jax.random.PRNGKey(0))
  step = jax.jit(alg.round)
  w = [np.asarray(a, np.float64) for a in jax.tree.leaves(server.params)]
  theta = [np.asarray(a, np.float64) for a in jax.tree.leaves(theta_clients)]
  for t in range(3):
    key = jax.random.PRNGKey(9 + t)
    w, theta = _loop_round(task, world, hp, w, theta, key, t)
    server, theta_clients, m = step(server, theta_clients, key)
    for a, b in zip(jax.tree.leaves(server.params), w):
      np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
    for a, b in zip(jax.tree.leaves(theta_clients), theta):
      np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
    assert float(m["client_loss.count"]) == COHORT
  theta0 = np.asarray(jax.tree.leaves(alg.init(jax.random.PRNGKey(0))[1])[0])
  moved = np.any(theta[0] != theta0, axis=tuple(range(1, theta0.ndim)))
  assert 0 < moved.sum() < N  # the sampled clients' personalized models moved
  jax.tree.map(np.testing.assert_array_equal, alg.personal_params(server, theta_clients),
               theta_clients)


def test_one_inner_step_with_eta_lambda_one_is_fedavg_at_the_personal_rate():
  """K = 1, eta lambda = 1: theta_hat = w_r - p grad f(w_r; D) = w_{r+1}, so every local round
  is one SGD step at p on FedAvg's minibatch (the same draws), and beta = 1 averages as
  FedAvg does."""
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_steps=4, batch_size=4,
                          holdout=0.3)
  hp = dict(batch_size=4, local_steps=4, weighting="data_size")
  mine, _, m = run_rounds(pfedme.build(task, world, {
      **hp, "client_lr": 0.5, "pfedme_lambda": 2.0, "pfedme_k": 1, "pfedme_personal_lr": 0.2}))
  reference, _, m_ref = run_rounds(fedavg.build(task, world, {**hp, "client_lr": 0.2}))
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
               mine.params, reference.params)
  np.testing.assert_allclose(m["client_loss"], m_ref["client_loss"], rtol=1e-5)


def test_a_run_scores_the_personalized_models():
  common = dict(dataset="synthetic", num_clients=10, rounds=4, eval_every=4, seeds=[0],
                progress=False, holdout_fraction=0.25, clients_per_round=5, host_devices=1)
  curves = api.run(algo="pfedme", pfedme_lambda=5.0, client_lr=0.05, **common).curves
  assert {"personal_test_accuracy", "personal_test_accuracy_best10",
          "client_test_accuracy"} <= set(curves)
  assert np.all(np.isfinite(curves["personal_test_accuracy"]))


def test_bad_settings_are_one_line_errors():
  task, world = toy_setup(num_clients=4, cohort=2)
  with pytest.raises(UsageError, match="give --holdout_fraction") as e:
    pfedme.build(task, world, {})
  one_line(e)
  for name, value, rule in [("pfedme_k", 0, "must be positive"),
                            ("pfedme_beta", -1.0, "must be positive"),
                            ("pfedme_lambda", 0.0, "must be positive")]:
    with pytest.raises(UsageError, match=f"--{name} {rule}") as e:
      config.resolve(algo="pfedme", **{name: value})
    one_line(e)
  with pytest.raises(UsageError, match="pfedme_k shapes arrays or control flow") as e:
    config.check_sweep(config.resolve(algo="pfedme"), {"pfedme_k": [1, 2]})
  one_line(e)
