"""The mechanics every asynchronous algorithm shares (the AREA paper's Algorithms 1-2 and
our within-event order, docs/papers/area.md), so that an algorithm module is its ingest and
aggregation.

One `round` is one server event from the world's clock: client j's message or, with
Poisson aggregation, an aggregation event. A message from client j at time t_k:

  x_loc = LocalSGD(x_recv[j], alpha_recv[j])   K_j steps, g_j = w_j grad f^_j, P_X each step
  <method ingest of x_loc>                     may read x_recv[j] and j's memory row
  alpha = h(alpha) = alpha0 / (k + 1)^beta     k = messages so far (beta = 0: constant)
  count += 1; aggregate = (count == Delta)     (Poisson: the aggregation events instead)
  if aggregate: <method aggregation>; count = 0; version += 1
  x_recv[j], alpha_recv[j] = x_s, alpha        x_s before the aggregation (default) or after

With ``lagged`` (AREA's iterate form, eqs. (2)-(4)) client j stores its pending result
instead: the message is x_recv[j], and x_recv[j] = LocalSGD(sent model) afterwards.
An event past the horizon (t_k > sim_time > 0) changes nothing but the clock, which
moves on, so every later event is past it too (restarting from the last applied event
would let a fresh draw land before the horizon again). Only client j's rows are read and
written (dynamic slices, updated in place: see `Pending`), so an event costs O(p), not
O(n p). `rounds_for_horizon` plans how many events a run needs to reach the horizon.
"""

import types
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_bench.core import cohort, keys, local, parts
from fedjax_bench.core.types import FederatedAlgorithm, with_count
from fedjax_bench.core.local import LocalTraining
from fedjax_bench.data import per_seed as per_seed_lib
from fedjax_bench.errors import UsageError
from fedjax_bench.settings import NON_NEGATIVE, POSITIVE, coerce, section, setting
from fedjax_bench.sim import asynchrony

GRAD_SCALES = ("data_weight", "none")
PROJECTIONS = ("none", "ball", "box")


@section("asynchronous clock")
class AsyncClock:
  sim_time: float = setting(0.0, "Simulated time horizon T; events after T change nothing, and "
                            "without --rounds the run lasts about T (0: --rounds events).",
                            check=NON_NEGATIVE, sweep=True)
  async_delta: int = setting(4, "Aggregate every this many client messages (Delta; sfedavg: "
                             "clients per synchronous round).", check=POSITIVE, sweep=True)
  async_rates: str = setting("uniform", "Client update rates lambda_i: all --async_rate, or "
                             "N(--async_rate, --async_rate_std) clipped at --async_min_rate, "
                             "drawn from --partition_seed.", choices=asynchrony.RATES)
  async_rate: float = setting(10.0, "Mean client update rate.", check=POSITIVE)
  async_rate_std: float = setting(5.0, "Std of --async_rates=normal.", check=NON_NEGATIVE)
  async_min_rate: float = setting(0.5, "Rates below this are clipped to it.", check=POSITIVE)
  async_delay: str = setting("exponential", "Law of the time between a client's messages (mean "
                             "1/lambda_i).", choices=asynchrony.DELAYS)
  async_delay_shape: float = setting(0.0, "Shape of lognormal (sigma) or pareto (tail index) "
                                     "delays (0: 1 and 1.5).", check=NON_NEGATIVE)
  aggregation: str = setting("count", "Aggregate after --async_delta messages, or at Poisson "
                             "aggregation events (the theory's).",
                             choices=asynchrony.AGGREGATIONS)
  async_agg_rate: float = setting(0.0, "Rate of --aggregation=poisson events (0: sum of rates "
                                  "/ Delta).", check=NON_NEGATIVE, sweep=True)
  grad_scale: str = setting("data_weight", "The client oracle is w_i grad f_i with w_i = n_i / "
                            "N (the AREA paper's §5.1), or unscaled.", choices=GRAD_SCALES)
  send_after_aggregation: bool = setting(False, "The client that triggers an aggregation "
                                         "receives the new model (default: the one before).")
  projection: str = setting("none", "Project every local step onto a ball of "
                            "--projection_radius or the box [-R, R].", choices=PROJECTIONS)
  projection_radius: float = setting(1.0, "R of --projection.", check=POSITIVE, sweep=True,
                                     used_if=lambda hp: hp.projection != "none")


@section("asynchronous clock")
class Hparams(LocalTraining, AsyncClock):
  """What every asynchronous algorithm reads: its local training and its clock."""


