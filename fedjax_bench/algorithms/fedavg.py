"""FedAvg (McMahan et al., 2017) with a server optimizer (FedAvgM, FedAdam, FedYogi: Reddi et al., 2021).

Each round:
  1. sample the cohort S_t from the world's participation mask;
  2. every i in S_t runs local SGD from x_t and returns Delta_i = x_i - x_t;
  3. Delta = sum_i w_i Delta_i / sum_i w_i,  w_i = 1 or n_i (--weighting);
  4. x_{t+1} = server_opt(x_t, pseudo-gradient -Delta)   (sgd, lr 1: x_t + Delta).
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from fedjax_bench.core import aggregate, cohort, keys, local, server_opt
from fedjax_bench.core.task import Task
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.errors import UsageError
from fedjax_bench.sim.world import World

WEIGHTINGS = ("uniform", "data_size")


class ServerState(NamedTuple):
  params: Any
  opt_state: Any
  round: jax.Array


def client_weights(task: Task, ids, valid, weighting: str):
  if weighting == "data_size":
    return jnp.where(valid, task.counts[ids], 0).astype(jnp.float32)
  return valid.astype(jnp.float32)


def build(task: Task, world: World, hp: dict) -> FederatedAlgorithm:
  """hp: client_lr, server_lr, batch_size, sampling, weighting, server_opt (+ its options)."""
  sopt = server_opt.make(hp.get("server_opt", "sgd"), hp.get("server_lr", 1.0),
                         **hp.get("server_opt_kwargs", {}))
  weighting = hp.get("weighting", "uniform")
  if weighting not in WEIGHTINGS:
    raise UsageError(f"unknown --weighting={weighting!r}; valid: {', '.join(WEIGHTINGS)}")
  cap = world.participation.cap

  def init(key):
    params = task.init_params(keys.for_purpose(key, "init"))
    return ServerState(params, sopt.init(params), jnp.zeros((), jnp.int32)), ()

  def round_fn(server: ServerState, clients, key):
    mask = world.participation.sample(keys.for_purpose(key, "participation"), server.round)
    c = cohort.from_mask(mask, cap)
    deltas, losses = local.train_cohort(
        task, world, server.params, c.ids, key, opt=optax.sgd(hp["client_lr"]),
        batch_size=hp["batch_size"], sampling=hp.get("sampling", "shuffle"),
        width=hp.get("client_width", -1))
    w = client_weights(task, c.ids, c.valid, weighting)
    delta = aggregate.weighted_mean(deltas, w)
    updates, opt_state = sopt.update(jax.tree.map(jnp.negative, delta), server.opt_state,
                                     server.params)
    params = optax.apply_updates(server.params, updates)
    metrics = {
        "client_loss": aggregate.weighted_mean(losses, c.valid.astype(jnp.float32)),
        "num_active": jnp.sum(c.valid).astype(jnp.float32),
        "dropped_clients": (jnp.sum(mask) - jnp.sum(c.valid)).astype(jnp.float32),
    }
    return ServerState(params, opt_state, server.round + 1), clients, metrics

  return FederatedAlgorithm(init, round_fn)
