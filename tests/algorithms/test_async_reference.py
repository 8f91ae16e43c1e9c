"""Asynchronous algorithms (docs/papers/area.md) against a plain NumPy event loop of the pseudocode.

The toy: client i holds a few (x, y) pairs in R^2 x R, the model is affine (w, b), the
loss 0.5 (w.x + b - y)^2, and local training is full-batch GD (a batch as large as the
largest client), so the NumPy side needs only a closed-form gradient. Traces are
scripted (`asynchrony.scripted`) and fed to both sides. The helpers here are shared
with the other test_async_* modules.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from fedjax_bench import algorithms
from fedjax_bench.core import keys
from fedjax_bench.algorithms import asynchronous
from fedjax_bench.task.build import make_task
from fedjax_bench.data.federated import Dataset, FederatedData
from fedjax_bench.sim import asynchrony, participation, world as world_lib

ASYNC = ("area", "fedbuff", "asfedavg", "mifa_async")


# ---------------------------------------------------------------------------------------
# Shared helpers


class Affine(nn.Module):
  """w . x (+ b); ``init_value`` None draws N(0, 1), else every parameter starts there."""
  init_value: float | None = None
  bias: bool = True

  @nn.compact
  def __call__(self, x):
    if self.init_value is None:
      init = nn.initializers.normal(1.0)
    else:
      # An explicit dtype: a weakly typed float64 parameter would make x @ w float32.
      init = lambda key, shape: jnp.full(shape, self.init_value, jnp.result_type(float))
    out = x @ self.param("w", init, (x.shape[-1],))
    if self.bias:
      out = out + self.param("b", init, ())
    return out[:, None]


def regression_task(xs, ys, model=None):
  """Client i's examples xs[i] [c_i, d] with targets ys[i] [c_i]; squared-error loss."""
  xs = [np.asarray(x, np.float32) for x in xs]
  ys = [np.asarray(y, np.float32) for y in ys]
  ds = Dataset("toy", FederatedData.from_clients(xs, ys), xs[0], ys[0], 1,
               (xs[0].shape[1],), False)
  return make_task(ds, model or Affine(), loss_type="squared_error")


def make_world(n, steps=1, clock=None):
  steps = np.broadcast_to(np.asarray(steps, np.int32), (n,))
  return world_lib.make(participation.full(n), steps, clock)


def init_key(seed):
  return keys.init_key(keys.root(seed))


def round_key(seed, t):
  return keys.round_key(keys.root(seed), t)


def settled(server, clients):
  """The up-to-date client states (async servers hold the last event's rows apart)."""
  return asynchronous.settled(server, clients) if hasattr(server, "pending") else clients


def simulate(alg, events, seed=0, observe=None):
  """Runs ``events`` rounds as the engine would: (final (server, settled clients),
  metrics per event, observe(server, settled clients) per event)."""
  observe = observe or (lambda server, clients: ())

  def go(state, seed):
    def step(carry, t):
      server, clients = carry
      server, clients, metrics = alg.round(server, clients, round_key(seed, t))
      return (server, clients), (metrics, observe(server, settled(server, clients)))
    (server, clients), out = jax.lax.scan(step, state, jnp.arange(events))
    return (server, settled(server, clients)), out

  # Init runs op by op: those small programs are cached across tests, a jitted init is not.
  state, (metrics, seen) = jax.jit(go)(alg.init(init_key(seed)), seed)
  return state, metrics, seen


def flat(params):
  """The affine model's parameters as one vector [w, b] (any leading axes)."""
  return jnp.concatenate([params["w"], params["b"][..., None]], axis=-1)


# ---------------------------------------------------------------------------------------
# The NumPy reference


class Problem:
  def __init__(self, seed=0, sizes=(1, 3, 2, 4, 2), d=2):
    rng = np.random.default_rng(seed)
    self.xs = [rng.normal(size=(s, d)) for s in sizes]
    self.ys = [rng.normal(size=s) + i for i, s in enumerate(sizes)]
    self.n, self.d = len(sizes), d
    self.w = np.asarray(sizes, np.float64) / np.sum(sizes)

  def grad(self, i, theta, grad_scale="data_weight"):
    """w_i * grad of client i's mean loss 0.5 (w.x + b - y)^2 at theta = [w, b]."""
    x, y = self.xs[i], self.ys[i]
    r = x @ theta[:-1] + theta[-1] - y
    g = np.concatenate([x.T @ r, [r.sum()]]) / len(y)
    return g * (self.w[i] if grad_scale == "data_weight" else 1.0)

  def local(self, i, theta, alpha, steps, project=lambda v: v):
    for _ in range(steps):
      theta = project(theta - alpha * self.grad(i, theta))
    return theta