class Server(NamedTuple):
  params: Any          # x_s, what evaluation scores
  round: jax.Array     # int32 events so far (the engine's step counter)
  time: jax.Array      # float32 simulated time of the last applied event
  clock: Any           # the clock's state
  count: jax.Array     # int32 messages since the last aggregation
  version: jax.Array   # int32 aggregations so far
  messages: jax.Array  # int32 client messages so far
  aux: Any             # the method's server memory (AREA's u, FedBuff's buffer, ...)
  pending: Any         # Pending: the last event's client rows, written at the next event


class Clients(NamedTuple):
  x_recv: Any              # [n, ...] the model client i works from (lagged: its pending result)
  alpha_recv: jax.Array    # [n] float32 stepsize received with it
  recv_version: jax.Array  # [n] int32 server version it was sent at
  recv_round: jax.Array    # [n] int32 event at which it was sent
  memory: Any              # [n, ...] the method's client memory, or ()


class Pending(NamedTuple):
  """Client ``index``'s new rows (a Clients of single rows), not yet in the [n, ...] arrays.

  Each event first writes the previous event's rows, then reads its own client's, so
  every read of the arrays follows the write in the dataflow and XLA updates them in
  place. Writing at the end of the event instead makes XLA copy them (O(n p) per event,
  ~30x slower at n = 512 on CPU), because its fusions re-read the old rows after the write.
  `settled` gives the up-to-date client states.
  """
  index: jax.Array
  rows: Any


def read(clients: "Clients", i) -> "Clients":
  return cohort.read_row(clients, i)


def write(clients: "Clients", pending: Pending) -> "Clients":
  return cohort.write_row(clients, pending.index, pending.rows)


def settled(server: "Server", clients: "Clients") -> "Clients":
  """The client states after the last event (the arrays with ``server.pending`` written)."""
  return write(clients, server.pending)


class Method(NamedTuple):
  init: Callable       # x0 -> (server aux, one client's memory row)
  ingest: Callable     # (aux, memory_j, x_loc, x_recv_j, staleness) -> (aux, memory_j)
  aggregate: Callable  # (x_s, aux, count) -> (x_s, aux); count: messages since the last


def select(flag, new, old):
  return jax.tree.map(lambda a, b: jnp.where(flag, a, b), new, old)


def zeros_like(tree):
  return jax.tree.map(jnp.zeros_like, tree)


def make_clock(world, hp: Hparams, *, aggregation: bool | None = None) -> asynchrony.Clock:
  """The world's clock, or the renewal clock the async_* hyperparameters describe (rates
  from partition_seed, so every seed of a run shares them, unless the world gives a run
  its own: --data_per_seed). ``aggregation`` overrides
  whether Poisson aggregation events are wanted (default: hp aggregation == "poisson")."""
  hp = coerce(Hparams, hp)
  kind = hp.aggregation
  poisson = kind == "poisson" if aggregation is None else aggregation
  if world.clock is not None:
    if aggregation is None and world.clock.has_aggregation != poisson:
      raise UsageError(f"--aggregation={kind} does not match the world's clock "
                       f"({'with' if world.clock.has_aggregation else 'without'} "
                       "aggregation events)")
    return world.clock
  rates = client_rates(hp, world.num_clients) if world.rates is None else world.rates
  agg_rate = None
  if poisson:
    # 0 (default): the count rule's mean rate, sum(lambda) / Delta.
    given = hp.async_agg_rate
    agg_rate = jnp.where(given > 0, given, rates.sum() / hp.async_delta)
  shape = hp.async_delay_shape
  return asynchrony.renewal(rates, hp.async_delay,
                            shape=shape if shape > 0 else None, agg_rate=agg_rate)


def client_rates(clock: AsyncClock, n: int, seed: int = 0) -> np.ndarray:
  """lambda_i from the clock's async_* settings, drawn from ``seed`` (the data's
  --partition_seed: the world of a run holds them, `World.rates`)."""
  rates = asynchrony.client_rates(clock.async_rates, n, rate=clock.async_rate,
                                  std=clock.async_rate_std, min_rate=clock.async_min_rate,
                                  seed=seed)
  if not (rates > 0).all():
    raise UsageError("client rates must be positive: check --async_rate, --async_min_rate")
  return rates


