"""The mechanics every synchronous algorithm's round shares, so that each algorithm module
reads like its paper: observe who is available, train the cohort, apply a server step.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from fedjax_bench.core import cohort as cohort_lib, keys, local, schedules
from fedjax_bench.core.cohort import Cohort
from fedjax_bench.core.local import ClientOptimizer, LocalTraining
from fedjax_bench.core.schedules import ClientLrSchedule
from fedjax_bench.core.server_opt import ServerOptimizer
from fedjax_bench.core.types import with_count
from fedjax_bench.errors import UsageError
from fedjax_bench.settings import coerce, section


class ServerState(NamedTuple):
  params: Any
  opt_state: Any
  round: jax.Array   # int32, the 0-based index of the next round
  world: Any         # the participation scheme's state (() for stateless schemes)
  aux: Any = ()      # an algorithm's own server-side state


def static(value, name: str):
  """A setting that shapes arrays or loops here, refused as a grid's traced value."""
  if isinstance(value, jax.core.Tracer):
    raise UsageError(f"{name} sets array shapes and cannot be swept in a grid; run one value "
                     "per invocation")
  return value


@section("local training")
class Synchronous(ClientOptimizer, LocalTraining, ClientLrSchedule, ServerOptimizer):
  """What every synchronous algorithm reads: local training, its client optimizer and
  learning-rate schedule, and the server optimizer."""


def init_server(task, world, sopt: optax.GradientTransformation, key, aux=()) -> ServerState:
  params = task.init_params(keys.for_purpose(key, "init"))
  return ServerState(params, sopt.init(params), jnp.zeros((), jnp.int32),
                     world.init_state(key), aux)


def observe(world, server: ServerState, key) -> tuple[jax.Array | None, Cohort, Any]:
  """Round ``server.round``'s availability mask, its cohort slab, the new world state.

  A scheme that draws ids (`participation.uniform_sparse`) gives the cohort directly and
  no mask (None): nothing of the round is O(population)."""
  p = world.participation
  if p.draw_ids is not None:
    ids = p.draw_ids(keys.for_purpose(key, "participation"), server.round)
    return None, Cohort(ids, jnp.ones(ids.shape, bool)), server.world
  mask, world_state = world.observe(key, server.round, server.world)
  return mask, cohort_lib.from_mask(mask, p.cap), world_state


def train(task, world, hp: Synchronous, start, c: Cohort, key, t, *, per_client_start=False,
          loss_fn=None, sum_weights=None, transform=None, keep=None, opt=None,
          client_loss=None):
  """Local training of cohort ``c`` with the client optimizer (--client_opt) at round t's
  client learning rate: (deltas, losses), or with ``sum_weights`` (sum_i w_i delta_i,
  losses), and with ``keep`` a third result (`local.train_cohort`, as its ``transform``
  and ``keep``). ``opt`` (an optax transformation) replaces the client optimizer: a
  method's own local steps. ``client_loss``: `local.train_cohort`'s."""
  hp = coerce(Synchronous, hp)
  sgd_lr = None
  if opt is None:
    lr = schedules.client_lr(hp, t)
    opt = hp.client_optimizer(lr)
    if hp.fused_logreg and hp.client_opt == "sgd" and not hp.client_grad_clip:
      sgd_lr = lr
  return local.train_cohort(
      task, world, start, c.ids, key, opt=opt,
      batch_size=hp.batch_size, sampling=hp.sampling, width=hp.client_width, loss_fn=loss_fn,
      per_client_start=per_client_start, sum_weights=sum_weights, valid=c.valid,
      transform=transform, keep=keep, client_loss=client_loss, sgd_lr=sgd_lr)


def apply_update(sopt: optax.GradientTransformation, server: ServerState, delta, world_state,
                 *, skip, aux=None) -> ServerState:
  """x <- server_opt(x, pseudo-gradient -delta) and the round advances; with ``skip``
  (typically: nobody was available) params and optimizer state stay bitwise as they were."""
  updates, opt_state = sopt.update(jax.tree.map(jnp.negative, delta), server.opt_state,
                                   server.params)
  params = optax.apply_updates(server.params, updates)
  keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(skip, b, a), new, old)
  return ServerState(keep(params, server.params), keep(opt_state, server.opt_state),
                     server.round + 1, world_state, server.aux if aux is None else aux)


def participated(c: Cohort, num_clients: int) -> jax.Array:
  """[num_clients] bool: the clients that trained this round (the valid slab rows)."""
  return cohort_lib.scatter(jnp.zeros(num_clients, bool), c, c.valid)


def metrics(mask, c: Cohort, losses) -> dict:
  """The cohort's mean local loss (with its count: 0 in a round nobody trained), its size
  and the available clients beyond the cap."""
  valid = c.valid.astype(jnp.float32)
  dropped = 0.0 if mask is None else (jnp.sum(mask) - jnp.sum(c.valid)).astype(jnp.float32)
  client_loss = jnp.sum(losses * valid) / jnp.maximum(jnp.sum(valid), 1.0)
  return {
      **with_count({"client_loss": client_loss}, jnp.sum(valid)),
      "num_active": jnp.sum(valid),
      "dropped_clients": jnp.asarray(dropped, jnp.float32),
  }
