"""FedAvg (McMahan et al., 2017) with a server optimizer (FedAvgM, FedAdam, FedYogi: Reddi et al., 2021).

Each round:
  1. observe the available clients A_t (the world's participation mask);
  2. every i in A_t runs local SGD from x_t and returns Delta_i = x_i - x_t;
  3. Delta = sum_i w_i Delta_i / sum_i w_i,  w_i = 1 or n_i (--weighting);
  4. x_{t+1} = server_opt(x_t, pseudo-gradient -Delta)   (sgd, lr 1: x_t + Delta);
     nothing changes in a round where nobody is available.

With uniform weights this is the FedAWE paper's "FedAvg over active clients".
"""

import jax.numpy as jnp

from fedjax_bench.core import aggregate, rounds
from fedjax_bench.core.rounds import ServerState
from fedjax_bench.task.task import Task
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.settings import coerce, section, setting
from fedjax_bench.sim.world import World

WEIGHTINGS = ("uniform", "data_size")


@section("fedavg")
class Weighted:
  """--weighting, declared once for every algorithm that averages the cohort's updates."""
  weighting: str = setting("uniform", "Aggregation weights of the cohort's updates.",
                           choices=WEIGHTINGS)


@section("fedavg")
class Hparams(rounds.Synchronous, Weighted):
  pass

__all__ = ["Hparams", "ServerState", "WEIGHTINGS", "Weighted", "build", "client_weights"]


def client_weights(task: Task, ids, valid, weighting: str):
  if weighting == "data_size":
    return jnp.where(valid, task.counts[ids], 0).astype(jnp.float32)
  return valid.astype(jnp.float32)


def build(task: Task, world: World, hp: Hparams) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  sopt = hp.optimizer()
  weighting = hp.weighting

  def init(key):
    return rounds.init_server(task, world, sopt, key), ()

  def round_fn(server: ServerState, clients, key):
    mask, c, world_state = rounds.observe(world, server, key)
    weights = client_weights(task, c.ids, c.valid, weighting)
    total, losses = rounds.train(task, world, hp, server.params, c, key, server.round,
                                 sum_weights=weights)
    delta = aggregate.mean_of_sum(total, weights)
    server = rounds.apply_update(sopt, server, delta, world_state, skip=~jnp.any(c.valid))
    return server, clients, rounds.metrics(mask, c, losses)

  return FederatedAlgorithm(init, round_fn)