def rounds_for_horizon(cfg: dict, seeds=(0,)) -> int:
  """Engine steps that cover --sim_time with room to spare (steps past it are no-ops):
  events of rate sum(lambda) (+ lambda_s), or synchronous rounds of mean length
  E[max of Delta fresh delays] for sfedavg. Heavy-tailed delays are simulated. With
  --data_per_seed, the most any seed's rates need. ``cfg``: a run's settings by name
  (`config.Config.flat`)."""
  if cfg["data_per_seed"] and cfg["async_rates"] != "uniform":
    return max(rounds_for_horizon({**cfg, "data_per_seed": False,
                                   "partition_seed": per_seed_lib.data_seed(
                                       cfg["partition_seed"], s)})
               for s in seeds)
  n, horizon = cfg["num_clients"], cfg["sim_time"]
  rates = client_rates(types.SimpleNamespace(**cfg), n, cfg["partition_seed"])
  if cfg["async_delay"] != "exponential":
    return _simulated_rounds(cfg, rates, horizon)
  if cfg["algo"] == "sfedavg":
    rng = np.random.default_rng(0)
    delta = min(cfg["async_delta"], n)
    draws = [rng.exponential(1 / rates[rng.choice(n, delta, replace=False)]).max()
             for _ in range(2000)]
    return int(np.ceil(1.3 * horizon / np.mean(draws))) + 10
  total = rates.sum()
  if cfg["aggregation"] == "poisson":
    total += cfg["async_agg_rate"] or rates.sum() / cfg["async_delta"]
  mean = total * horizon
  return int(np.ceil(mean + 5 * np.sqrt(mean))) + 10


def _simulated_rounds(cfg: dict, rates: np.ndarray, horizon: float, trials: int = 400) -> int:
  """Under log-normal or Pareto delays the count by T is far above its mean in a fair
  share of runs (many short gaps; Pareto 1.5, n = 4, T = 20 overran mean + 5 sqrt(mean)
  in 5% of runs), so: 1.1 x the largest of ``trials`` simulated counts, + 10."""
  rng = np.random.default_rng(0)
  law, shape = cfg["async_delay"], cfg["async_delay_shape"] or None
  unit = lambda size: asynchrony.numpy_unit_delays(rng, law, shape, size)

  def count(gaps, k):  # gaps(size) -> [trials, k] durations; the events by T per trial
    while True:
      ends = np.cumsum(gaps((trials, k)), axis=1)
      if (ends[:, -1] > horizon).all():
        return (ends <= horizon).sum(axis=1)
      k *= 2

  n = len(rates)
  if cfg["algo"] == "sfedavg":
    delta = min(cfg["async_delta"], n)
    pick = lambda size: np.argsort(rng.random(size + (n,)), axis=-1)[..., :delta]
    counts = count(lambda size: (unit(size + (delta,)) / rates[pick(size)]).max(-1), 16)
  else:
    counts = sum(count(lambda size, r=r: unit(size) / r, int(2 * r * horizon) + 16)
                 for r in rates)
    if cfg["aggregation"] == "poisson":
      agg = cfg["async_agg_rate"] or rates.sum() / cfg["async_delta"]
      counts = counts + rng.poisson(agg * horizon, trials)
  return int(np.ceil(1.1 * counts.max())) + 10


def unscaled(loss, weight):
  """A loss reported without its data weight (0 for a client with no data)."""
  return jnp.where(weight > 0, loss / jnp.where(weight > 0, weight, 1), 0.0)


def data_weights(task, hp: Hparams) -> jax.Array:
  """[n] float32 scale of client i's loss: w_i = s_i / S ("data_weight", the AREA
  paper's §5.1) or 1."""
  scale = hp.grad_scale
  counts = jnp.asarray(task.counts, jnp.float32)
  return counts / jnp.sum(counts) if scale == "data_weight" else jnp.ones_like(counts)


def float32_loss(task) -> Callable:
  """task.loss as float32, the dtype of local.train's loss accumulator, so that float64
  parameters (jax_enable_x64) train too; a no-op in float32 runs."""
  return lambda *args: task.loss(*args).astype(jnp.float32)


def projection(hp: Hparams) -> Callable | None:
  """P_X: "ball" (global L2 norm <= R) or "box" ([-R, R] per coordinate), R =
  projection_radius; None for X = R^p."""
  name, radius = hp.projection, hp.projection_radius
  if name == "none":
    return None
  if name == "ball":
    def ball(params):
      scale = jnp.minimum(1.0, radius / jnp.maximum(optax.tree.norm(params), 1e-30))
      return jax.tree.map(lambda a: a * scale.astype(a.dtype), params)
    return ball
  if name == "box":
    return lambda params: jax.tree.map(lambda a: jnp.clip(a, -radius, radius), params)
  raise UsageError(f"unknown --projection={name!r}; valid: {', '.join(PROJECTIONS)}")


def initial_params(task, hp: Hparams, key):
  """x0 = P_X(the model's initialization), so that x0 lies in X."""
  params = task.init_params(keys.for_purpose(key, "init"))
  project = projection(hp)
  return params if project is None else project(params)


def client_optimizer(alpha, project: Callable | None) -> optax.GradientTransformation:
  """SGD at stepsize alpha, followed by P_X when there is one."""
  sgd = optax.sgd(alpha)
  if project is None:
    return sgd

  def update(grads, state, params):
    updates, state = sgd.update(grads, state, params)
    new = project(optax.apply_updates(params, updates))
    return jax.tree.map(jnp.subtract, new, params), state

  return optax.GradientTransformation(sgd.init, update)