def reference(method, prob, trace, x0, *, alpha0, delta, steps, lr_power=0.0,
              send_after=False, lagged=False, project=lambda v: v, divisor="buffer",
              staleness_weight="none", eta_g=1.0, mode="model_average", poisson=False):
  """x_s and the message's staleness (version and event) after every event of ``trace``
  (entries n: Poisson aggregation events), the final client memory and x_recv; written
  from Algorithms 1-2, eqs. (2)-(4) and the baselines of docs/papers/area.md one event at a
  time."""
  n = prob.n
  xs, buf = x0.copy(), np.zeros_like(x0)
  x_recv = [x0.copy() for _ in range(n)]
  alpha_recv, recv_version, recv_event = [alpha0] * n, [0] * n, [0] * n
  memory = [x0.copy() if method == "area" else np.zeros_like(x0) for _ in range(n)]
  count = version = messages = 0
  if method == "asfedavg" and mode == "async_sgd":
    delta = 1
  out, staleness = [], []
  for k, j in enumerate(trace):
    staleness.append((0, 0) if j == n else (version - recv_version[j], k - recv_event[j]))
    if j == n:
      aggregate = True
    else:
      x_loc = x_recv[j] if lagged else prob.local(j, x_recv[j], alpha_recv[j], steps[j],
                                                  project)
      tau = version - recv_version[j]
      if method == "area":
        buf = buf + (x_loc - memory[j]) / n
        memory[j] = x_loc
      elif method == "mifa_async":
        u_new = x_loc - x_recv[j]
        buf = buf + (u_new - memory[j]) / n
        memory[j] = u_new
      elif method == "fedbuff":
        s = 1.0 / np.sqrt(1.0 + tau) if staleness_weight == "sqrt" else 1.0
        buf = buf + s * (x_loc - x_recv[j])
      elif mode == "model_average":
        buf = buf + x_loc
      else:
        buf = buf + (x_loc - x_recv[j])
      messages += 1
      count += 1
      alpha = alpha0 / (messages + 1) ** lr_power
      pre, pre_version = xs.copy(), version
      aggregate = not poisson and count == delta
    if aggregate:
      if method == "area":
        xs, buf = xs + buf, np.zeros_like(buf)
      elif method == "mifa_async":
        xs = xs + buf
      elif method == "fedbuff":
        d = max(count, 1) if divisor == "buffer" else n
        xs, buf = xs + eta_g * buf / d, np.zeros_like(buf)
      elif mode == "model_average":
        xs = buf / count if count > 0 else xs
        buf = np.zeros_like(buf)
      else:
        xs, buf = xs + buf, np.zeros_like(buf)
      count, version = 0, version + 1
    if j < n:
      sent, sent_version = (xs, version) if send_after else (pre, pre_version)
      x_recv[j] = prob.local(j, sent, alpha, steps[j], project) if lagged else sent.copy()
      alpha_recv[j], recv_version[j], recv_event[j] = alpha, sent_version, k
    out.append(xs.copy())
  return np.asarray(out), np.asarray(staleness), np.asarray(memory), np.asarray(x_recv)


def random_trace(n, events, seed, aggregation_prob=0.0):
  """Random clients (the last one never reports) and increasing times."""
  rng = np.random.default_rng(seed)
  p = rng.uniform(0.2, 1.0, n)
  p[-1] = 0.0
  js = rng.choice(n, events, p=p / p.sum())
  if aggregation_prob > 0:
    js = np.where(rng.uniform(size=events) < aggregation_prob, n, js)
  return js, np.cumsum(rng.exponential(0.1, events))


