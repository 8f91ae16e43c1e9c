"""The asynchronous world (sim/asynchrony.py, docs/papers/area.md): rates, event-trace statistics
of the renewal and superposition clocks, heavy-tailed laws, Poisson aggregation events,
S-FedAvg round durations, and the hyperparameter checks of the async algorithms."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_bench import algorithms, engine, settings
from fedjax_bench.core import keys
from fedjax_bench.algorithms import asynchronous
from fedjax_bench.errors import UsageError
from fedjax_bench.sim import asynchrony, participation, world as world_lib
from tests.algorithms.test_async_reference import (Problem, init_key, make_world, regression_task,
                                                   round_key)

RATES = np.array([1.0, 2.0, 3.0, 14.0])


def trace(clock, events, seed=0):
  """(outcomes, times) of ``events`` steps, keys as the async algorithms draw them."""
  def go(key):
    def step(state, t):
      j, time, state = clock.step(keys.for_purpose(jax.random.fold_in(key, t), "events"),
                                  state)
      return state, (j, time)
    _, out = jax.lax.scan(step, clock.init(keys.for_purpose(key, "events")),
                          jnp.arange(events))
    return out
  js, ts = jax.jit(go)(jax.random.PRNGKey(seed))
  return np.asarray(js), np.asarray(ts, np.float64)


def test_client_rates():
  np.testing.assert_array_equal(asynchrony.client_rates("uniform", 3, rate=7.0), [7.0] * 3)
  a = asynchrony.client_rates("normal", 20000, rate=10.0, std=5.0, min_rate=0.5, seed=3)
  b = asynchrony.client_rates("normal", 20000, rate=10.0, std=5.0, min_rate=0.5, seed=3)
  np.testing.assert_array_equal(a, b)
  # N(10, 5) with 5 the std (with variance 5 almost nothing would fall below 0.5):
  assert a.min() == 0.5 and 0.025 < np.mean(a == 0.5) < 0.033  # Phi(-1.9) = 0.0287
  assert abs(np.mean(a[a > 0.5]) - 10.338) < 0.1               # E[X | X > 0.5]
  with pytest.raises(UsageError, match="uniform, normal"):
    asynchrony.client_rates("lognormal", 3)


@pytest.mark.parametrize("make", [
    lambda: asynchrony.renewal(RATES, "exponential"),
    lambda: asynchrony.superposition(RATES),
    lambda: asynchrony.renewal(RATES, "lognormal"),
    lambda: asynchrony.renewal(RATES, "pareto", shape=2.5),
], ids=["renewal", "superposition", "lognormal", "pareto"])
def test_event_fractions_and_gaps_follow_the_rates(make):
  """Client i sends a fraction lambda_i / sum(lambda) of the messages and the mean time
  between events is 1 / sum(lambda), whatever the delay law with mean 1/lambda_i
  (Example 4's clocks; the renewal and superposition samplers agree)."""
  events = 20000
  js, ts = trace(make(), events)
  assert np.all(np.diff(ts) >= 0) and js.min() >= 0 and js.max() < RATES.size
  fractions = np.bincount(js, minlength=RATES.size) / events
  np.testing.assert_allclose(fractions, RATES / RATES.sum(), atol=0.012)
  np.testing.assert_allclose(ts[-1] / events, 1 / RATES.sum(), rtol=0.04)


def test_poisson_aggregation_events():
  """With lambda_s, outcome n is an aggregation event with probability lambda_s / lambda-bar
  (Example 4), for both clock constructions."""
  for clock in (asynchrony.renewal(RATES, agg_rate=5.0),
                asynchrony.superposition(RATES, agg_rate=5.0)):
    assert clock.has_aggregation
    js, ts = trace(clock, 20000, seed=1)
    total = RATES.sum() + 5.0
    assert abs(np.mean(js == RATES.size) - 5.0 / total) < 0.012
    np.testing.assert_allclose(ts[-1] / 20000, 1 / total, rtol=0.04)


@pytest.mark.parametrize("law,shape", [("exponential", None), ("lognormal", 1.0),
                                       ("pareto", 2.5)])
def test_fresh_delays_have_mean_one_over_rate(law, shape):
  clock = asynchrony.renewal(RATES, law, shape=shape)
  draws = jax.jit(jax.vmap(lambda k: clock.delays(k, jnp.arange(RATES.size))))(
      jax.random.split(jax.random.PRNGKey(0), 40000))
  draws = np.asarray(draws, np.float64)
  assert draws.min() > 0
  np.testing.assert_allclose(draws.mean(0) * RATES, 1.0, rtol=0.04)


def test_round_duration_is_the_slowest_of_the_sampled_clients():
  """max of n fresh Exp(lambda) has mean H_n / lambda (S-FedAvg's round, docs/papers/area.md)."""
  n, rate = 8, 10.0
  clock = asynchrony.renewal(np.full(n, rate))
  durations = jax.jit(jax.vmap(lambda k: asynchrony.round_duration(clock, k, jnp.arange(n))))(
      jax.random.split(jax.random.PRNGKey(2), 40000))
  harmonic = np.sum(1.0 / np.arange(1, n + 1))
  np.testing.assert_allclose(np.mean(np.asarray(durations)), harmonic / rate, rtol=0.02)
  # Adding a slow client to the sample makes rounds slower: the straggler effect.
  slow = asynchrony.renewal(np.append(np.full(n - 1, rate), 0.5))
  durations = jax.jit(jax.vmap(lambda k: asynchrony.round_duration(slow, k, jnp.arange(n))))(
      jax.random.split(jax.random.PRNGKey(2), 4000))
  assert np.mean(np.asarray(durations)) > 1.9


def test_scripted_trace_and_its_end():
  clock = asynchrony.scripted([2, 0, 1], [0.5, 0.7, 2.0], 3)
  js, ts = trace(clock, 5)
  np.testing.assert_array_equal(js[:3], [2, 0, 1])
  np.testing.assert_array_equal(ts[:3], np.float32([0.5, 0.7, 2.0]))
  assert np.all(np.isinf(ts[3:]))


def test_world_clock_is_optional_and_checked():
  part = participation.full(3)
  assert world_lib.make(part, np.ones(3)).clock is None
  clock = asynchrony.renewal(np.ones(3))
  assert world_lib.make(part, np.ones(3), clock).clock is clock
  with pytest.raises(UsageError, match="one rate per client"):
    world_lib.make(part, np.ones(3), asynchrony.renewal(np.ones(4)))


def test_horizon_freezes_the_state_under_the_engine():
  """Events after sim_time change nothing; the engine runs an async algorithm like any
  other (one round = one event) and reports the last value of cum_* metrics."""
  prob = Problem()
  task = regression_task(prob.xs, prob.ys)
  clock = asynchrony.scripted([0, 1, 2, 3, 1, 0], [0.1, 0.2, 0.3, 1.5, 1.6, 2.0], prob.n)
  world = make_world(prob.n, 1, clock)
  build = lambda hp: algorithms.get("area").build(task, world, hp)
  out = engine.run(build, task, {"client_lr": 1.0, "batch_size": 4, "async_delta": 2,
                                 "sim_time": 1.0}, seeds=[0], rounds=6, eval_every=3)
  metrics = out.history.metrics
  np.testing.assert_array_equal(metrics["train_loss"][1], metrics["train_loss"][2])
  assert metrics["train_loss"][1] != metrics["train_loss"][0]
  np.testing.assert_allclose(metrics["cum_time"][1:, 0, 0], [0.3, 0.3], rtol=1e-6)
  np.testing.assert_array_equal(metrics["cum_messages"][1:, 0, 0], [3, 3])
  np.testing.assert_array_equal(metrics["cum_aggregations"][1:, 0, 0], [1, 1])
  server = out.state[0]
  assert int(server.round[0]) == 6 and int(server.messages[0]) == 3


@pytest.mark.parametrize("name,hp,match", [
    ("area", {"async_rates": "gamma"}, "uniform, normal"),
    ("area", {"async_delay": "weibull"}, "exponential, lognormal, pareto"),
    ("area", {"async_delay": "pareto", "async_delay_shape": 1.0}, "exceed 1"),
    ("area", {"aggregation": "periodic"}, "count, poisson"),
    ("area", {"grad_scale": "sum"}, "data_weight, none"),
    ("area", {"projection": "sphere"}, "none, ball, box"),
    ("area", {"sampling": "stratified"}, "shuffle, shuffle_drop_last, replacement"),
    ("fedbuff", {"fedbuff_divisor": "k"}, "buffer, num_clients"),
    ("fedbuff", {"fedbuff_staleness": "poly"}, "none, sqrt"),
    ("asfedavg", {"asfedavg_mode": "fedasync"}, "model_average, async_sgd"),
    ("sfedavg", {"async_delta": 9}, r"\[1, num_clients=5\]"),
    ("sfedavg", {"sfedavg_weighting": "size"}, "uniform, data"),
])
def test_bad_hyperparameters_name_the_valid_choices(name, hp, match):
  prob = Problem()
  task = regression_task(prob.xs, prob.ys)
  with pytest.raises(UsageError, match=match):
    algorithms.get(name).build(task, make_world(prob.n), {"client_lr": 1.0,
                                                         "batch_size": 2, **hp})


def test_the_aggregation_rule_must_match_the_world_clock():
  prob = Problem()
  task = regression_task(prob.xs, prob.ys)
  world = make_world(prob.n, 1, asynchrony.renewal(np.ones(prob.n), agg_rate=1.0))
  with pytest.raises(UsageError, match="aggregation"):
    algorithms.get("area").build(task, world, {"client_lr": 1.0, "batch_size": 2})
  assert asynchronous.make_clock(world, {"aggregation": "poisson"}) is world.clock


# --- Rounds and messages completed by the horizon: the renewal count --------------------


def _completed_by_horizon(name, n, hp, seeds, steps, clock=None):
  """Per seed, after ``steps`` engine rounds (keys as the engine derives them): the
  aggregations (S-FedAvg rounds) or messages applied, and the simulated time reached."""
  prob = Problem(sizes=(2,) * n)
  hp = {"client_lr": 0.1, "batch_size": 2, **hp}
  seed = hp.pop("partition_seed", 0)  # the world's rates are drawn from the data's seed
  world = make_world(n, 1, clock)
  if clock is None:
    world = world._replace(rates=_rates(hp, n, seed))
  alg = algorithms.get(name).build(regression_task(prob.xs, prob.ys), world, hp)

  def one(seed):
    def step(state, t):
      server, clients, _ = alg.round(*state, round_key(seed, t))
      return (server, clients), None
    (server, _), _ = jax.lax.scan(step, alg.init(init_key(seed)), jnp.arange(steps))
    if name == "sfedavg":
      return server.version, getattr(server, "clock", server.time)
    # The time of the clock's next event (renewal) or of its last drawn one (superposition).
    return server.messages, jnp.min(getattr(server.clock, "next_t", server.clock))

  done, now = jax.jit(jax.vmap(one))(jnp.arange(seeds))
  return np.asarray(done, np.float64), np.asarray(now, np.float64)


def _rates(hp, n, seed):
  clock = settings.coerce(asynchronous.Hparams, {k: v for k, v in hp.items()
                                                 if k != "partition_seed"})
  return asynchronous.client_rates(clock, n, seed)


def _renewal_count_numpy(rates, delta, law, shape, horizon, trials, rounds, seed=0):
  """Monte Carlo of S-FedAvg's clock in NumPy: rounds of Delta clients drawn without
  replacement, each lasting the max of their fresh delays (mean 1/lambda_i); the number
  of rounds that end by the horizon."""
  rng = np.random.default_rng(seed)
  n = len(rates)
  ids = np.argsort(rng.random((trials, rounds, n)), axis=2)[:, :, :delta]
  if law == "exponential":
    unit = rng.exponential(1.0, ids.shape)
  else:  # lognormal with mean 1
    unit = np.exp(shape * rng.normal(size=ids.shape) - shape**2 / 2)
  ends = np.cumsum((unit / rates[ids]).max(axis=2), axis=1)
  assert (ends[:, -1] > horizon).all()  # enough rounds drawn
  return (ends <= horizon).sum(axis=1).astype(np.float64)


@pytest.mark.parametrize("n,delta,hp,horizon", [
    (4, 4, {"async_rate": 10.0}, 1.0),
    (4, 2, {"async_rate": 10.0}, 0.5),
    (10, 3, {"async_rates": "normal", "async_rate": 5.0, "async_rate_std": 3.0,
             "partition_seed": 1, "async_delay": "lognormal"}, 2.0),
])
def test_sfedavg_rounds_by_the_horizon_are_the_renewal_count(n, delta, hp, horizon):
  """A round that would end after T is not applied and the clock stays past T: the rounds
  applied are N(T) of the renewal process of round durations, not the rounds that fit
  when short ones are retried."""
  hp = {"async_delta": delta, "sim_time": horizon, **hp}
  ours, now = _completed_by_horizon("sfedavg", n, hp, seeds=2000, steps=30)
  rates = _rates(hp, n, hp.get("partition_seed", 0))
  ref = _renewal_count_numpy(rates, delta, hp.get("async_delay", "exponential"), 1.0,
                             horizon, trials=20000, rounds=60)
  se = np.sqrt(ours.var() / ours.size + ref.var() / ref.size)
  assert abs(ours.mean() - ref.mean()) < 3 * se, (ours.mean(), ref.mean(), se)
  assert (now > horizon).all()  # every seed's clock passed T within the steps


@pytest.mark.parametrize("make", [lambda: asynchrony.renewal(np.array([1.0, 2.0, 3.0, 4.0])),
                                  lambda: asynchrony.superposition(np.array([1.0, 2.0, 3.0,
                                                                             4.0]))],
                         ids=["renewal", "superposition"])
def test_async_messages_by_the_horizon_are_poisson(make):
  """With exponential clocks the messages by T are Poisson(sum(lambda) T), whichever clock
  form draws them: an event past T must not be redrawn from the last applied event."""
  horizon, total = 2.0, 10.0
  ours, now = _completed_by_horizon("fedbuff", 4, {"async_delta": 2, "sim_time": horizon},
                                  seeds=2000, steps=60, clock=make())
  se = np.sqrt(total * horizon / ours.size)
  assert abs(ours.mean() - total * horizon) < 3 * se, (ours.mean(), se)
  assert (now > horizon).all()


def _unit_numpy(rng, law, shape, size):
  """Mean-1 delays: log-normal exp(sigma N - sigma^2/2), Pareto by inverse CDF."""
  if law == "lognormal":
    return np.exp(shape * rng.normal(size=size) - shape**2 / 2)
  return (shape - 1) / shape * rng.random(size) ** (-1 / shape)


@pytest.mark.parametrize("algo,law,shape,horizon", [
    ("area", "lognormal", 2.0, 1.0),
    ("area", "pareto", 1.5, 20.0),
    ("sfedavg", "pareto", 1.1, 1.0),
])
def test_default_rounds_cover_the_horizon_under_heavy_tailed_delays(algo, law, shape,
                                                                    horizon):
  """Without --rounds, the engine steps must reach T in all but a rare run: at least the
  99.5% quantile of the events (S-FedAvg: rounds) by T, simulated here in NumPy."""
  n, rate, delta, trials = 4, 10.0, 4, 2000
  k = int(3 * rate * horizon) + 50  # gaps drawn per client: checked to pass T below
  cfg = dict(algo=algo, num_clients=n, sim_time=horizon, async_delay=law,
             async_delay_shape=shape, async_rates="uniform", async_rate=rate,
             async_rate_std=5.0, async_min_rate=0.5, partition_seed=0, async_delta=delta,
             aggregation="count", async_agg_rate=0.0, data_per_seed=False)
  rng = np.random.default_rng(7)
  if algo == "sfedavg":  # Delta = n: every round waits for all clients
    gaps = _unit_numpy(rng, law, shape, (trials, k, n)).max(axis=2) / rate
    ends = np.cumsum(gaps, axis=1)
  else:
    ends = np.cumsum(_unit_numpy(rng, law, shape, (trials, n, k)) / rate, axis=2)
  assert (ends[..., -1] > horizon).all()
  counts = (ends <= horizon).sum(axis=-1)
  counts = counts.sum(axis=1) if algo != "sfedavg" else counts
  assert asynchronous.rounds_for_horizon(cfg) >= np.quantile(counts, 0.995)