def local_sgd(task, world, hp: Hparams) -> Callable:
  """(start, client i, alpha, round key) -> (x_loc, i's mean unscaled loss): client i's
  K_i local steps on w_i * its loss (exact for any K), projected after each step."""
  spec = local.LocalSpec(world.max_steps, hp.batch_size, hp.sampling)
  weights = data_weights(task, hp)
  project = projection(hp)
  loss_fn = float32_loss(task)

  def train(start, i, alpha, key):
    w = weights[i]
    new, loss = local.train(
        start, jax.random.fold_in(keys.for_purpose(key, "local_train"), i),
        task.counts[i], world.client_steps[i], fetch=task.client_data(i),
        loss_fn=lambda *args: w * loss_fn(*args), opt=client_optimizer(alpha, project),
        spec=spec, max_count=task.max_count, gather_limit=local.GATHER_BUDGET,
        update_state=task.update_state if parts.has_state(start) else None)
    return new, unscaled(loss, w)

  return train


def build(task, world, hp: Hparams, method: Method, *, delta=None, lr_power=0.0,
          lagged: bool = False) -> FederatedAlgorithm:
  """The event-driven algorithm of ``method``: aggregation every ``delta`` messages
  (default hp async_delta) or at the clock's Poisson aggregation events."""
  n = world.num_clients
  clock = make_clock(world, hp)
  poisson = clock.has_aggregation
  delta = hp.async_delta if delta is None else delta
  horizon = hp.sim_time
  send_after = hp.send_after_aggregation
  alpha0 = jnp.asarray(hp.client_lr, jnp.float32)
  train = local_sgd(task, world, hp)

  def init(key):
    params = initial_params(task, hp, key)
    aux, row = method.init(params)
    rows = lambda tree: jax.tree.map(lambda a: jnp.broadcast_to(a, (n,) + a.shape), tree)
    zero = jnp.zeros((), jnp.int32)
    clients = Clients(rows(params), jnp.full(n, alpha0), jnp.zeros(n, jnp.int32),
                      jnp.zeros(n, jnp.int32), rows(row))
    nothing = Pending(zero, read(clients, zero))  # rewrites client 0's own rows
    server = Server(params, zero, jnp.zeros((), jnp.float32),
                    clock.init(keys.for_purpose(key, "events")), zero, zero, zero, aux, nothing)
    return server, clients

  def round_fn(server: Server, clients: Clients, key):
    j, t, clock_state = clock.step(keys.for_purpose(key, "events"), server.clock)
    message = j < n
    i = jnp.minimum(j, n - 1)
    live = jnp.isfinite(t) & ((horizon <= 0) | (t <= horizon))
    clients = write(clients, server.pending)
    mine = read(clients, i)
    staleness = server.version - mine.recv_version
    event_staleness = server.round - mine.recv_round

    if lagged:
      x_loc = mine.x_recv
    else:
      x_loc, loss = train(mine.x_recv, i, mine.alpha_recv, key)
    aux, memory = method.ingest(server.aux, mine.memory, x_loc, mine.x_recv, staleness)
    aux = select(message, aux, server.aux)
    messages = server.messages + message
    count = server.count + message
    alpha = alpha0 * jnp.power((messages + 1).astype(jnp.float32), -lr_power)

    agg = ~message if poisson else count >= delta
    params, aux = select(agg, method.aggregate(server.params, aux, count),
                         (server.params, aux))
    version = server.version + agg
    count = jnp.where(agg, 0, count)
    sent, sent_version = (params, version) if send_after else (server.params, server.version)
    if lagged:
      sent, loss = train(sent, i, alpha, key)

    row = Clients(sent, alpha, sent_version, server.round, memory)
    row = select(live & message, row, mine)
    new = Server(params, server.round, t, clock_state, count, version, messages, aux,
                 Pending(i, row))
    server = select(live, new, server)._replace(round=server.round + 1, clock=clock_state)

    # Per message: count 0 on aggregation events and past the horizon.
    applied = (live & message).astype(jnp.float32)
    metrics = {
        "cum_time": server.time,
        "cum_aggregations": server.version.astype(jnp.float32),
        "cum_messages": server.messages.astype(jnp.float32),
        **with_count({"staleness": applied * staleness.astype(jnp.float32),
                      "event_staleness": applied * event_staleness.astype(jnp.float32),
                      "client_loss": applied * loss}, applied),
        "alpha": alpha,
    }
    return server, clients, metrics

  return FederatedAlgorithm(init, round_fn)