STEPS = (1, 2, 3, 1, 2)
CASES = [  # each case is one compile (~1-2 s on 2 cores)
    ("area", {"projection": "box", "projection_radius": 0.5, "grad_scale": "none"}),
    ("area", {"send_after_aggregation": True, "area_lr_power": 0.7, "projection": "ball",
              "projection_radius": 0.8}),
    ("area", {"aggregation": "poisson", "iterate_form_init": True}),
    ("fedbuff", {"fedbuff_staleness": "sqrt", "fedbuff_divisor": "num_clients",
                 "server_lr": 0.5}),
    ("asfedavg", {}),
    ("asfedavg", {"asfedavg_mode": "async_sgd"}),
    ("mifa_async", {"aggregation": "poisson", "send_after_aggregation": True}),
    ("area", {}),
    ("area", {"iterate_form_init": True}),
    ("fedbuff", {}),
    ("fedbuff", {"aggregation": "poisson"}),
    ("asfedavg", {"aggregation": "poisson"}),
    ("mifa_async", {}),
]


def _case_id(case):
  name, extra = case.values if hasattr(case, "values") else case
  return f"{name}-{'-'.join(extra) or 'default'}"


def reference_options(hp):
  radius = hp.get("projection_radius", 1.0)
  project = {
      "none": lambda v: v,
      "ball": lambda v: v * min(1.0, radius / max(np.linalg.norm(v), 1e-30)),
      "box": lambda v: np.clip(v, -radius, radius),
  }[hp.get("projection", "none")]
  return dict(lr_power=hp.get("area_lr_power", 0.0),
              send_after=hp.get("send_after_aggregation", False),
              lagged=hp.get("iterate_form_init", False), project=project,
              divisor=hp.get("fedbuff_divisor", "buffer"),
              staleness_weight=hp.get("fedbuff_staleness", "none"),
              eta_g=hp.get("server_lr", 1.0), mode=hp.get("asfedavg_mode", "model_average"),
              poisson=hp.get("aggregation") == "poisson")


@pytest.mark.parametrize("name,extra", CASES, ids=[_case_id(c) for c in CASES])
def test_event_loop_matches_numpy_reference(name, extra):
  prob = Problem()
  n, events = prob.n, 40
  poisson = extra.get("aggregation") == "poisson"
  js, ts = random_trace(n, events, seed=7, aggregation_prob=0.25 if poisson else 0.0)
  clock = asynchrony.scripted(js, ts, n, has_aggregation=poisson)
  task = regression_task(prob.xs, prob.ys)
  hp = {"client_lr": 0.9, "batch_size": task.max_count, "async_delta": 3, **extra}
  alg = algorithms.get(name).build(task, make_world(n, STEPS, clock), hp)
  observe = lambda s, c: (flat(s.params), flat(s.aux), jnp.mean(flat(c.memory), 0)
                          if name in ("area", "mifa_async") else ())
  (server, clients), metrics, (xs, aux, mean_memory) = simulate(alg, events, observe=observe)

  x0 = np.asarray(flat(alg.init(init_key(0))[0].params), np.float64)
  grad_scale = extra.get("grad_scale", "data_weight")
  if grad_scale == "none":
    prob.w = np.ones(n)
  ref_xs, ref_staleness, ref_memory, ref_recv = reference(
      name, prob, js, x0, alpha0=0.9, delta=3, steps=STEPS, **reference_options(hp))
  np.testing.assert_allclose(np.asarray(xs), ref_xs, rtol=2e-5, atol=2e-5)
  np.testing.assert_array_equal(np.asarray(metrics["staleness"]), ref_staleness[:, 0])
  np.testing.assert_array_equal(np.asarray(metrics["event_staleness"]), ref_staleness[:, 1])
  if extra.get("projection") == "ball":  # P_X keeps every model in X (Algorithm 2)
    radius = extra["projection_radius"] * (1 + 1e-5)
    assert np.linalg.norm(np.asarray(xs), axis=-1).max() <= radius
    assert np.linalg.norm(ref_memory if name == "area" else ref_recv, axis=-1).max() <= radius
    assert np.linalg.norm(np.asarray(flat(clients.memory)), axis=-1).max() <= radius
  np.testing.assert_allclose(np.asarray(flat(clients.x_recv)), ref_recv, rtol=2e-5, atol=2e-5)
  if name in ("area", "mifa_async"):
    memory = np.asarray(flat(clients.memory))
    np.testing.assert_allclose(memory, ref_memory, rtol=2e-5, atol=2e-5)
    # Client n-1 never reported: AREA counts it as x0, MIFA as 0 (docs/papers/area.md).
    np.testing.assert_array_equal(memory[-1], x0.astype(np.float32) if name == "area" else 0)
    # The server's running aggregates are the means of the client memories (eq. (4) for AREA).
    xs_aux = np.asarray(xs) + np.asarray(aux) if name == "area" else np.asarray(aux)
    np.testing.assert_allclose(xs_aux, np.asarray(mean_memory), atol=1e-5)
  # The bookkeeping the metrics report.
  messages = np.cumsum(js < n)
  np.testing.assert_array_equal(np.asarray(metrics["cum_messages"]), messages)
  np.testing.assert_allclose(np.asarray(metrics["cum_time"]), ts.astype(np.float32))
  assert int(server.round) == events and int(server.messages) == messages[-1]


