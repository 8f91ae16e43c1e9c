"""FedExP (Jhunjhunwala, Wang & Joshi 2023): Algorithm 1 written as a plain per-client loop,
round by round under partial participation (the extrapolated step, the averaged iterates
that evaluation scores), its reduction to FedAvg with the step fixed at 1, and a run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import loop_local_update, one_line, run_rounds, toy_setup
from fedjax_bench import api, config
from fedjax_bench.algorithms import fedavg, fedexp
from fedjax_bench.core import keys
from fedjax_bench.errors import UsageError
from fedjax_bench.sim import participation

N, COHORT = 8, 3


def _loop_round(task, world, hp, w, key, t):
  """Algorithm 1 with NumPy arrays, Python loops over the sampled clients and their steps:
  Delta_i = w_t - w_i; eta_g = max(1, sum ||Delta_i||^2 / (2 M (||Delta||^2 + eps))) for
  uniform weights (the p_i-weighted means for data_size); w_{t+1} = w_t - eta_g Delta."""
  mask = np.asarray(world.participation.sample(keys.for_purpose(key, "participation"), t))
  grad = jax.jit(jax.grad(task.loss))
  train_key = keys.for_purpose(key, "local_train")
  flat = lambda tree: np.concatenate([np.ravel(np.asarray(a, np.float64))
                                      for a in jax.tree.leaves(tree)])
  deltas, sizes = [], []
  for i in np.flatnonzero(mask):
    update = loop_local_update(grad, task, world, hp, w, train_key, i)
    deltas.append(jax.tree.map(np.negative, update))
    sizes.append(float(task.counts[i]))
  m = len(deltas)
  if hp.get("weighting") == "data_size":
    p = np.asarray(sizes) / np.sum(sizes)
  else:
    p = np.full(m, 1.0 / m)
  mean = jax.tree.map(lambda *d: sum(pi * di for pi, di in zip(p, d)), *deltas)
  if hp.get("weighting") == "data_size":
    num = sum(pi * np.sum(flat(d) ** 2) for pi, d in zip(p, deltas)) / 2
    eta = max(1.0, num / (np.sum(flat(mean) ** 2) + hp["fedexp_epsilon"]))
  else:
    num = sum(np.sum(flat(d) ** 2) for d in deltas)
    eta = max(1.0, num / (2 * m * (np.sum(flat(mean) ** 2) + hp["fedexp_epsilon"])))
  return jax.tree.map(lambda a, d: np.asarray(a, np.float64) - eta * d, w, mean), eta, mask


@pytest.mark.parametrize("model,weighting", [("logreg", "uniform"), ("mlp", "data_size")])
def test_rounds_equal_algorithm_1_and_evaluation_averages_the_last_two_iterates(model,
                                                                                weighting):
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_steps=3, batch_size=4,
                          model=model)
  hp = dict(client_lr=0.3, batch_size=4, local_steps=3, fedexp_epsilon=1e-4,
            weighting=weighting)
  alg = fedexp.build(task, world, hp)
  server, clients = alg.init(jax.random.PRNGKey(0))
  step = jax.jit(alg.round)
  close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
  w = jax.tree.map(np.asarray, server.params)
  jax.tree.map(np.testing.assert_array_equal, alg.eval_params(server, clients), w)  # w_0
  etas, seen = [], np.zeros(N, bool)
  for t in range(4):
    key = jax.random.PRNGKey(30 + t)
    w_next, eta, mask = _loop_round(task, world, hp, w, key, t)
    server, clients, metrics = step(server, clients, key)
    jax.tree.map(close, server.params, w_next)
    np.testing.assert_allclose(float(metrics["server_step"]), eta, rtol=1e-4)
    # Scored: w_1 after the first round, then (w_t + w_{t-1}) / 2.
    scored = w_next if t == 0 else jax.tree.map(lambda a, b: (a + b) / 2, w_next, w)
    jax.tree.map(close, alg.eval_params(server, clients), scored)
    w, seen = w_next, seen | mask
    etas.append(eta)
  # The extrapolation took effect (eta_g > 1) and the clamp at 1 too, or neither path is
  # tested; partial participation: some client never trained.
  assert max(etas) > 1.05, etas
  assert (~seen).any()


def test_step_one_is_fedavg_bit_for_bit():
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_steps=3, batch_size=4)
  for hp in (dict(client_lr=0.3, batch_size=4, local_steps=3),
             dict(client_lr=0.3, batch_size=4, local_steps=3, weighting="data_size",
                  server_opt="momentum", server_momentum=0.5)):
    alg = fedexp.build(task, world, {**hp, "fedexp_step": "one", "fedexp_eval": "last"})
    assert alg.eval_params is None  # scores w_t, as FedAvg
    ours, _, m = run_rounds(alg)
    theirs, _, m_avg = run_rounds(fedavg.build(task, world, hp))
    jax.tree.map(np.testing.assert_array_equal, ours.params, theirs.params)
    assert float(m["client_loss"]) == float(m_avg["client_loss"])
    assert float(m["server_step"]) == 1.0


def test_a_round_nobody_trains_changes_nothing_even_at_epsilon_zero():
  # Clients 0-2 every round but round 1, where nobody is available: Delta = 0 and eps = 0
  # make the formula 0/0, which must leave eta_g at 1 and the model as it was.
  part = participation.stateless(N, COHORT, lambda key, t: (jnp.arange(N) < 3) & (t != 1))
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_steps=3, batch_size=4, part=part)
  alg = fedexp.build(task, world, dict(client_lr=0.3, batch_size=4, local_steps=3,
                                       fedexp_epsilon=0.0))
  server, clients = alg.init(jax.random.PRNGKey(0))
  step = jax.jit(alg.round)
  server, clients, _ = step(server, clients, jax.random.PRNGKey(1))
  before = server
  server, clients, m = step(server, clients, jax.random.PRNGKey(2))
  jax.tree.map(np.testing.assert_array_equal, server.params, before.params)
  assert float(m["server_step.count"]) == 0 and float(m["server_step"]) == 1.0
  # Evaluation then averages w_1 with itself: w_1.
  jax.tree.map(np.testing.assert_array_equal, alg.eval_params(server, clients), before.params)
  server, clients, m = step(server, clients, jax.random.PRNGKey(3))
  assert np.all([np.isfinite(a).all() for a in jax.tree.leaves(server.params)])


def test_bad_settings_are_one_line_errors():
  with pytest.raises(UsageError) as e:
    config.resolve(algo="fedexp", fedexp_step="adaptive")
  assert "extrapolated" in one_line(e) and "one" in one_line(e)
  with pytest.raises(UsageError) as e:
    config.resolve(algo="fedexp", fedexp_step="one", fedexp_epsilon=0.1)
  assert "fedexp_epsilon" in one_line(e)
  with pytest.raises(UsageError) as e:
    config.resolve(algo="fedexp", fedexp_epsilon=-1.0)
  assert "fedexp_epsilon" in one_line(e)


def test_a_run_reports_the_server_step_and_scores_the_averaged_iterates():
  common = dict(dataset="synthetic", num_clients=20, rounds=6, eval_every=3, seeds=[0],
                progress=False, clients_per_round=5, host_devices=1)
  curves = api.run(algo="fedexp", **common).curves
  assert np.all(np.asarray(curves["server_step"][1:]) >= 1.0)
  last = api.run(algo="fedexp", fedexp_eval="last", **common).curves
  # The same training; round 0 scores w_0 both ways, later rounds another model.
  np.testing.assert_array_equal(curves["server_step"][1:], last["server_step"][1:])
  assert curves["test_loss"][0] == last["test_loss"][0]
  assert curves["test_loss"][-1] != last["test_loss"][-1]
