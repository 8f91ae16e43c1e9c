"""FedAvg: hand-computed golden values and equality with a plain per-client loop."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen as nn

from tests.conftest import client_sampling_key, loop_sgd, toy_setup
from fedjax_bench.algorithms import fedavg
from fedjax_bench.core import keys
from fedjax_bench.task.build import make_task
from fedjax_bench.data.federated import Dataset, FederatedData
from fedjax_bench.sim import participation, world as world_lib


def _least_squares_task():
  """Client A: x = (1, 2), y = (1, 3); client B: x = 3, y = 2; model w * x."""
  x = np.array([[1.0], [2.0], [3.0]], np.float32)
  y = np.array([1.0, 3.0, 2.0], np.float32)
  ds = Dataset("lsq", FederatedData.from_partition(x, y, [np.array([0, 1]), np.array([2])]),
               x, y, 1, (1,), False)
  return make_task(ds, nn.Dense(1, use_bias=False), loss_type="squared_error")


@pytest.mark.parametrize("weighting,server_lr,expected", [
    # Two full-batch SGD steps at lr 0.1 from w = 0.5, by hand:
    #   A: grad -2.25 -> 0.725; grad -1.6875 -> 0.89375   (delta 0.39375)
    #   B: grad -1.5  -> 0.65;  grad -0.15   -> 0.665     (delta 0.165)
    ("uniform", 1.0, 0.5 + (0.39375 + 0.165) / 2),          # 0.779375
    ("data_size", 1.0, 0.5 + (2 * 0.39375 + 0.165) / 3),    # 0.8175
    ("uniform", 0.5, 0.5 + 0.5 * (0.39375 + 0.165) / 2),    # 0.6396875
])
def test_one_round_on_two_client_least_squares_matches_hand(weighting, server_lr, expected):
  task = _least_squares_task()
  world = world_lib.make(participation.full(2), np.array([2, 2]))
  alg = fedavg.build(task, world, dict(client_lr=0.1, server_lr=server_lr, batch_size=2,
                                       weighting=weighting))
  server, clients = alg.init(jax.random.PRNGKey(0))
  params = {"kernel": jnp.array([[0.5]])}
  server = server._replace(params=params)
  server, _, metrics = jax.jit(alg.round)(server, clients, jax.random.PRNGKey(1))
  np.testing.assert_allclose(float(server.params["kernel"][0, 0]), expected, rtol=1e-6)
  assert int(server.round) == 1 and float(metrics["num_active"]) == 2


def _loop_round(task, world, hp, params, key, t):
  """FedAvg written plainly: Python loops over the cohort and the local steps."""
  mask = np.asarray(world.participation.sample(keys.for_purpose(key, "participation"), t))
  train_key = keys.for_purpose(key, "local_train")
  grad = jax.jit(jax.grad(task.loss))
  deltas, weights = [], []
  for i in np.flatnonzero(mask):
    cnt = int(task.counts[i])
    p = loop_sgd(grad, task, params, client_sampling_key(train_key, i), i,
                 int(world.client_steps[i]), batch_size=hp["batch_size"], lr=hp["client_lr"],
                 sampling=hp["sampling"])
    deltas.append(jax.tree.map(lambda a, b: np.asarray(a) - np.asarray(b), p, params))
    weights.append(cnt if hp["weighting"] == "data_size" else 1.0)
  weights = np.asarray(weights, np.float64) / np.sum(weights)
  mean = jax.tree.map(lambda *ds: sum(w * d for w, d in zip(weights, ds)), *deltas)
  return jax.tree.map(lambda a, d: np.asarray(a) + hp["server_lr"] * d, params, mean)


@pytest.mark.parametrize("sampling,weighting,model,width", [
    ("shuffle", "uniform", "logreg", 0),      # the whole cohort vmapped
    ("replacement", "data_size", "mlp", 2),   # chunks of 2 of a cohort of 3: a remainder
    ("shuffle", "data_size", "mlp", 1),       # one client at a time
])
def test_vectorized_rounds_equal_a_per_client_loop(sampling, weighting, model, width):
  # Epoch-driven steps: clients of 7..12 examples run 2..3 steps (the step mask at work).
  task, world = toy_setup(num_clients=6, cohort=3, local_epochs=1.0, batch_size=4, model=model)
  hp = dict(client_lr=0.3, server_lr=0.7, batch_size=4, sampling=sampling, weighting=weighting,
            client_width=width)
  alg = fedavg.build(task, world, hp)
  server, clients = alg.init(jax.random.PRNGKey(0))
  params = server.params
  round_fn = jax.jit(alg.round)
  for t in range(3):
    key = jax.random.PRNGKey(100 + t)
    expected = _loop_round(task, world, hp, params, key, t)
    server, clients, _ = round_fn(server, clients, key)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6),
                 server.params, expected)
    params = server.params
  assert sorted(np.unique(np.asarray(world.client_steps)).tolist()) == [2, 3]


@pytest.mark.parametrize("opt", ["momentum", "adam", "yogi", "adagrad", "amsgrad",
                                 "optax_adam", "optax_yogi"])
def test_server_optimizers_train(opt):
  task, world = toy_setup(num_clients=6, cohort=6)
  hp = dict(client_lr=0.1, server_lr=0.1 if opt != "momentum" else 1.0, batch_size=4,
            server_opt=opt)
  alg = fedavg.build(task, world, hp)
  server, clients = alg.init(jax.random.PRNGKey(0))
  loss0 = float(task.evaluate(server.params)["train_loss"])
  step = jax.jit(alg.round)
  for t in range(15):
    server, clients, _ = step(server, clients, jax.random.PRNGKey(t))
  assert float(task.evaluate(server.params)["train_loss"]) < 0.7 * loss0


def test_momentum_server_matches_hand_recursion():
  task, world = toy_setup(num_clients=4, cohort=4)
  base = dict(client_lr=0.1, batch_size=4)
  sgd = fedavg.build(task, world, {**base, "server_lr": 1.0})
  mom = fedavg.build(task, world, {**base, "server_lr": 0.5, "server_opt": "momentum",
                                   "server_momentum": 0.9})
  s_sgd, c = sgd.init(jax.random.PRNGKey(0))
  s_mom, _ = mom.init(jax.random.PRNGKey(0))
  x, v = s_mom.params, jax.tree.map(jnp.zeros_like, s_mom.params)
  for t in range(3):
    key = jax.random.PRNGKey(t)
    # The SGD server from x gives x + Delta_t, so Delta_t is observable.
    after, _, _ = sgd.round(s_sgd._replace(params=x), c, key)
    delta = jax.tree.map(jnp.subtract, after.params, x)
    v = jax.tree.map(lambda v_, d: 0.9 * v_ + d, v, delta)   # v = beta v + Delta
    x = jax.tree.map(lambda x_, v_: x_ + 0.5 * v_, x, v)     # x = x + lr v
    s_mom, _, _ = mom.round(s_mom, c, key)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                 s_mom.params, x)


def test_unknown_weighting_is_a_usage_error():
  from fedjax_bench.errors import UsageError
  task, world = toy_setup()
  with pytest.raises(UsageError, match="uniform, data_size"):
    fedavg.build(task, world, dict(client_lr=0.1, batch_size=4, weighting="bogus"))


def test_amsgrad_is_the_papers_form_without_bias_correction():
  """The Fed-EF paper's AMSGrad (docs/papers/fedef.md): no bias correction, eps inside the square
  root; hand recursion."""
  from fedjax_bench.core import server_opt
  opt = server_opt.make("amsgrad", 0.5, b1=0.9, b2=0.999, eps=1e-8)
  x = {"w": jnp.array([1.0, -2.0])}
  state = opt.init(x)
  m = v = vh = np.zeros(2)
  for g in ([0.3, -1.0], [-0.1, 0.2], [2.0, 0.0]):
    g = np.array(g)
    m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
    vh = np.maximum(vh, v)
    upd, state = opt.update({"w": jnp.asarray(g, jnp.float32)}, state)
    np.testing.assert_allclose(upd["w"], -0.5 * m / np.sqrt(vh + 1e-8), rtol=1e-5)



def _fedopt_step(rule, x, m, v, d, lr, b1, b2, tau):
  """One round of Reddi et al. (2021) Algorithm 2 in float64, written from the paper."""
  m = b1 * m + (1 - b1) * d
  if rule == "adagrad":
    v = v + d * d
  elif rule == "yogi":
    v = v - (1 - b2) * d * d * np.sign(v - d * d)
  else:
    v = b2 * v + (1 - b2) * d * d
  return x + lr * m / (np.sqrt(v) + tau), m, v


@pytest.mark.parametrize("rule", ["adam", "yogi", "adagrad"])
def test_fedopt_is_reddi_et_al_algorithm_2(rule):
  """The paper's recursion over six rounds: m_{-1} = 0, v_{-1} = tau^2, no bias correction,
  tau outside the square root. The deltas shrink and grow again, so Yogi's sign takes both
  values."""
  from fedjax_bench.core import server_opt
  lr, b1, b2, tau = 0.3, 0.9, 0.99, 0.05
  opt = server_opt.make(rule, lr, b1=b1, b2=b2, eps=tau)
  deltas = [[0.3, -1.0, 0.0], [-0.1, 0.2, 0.01], [2.0, 0.0, -0.02], [0.01, -0.5, 0.3],
            [0.001, 0.002, -0.001], [1.5, 1.0, -2.0]]
  x0 = [1.0, -2.0, 0.5]
  params = {"w": jnp.array(x0)}
  state = opt.init(params)
  x, m, v = np.array(x0), np.zeros(3), np.full(3, tau ** 2)
  signs = set()
  for d in deltas:
    d = np.array(d)
    signs.add(float(np.sign(v - d * d)[0]))
    x, m, v = _fedopt_step(rule, x, m, v, d, lr, b1, b2, tau)
    upd, state = opt.update({"w": -jnp.asarray(d, jnp.float32)}, state)  # g = -Delta
    params = optax.apply_updates(params, upd)
    np.testing.assert_allclose(params["w"], x, rtol=1e-5, atol=1e-6)
  assert signs == {-1.0, 1.0}


def test_fedopt_server_in_fedavg_matches_the_recursion(rule="yogi"):
  """Through FedAvg's round: the server sees the averaged client delta Delta_t (observed
  with an SGD server, lr 1, from the same x) and takes the paper's step. The rules share
  this wiring, so one (the one with a sign) stands for the three."""
  task, world = toy_setup(num_clients=4, cohort=4)
  base = dict(client_lr=0.1, batch_size=4)
  lr, b1, b2, tau = 0.05, 0.9, 0.99, 1e-3
  sgd = fedavg.build(task, world, {**base, "server_lr": 1.0})
  ada = fedavg.build(task, world, {**base, "server_lr": lr, "server_opt": rule,
                                   "server_beta1": b1, "server_beta2": b2,
                                   "server_eps": tau})
  s_sgd, c = sgd.init(jax.random.PRNGKey(0))
  s_ada, _ = ada.init(jax.random.PRNGKey(0))
  flat = lambda tree: np.concatenate([np.ravel(a) for a in jax.tree.leaves(tree)])
  m = np.zeros(flat(s_ada.params).shape)
  v = np.full(m.shape, tau ** 2)
  sgd_round, ada_round = jax.jit(sgd.round), jax.jit(ada.round)
  for t in range(4):
    key = jax.random.PRNGKey(t)
    x = flat(s_ada.params).astype(np.float64)
    after, _, _ = sgd_round(s_sgd._replace(params=s_ada.params), c, key)
    want, m, v = _fedopt_step(rule, x, m, v, flat(after.params) - x, lr, b1, b2, tau)
    s_ada, _, _ = ada_round(s_ada, c, key)
    np.testing.assert_allclose(flat(s_ada.params), want, rtol=1e-5, atol=1e-6)