def test_area_invariant_x_plus_u_is_the_mean_of_the_client_memories():
  """x_s + u = mean_i y_i after every event, x_s = mean_i y_i right after each
  aggregation, and a client that never reported still contributes y_i = x0 (eq. (4),
  docs/papers/area.md), on a stochastic renewal-clock run with minibatches."""
  prob = Problem(sizes=(5, 8, 3, 6, 7))
  n = prob.n
  clock = asynchrony.renewal([10, 3, 10, 20, 1e-6], "exponential")  # client 4 never reports
  task = regression_task(prob.xs, prob.ys)
  alg = algorithms.get("area").build(task, make_world(n, 3, clock), {
      "client_lr": 2.0, "batch_size": 2, "async_delta": 4})

  def observe(s, c):
    return flat(s.params), flat(s.aux), jnp.mean(flat(c.memory), 0), flat(c.memory)[4]

  _, metrics, (x, u, mean_y, y4) = simulate(alg, 200, seed=3, observe=observe)
  x, u, mean_y = map(np.asarray, (x, u, mean_y))
  scale = 1 + np.abs(x).max()
  assert np.abs(x + u - mean_y).max() <= 1e-5 * scale
  aggregated = np.diff(np.asarray(metrics["cum_aggregations"]), prepend=0) > 0
  assert aggregated.sum() == 50
  assert np.abs(x[aggregated] - mean_y[aggregated]).max() <= 1e-5 * scale
  np.testing.assert_array_equal(np.asarray(u)[aggregated], 0.0)
  x0 = np.asarray(flat(alg.init(init_key(3))[0].params))
  np.testing.assert_array_equal(np.asarray(y4), np.broadcast_to(x0, y4.shape))
  assert np.abs(x[-1] - x0).max() > 0.1  # it did move


def test_mifa_memory_mean_is_the_mean_of_the_memories():
  prob = Problem(sizes=(5, 8, 3, 6, 7))
  n = prob.n
  clock = asynchrony.renewal([10, 3, 10, 20, 1e-6], "lognormal")
  task = regression_task(prob.xs, prob.ys)
  alg = algorithms.get("mifa_async").build(task, make_world(n, 2, clock), {
      "client_lr": 1.0, "batch_size": 2, "async_delta": 4})
  _, _, (ubar, mean_u, u4) = simulate(alg, 150, seed=1, observe=lambda s, c: (
      flat(s.aux), jnp.mean(flat(c.memory), 0), flat(c.memory)[4]))
  np.testing.assert_allclose(np.asarray(ubar), np.asarray(mean_u), atol=1e-6)
  np.testing.assert_array_equal(np.asarray(u4), 0.0)
  assert np.abs(np.asarray(ubar[-1])).max() > 1e-3


