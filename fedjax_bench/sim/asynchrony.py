"""When client messages reach the server: the delay model of the AREA paper's Section 4
(Example 4: exponential inter-update times).

Client i's inter-update times are i.i.d. with mean 1/lambda_i (the whole compute and
communication cycle, whatever the number of local steps). A `Clock` is a pure state
machine like `participation.Participation`: ``init(key) -> state`` and
``step(key, state) -> (j, t_k, state)``, the next event's outcome and time. Outcome
``j < num_clients`` is "client j's message arrives"; with Poisson aggregation
(``has_aggregation``) outcome ``num_clients`` is an aggregation event (rate lambda_s).

The trace depends only on the rates and the keys, never on the algorithm, so every
asynchronous method of a seed sees the same events (common random numbers).
"""

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_bench.errors import UsageError

RATES = ("uniform", "normal")
DELAYS = ("exponential", "lognormal", "pareto")
AGGREGATIONS = ("count", "poisson")
# Heavy-tail shape when none is given: log-normal sigma, Pareto tail index (> 1 for a
# finite mean; 1.5 has infinite variance).
DEFAULT_SHAPE = {"exponential": 1.0, "lognormal": 1.0, "pareto": 1.5}


class Clock(NamedTuple):
  num_clients: int
  init: Callable[[jax.Array], Any]
  step: Callable[[jax.Array, Any], tuple[jax.Array, jax.Array, Any]]  # (key, state)
  delays: Callable[[jax.Array, jax.Array], jax.Array]  # (key, ids) -> fresh durations
  has_aggregation: bool = False  # outcome num_clients is a Poisson aggregation event


class Renewal(NamedTuple):
  next_t: jax.Array  # [n] (+1 with aggregation) float32 time of each clock's next tick


def client_rates(kind: str, n: int, *, rate: float = 10.0, std: float = 5.0,
                 min_rate: float = 0.5, seed: int = 0) -> np.ndarray:
  """lambda_i: all ``rate`` ("uniform"), or N(rate, std) clipped at ``min_rate``
  ("normal"; std is the second argument: our reading of the AREA paper's N(10, 5),
  docs/papers/area.md), drawn once from ``seed``."""
  if kind == "uniform":
    return np.full(n, rate, np.float64)
  if kind == "normal":
    return np.maximum(np.random.default_rng(seed).normal(rate, std, n), min_rate)
  raise UsageError(f"unknown --async_rates={kind!r}; valid: {', '.join(RATES)}")


def unit_delay(key, law: str, shape: float, dtype=jnp.float32):
  """One draw with mean 1 (divide by lambda for mean 1/lambda)."""
  if law == "exponential":
    return jax.random.exponential(key, dtype=dtype)
  if law == "lognormal":
    return jnp.exp(shape * jax.random.normal(key, dtype=dtype) - 0.5 * shape**2)
  if law == "pareto":
    return jax.random.pareto(key, shape, dtype=dtype) * ((shape - 1) / shape)
  raise UsageError(f"unknown --async_delay={law!r}; valid: {', '.join(DELAYS)}")


def numpy_unit_delays(rng: np.random.Generator, law: str, shape: float | None, size):
  """`unit_delay`'s law in NumPy (host-side planning, e.g. how many rounds cover a
  horizon); ``shape`` None takes the law's default."""
  shape = DEFAULT_SHAPE.get(law, 1.0) if shape is None else shape
  _check_law(law, shape)
  if law == "exponential":
    return rng.exponential(1.0, size)
  if law == "lognormal":
    return np.exp(shape * rng.normal(size=size) - 0.5 * shape**2)
  return (rng.pareto(shape, size) + 1.0) * ((shape - 1) / shape)  # Lomax + 1 is Pareto


def _check_law(law: str, shape: float):
  if law not in DELAYS:
    raise UsageError(f"unknown --async_delay={law!r}; valid: {', '.join(DELAYS)}")
  if law == "pareto" and shape <= 1:
    raise UsageError(f"--async_delay_shape={shape} must exceed 1 for pareto (finite mean)")
  if law == "lognormal" and shape <= 0:
    raise UsageError(f"--async_delay_shape={shape} must be positive for lognormal")


