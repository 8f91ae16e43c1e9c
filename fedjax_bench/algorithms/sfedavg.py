"""S-FedAvg, synchronous FedAvg with partial participation (McMahan et al., 2017), timed by
the asynchronous world's clock (McMahan et al.'s FedAvg as the AREA paper's S-FedAvg; our rounds,
docs/papers/area.md). One engine round is one
synchronous round:

  S = Delta clients drawn uniformly without replacement
  x_i = LocalSGD(x_s) for i in S            (g_i = w_i grad f^_i, as the async methods)
  x_s = (1/Delta) sum_{i in S} x_i          ("uniform"; "data": weights s_i / sum_S s_j)
  t += max_{i in S} (fresh delay of i)      the round waits for its slowest client

With Delta = n, one local step and exact gradients it is gradient descent on f with
step alpha / n. The clock is a renewal process: it advances by every round's duration,
and a round that would end past the horizon (sim_time > 0) is not applied; the clock is
then past the horizon, so no later round is either, and the rounds applied are the
renewal count N(sim_time) ("freeze after t > T").
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from fedjax_bench.core import aggregate, keys, local, rounds
from fedjax_bench.algorithms import asynchronous
from fedjax_bench.core.types import FederatedAlgorithm, with_count
from fedjax_bench.errors import UsageError
from fedjax_bench.settings import POSITIVE, coerce, section, setting
from fedjax_bench.sim import asynchrony

WEIGHTINGS = ("uniform", "data")


@section("sfedavg")
class Hparams(asynchronous.Hparams):
  async_delta: int = setting(4, "Clients per synchronous round (Delta).", check=POSITIVE)
  sfedavg_weighting: str = setting("uniform", "Uniform mean of the sampled models, or weighted "
                                   "by data size.", choices=WEIGHTINGS)


class Server(NamedTuple):
  params: Any
  round: jax.Array     # int32 engine rounds so far
  time: jax.Array      # float32 simulated time at the end of the last applied round
  clock: jax.Array     # float32 simulated time now: past the horizon once a round crossed it
  version: jax.Array   # int32 rounds applied (aggregations)
  messages: jax.Array  # int32 client messages so far


def build(task, world, hp: Hparams) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  n = world.num_clients
  delta = rounds.static(hp.async_delta, "async_delta (sfedavg's cohort size)")
  if not 0 < delta <= n:
    raise UsageError(f"--async_delta={delta} must be in [1, num_clients={n}] for sfedavg")
  weighting = hp.sfedavg_weighting
  sampling = hp.sampling
  clock = asynchronous.make_clock(world, hp, aggregation=False)
  loss_scale = asynchronous.data_weights(task, hp)
  opt = asynchronous.client_optimizer(hp.client_lr, asynchronous.projection(hp))
  horizon = hp.sim_time

  def init(key):
    params = asynchronous.initial_params(task, hp, key)
    zero = jnp.zeros((), jnp.int32)
    now = jnp.zeros((), jnp.float32)
    return Server(params, zero, now, now, zero, zero), ()

  def round_fn(server: Server, clients, key):
    draw = jax.random.uniform(keys.for_purpose(key, "participation"), (n,))
    _, ids = jax.lax.top_k(draw, delta)
    deltas, losses = local.train_cohort(
        task, world, server.params, ids, key, opt=opt, batch_size=hp.batch_size,
        sampling=sampling, width=hp.client_width, loss_scale=loss_scale,
        loss_fn=asynchronous.float32_loss(task))
    weights = (task.counts[ids].astype(jnp.float32) if weighting == "data"
               else jnp.ones(delta, jnp.float32))
    step = aggregate.weighted_mean(deltas, weights)
    duration = asynchrony.round_duration(clock, keys.for_purpose(key, "events"), ids)
    t = server.clock + duration
    live = (horizon <= 0) | (t <= horizon)
    new = Server(jax.tree.map(jnp.add, server.params, step), server.round, t, t,
                 server.version + 1, server.messages + delta)
    server = asynchronous.select(live, new, server)._replace(round=server.round + 1, clock=t)
    client_loss = jnp.mean(asynchronous.unscaled(losses, loss_scale[ids]))
    applied = live.astype(jnp.float32)
    return server, clients, {
        "cum_time": server.time,
        "cum_aggregations": server.version.astype(jnp.float32),
        "cum_messages": server.messages.astype(jnp.float32),
        **with_count({"round_duration": applied * duration}, applied),
        **with_count({"client_loss": applied * client_loss}, applied * delta),
    }

  return FederatedAlgorithm(init, round_fn)