def test_projection_keeps_every_model_in_the_ball():
  """P_X inside every local step keeps y_i and x_recv_i in X; x_s, an average of points
  of X, stays there without projecting (Algorithms 1-2)."""
  prob = Problem(sizes=(5, 8, 3, 6, 7))
  task = regression_task(prob.xs, prob.ys)
  radius = 0.5
  alg = algorithms.get("area").build(task, make_world(prob.n, 3), {
      "client_lr": 3.0, "batch_size": 3, "projection": "ball", "projection_radius": radius,
      "async_rates": "normal", "area_lr_power": 0.6})
  norm = lambda a: jnp.linalg.norm(flat(a), axis=-1)
  _, _, (xs, y, recv) = simulate(alg, 200, observe=lambda s, c: (
      norm(s.params), norm(c.memory), norm(c.x_recv)))
  for v in (xs, y, recv):
    assert np.asarray(v).max() <= radius * (1 + 1e-5)
  assert np.asarray(y).max() >= radius * 0.99  # the constraint was active


# ---------------------------------------------------------------------------------------
# Equivalences with gradient descent (Δ = n, exact gradients)


def gd(prob, x, alpha, rounds):
  """x <- x - (alpha / n) grad f(x), f = sum_i w_i f^_i; every iterate."""
  out = []
  for _ in range(rounds):
    x = x - alpha / prob.n * sum(prob.grad(i, x) for i in range(prob.n))
    out.append(x)
  return np.asarray(out)


def test_sfedavg_with_every_client_and_one_step_is_gradient_descent():
  prob = Problem()
  task = regression_task(prob.xs, prob.ys)
  alg = algorithms.get("sfedavg").build(task, make_world(prob.n, 1), {
      "client_lr": 3.0, "batch_size": task.max_count, "async_delta": prob.n})
  _, metrics, xs = simulate(alg, 12, observe=lambda s, c: flat(s.params))
  x0 = np.asarray(flat(alg.init(init_key(0))[0].params), np.float64)
  np.testing.assert_allclose(np.asarray(xs), gd(prob, x0, 3.0, 12), rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(np.asarray(metrics["cum_messages"]), prob.n * np.arange(1, 13))
  assert np.all(np.diff(np.asarray(metrics["cum_time"])) > 0)


def test_sfedavg_round_averages_some_set_of_delta_clients():
  prob = Problem()
  task = regression_task(prob.xs, prob.ys)
  alpha, delta = 2.0, 2
  alg = algorithms.get("sfedavg").build(task, make_world(prob.n, STEPS), {
      "client_lr": alpha, "batch_size": task.max_count, "async_delta": delta,
      "async_rates": "normal"})
  _, _, xs = simulate(alg, 6, seed=4, observe=lambda s, c: flat(s.params))
  x = np.asarray(flat(alg.init(init_key(4))[0].params), np.float64)
  chosen = []
  for x_next in np.asarray(xs, np.float64):
    candidates = {s: np.mean([prob.local(i, x, alpha, STEPS[i]) for i in s], 0)
                  for s in itertools.combinations(range(prob.n), delta)}
    best = min(candidates, key=lambda s: np.abs(candidates[s] - x_next).max())
    np.testing.assert_allclose(candidates[best], x_next, rtol=1e-5, atol=1e-6)
    chosen.append(best)
    x = x_next
  assert len(set(chosen)) > 1  # fresh samples each round


def test_area_on_a_round_robin_trace_is_gradient_descent_twice():
  """Delta = n, each client once per block, pre-aggregation send: x^(2m-1) = x^(2m) =
  GD^m(x0) with step alpha / n (pre-aggregation send, Algorithm 1)."""
  prob = Problem()
  n, blocks = prob.n, 8
  js = np.tile(np.arange(n), blocks)
  clock = asynchrony.scripted(js, np.arange(1, n * blocks + 1) * 0.1, n)
  task = regression_task(prob.xs, prob.ys)
  alg = algorithms.get("area").build(task, make_world(n, 1, clock), {
      "client_lr": 3.0, "batch_size": task.max_count, "async_delta": n})
  _, _, xs = simulate(alg, n * blocks, observe=lambda s, c: flat(s.params))
  at_aggregations = np.asarray(xs)[n - 1::n]
  x0 = np.asarray(flat(alg.init(init_key(0))[0].params), np.float64)
  steps = gd(prob, x0, 3.0, blocks // 2)
  np.testing.assert_allclose(at_aggregations[0::2], steps, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(at_aggregations[1::2], steps, rtol=1e-5, atol=1e-6)