def _fresh_delays(rates, law, shape):
  def delays(key, ids):
    unit = jax.vmap(lambda i: unit_delay(jax.random.fold_in(key, i), law, shape))(ids)
    return unit / rates[ids]
  return delays


def renewal(rates, delay: str = "exponential", *, shape: float | None = None,
            agg_rate=None) -> Clock:
  """Independent renewal clocks (our event-trace simulation, docs/papers/area.md): the next event is
  the earliest
  pending tick; only that clock draws a fresh delay. ``agg_rate`` (lambda_s, may be
  traced) adds an exponential aggregation clock as outcome n."""
  shape = DEFAULT_SHAPE.get(delay, 1.0) if shape is None else shape
  _check_law(delay, shape)
  rates = jnp.asarray(rates, jnp.float32)
  n = rates.shape[0]
  with_agg = agg_rate is not None
  all_rates = (jnp.concatenate([rates, jnp.asarray(agg_rate, jnp.float32)[None]])
               if with_agg else rates)

  def draw(key, i):
    if with_agg:  # outcome n, the aggregation clock, is exponential whatever the law
      key, agg_key = jax.random.split(key)
      law = jnp.where(i == n, jax.random.exponential(agg_key, dtype=jnp.float32),
                      unit_delay(key, delay, shape))
    else:
      law = unit_delay(key, delay, shape)
    return law / all_rates[i]

  def init(key):
    ids = jnp.arange(all_rates.shape[0])
    return Renewal(jax.vmap(lambda i: draw(jax.random.fold_in(key, i), i))(ids))

  def step(key, state: Renewal):
    j = jnp.argmin(state.next_t).astype(jnp.int32)
    t = state.next_t[j]
    return j, t, Renewal(state.next_t.at[j].set(t + draw(key, j)))

  return Clock(n, init, step, _fresh_delays(rates, delay, shape), with_agg)


def superposition(rates, *, agg_rate=None) -> Clock:
  """Exponential clocks only (the same trace by superposition, docs/papers/area.md): gaps ~ Exp(sum
  lambda), outcome ~
  Categorical(lambda / sum lambda); same law as `renewal` with exponential delays.
  The state is the current time."""
  rates = jnp.asarray(rates, jnp.float32)
  n = rates.shape[0]
  with_agg = agg_rate is not None
  all_rates = (jnp.concatenate([rates, jnp.asarray(agg_rate, jnp.float32)[None]])
               if with_agg else rates)
  total = jnp.sum(all_rates)

  def step(key, t):
    gap_key, who_key = jax.random.split(key)
    t = t + jax.random.exponential(gap_key, dtype=jnp.float32) / total
    j = jax.random.categorical(who_key, jnp.log(all_rates)).astype(jnp.int32)
    return j, t, t

  return Clock(n, lambda key: jnp.zeros((), jnp.float32), step,
               _fresh_delays(rates, "exponential", 1.0), with_agg)


def scripted(clients, times, num_clients: int, *, has_aggregation: bool = False) -> Clock:
  """A fixed trace for tests: event k is (clients[k], times[k]); past its end every event
  comes at time +inf, which algorithms never apply. Entries equal to num_clients are
  aggregation events (with ``has_aggregation``). Fresh delays are Exp(1)."""
  js = jnp.asarray(np.append(clients, clients[-1]), jnp.int32)
  ts = jnp.asarray(np.append(times, np.inf), jnp.float32)
  last = len(clients)

  def step(key, k):
    del key
    return js[k], ts[k], jnp.minimum(k + 1, last)

  return Clock(num_clients, lambda key: jnp.zeros((), jnp.int32), step,
               _fresh_delays(jnp.ones(num_clients), "exponential", 1.0), has_aggregation)


def round_duration(clock: Clock, key, ids) -> jax.Array:
  """A synchronous round over ``ids`` ends when its slowest client is done: the max of
  fresh delays (our S-FedAvg rounds, docs/papers/area.md; by memorylessness the same as waiting for
  each sampled
  client's next tick under exponential clocks)."""
  return jnp.max(clock.delays(key, ids))
