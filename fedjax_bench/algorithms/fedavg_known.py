"""FedAvg with known participation probabilities (Perazzone et al., 2022; the FedAWE
authors' code).

An oracle baseline: the server knows the true p_i^t the world draws A_t from.

  x_{t+1} = x_t + eta_g * (1/m) * sum_{i in A_t} Delta_i / p_i^t

which is unbiased: E[.] = (1/m) sum_i Delta_i.
"""

import jax.numpy as jnp

from fedjax_bench.core import aggregate, rounds
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.settings import coerce

Hparams = rounds.Synchronous


def build(task, world, hp: rounds.Synchronous) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  sopt = hp.optimizer()
  m = world.num_clients
  world.probs(jnp.zeros((), jnp.int32))  # fails at build time if the scheme has no oracle

  def init(key):
    return rounds.init_server(task, world, sopt, key), ()

  def round_fn(server, clients, key):
    mask, c, world_state = rounds.observe(world, server, key)
    p = world.probs(server.round)[c.ids]
    # An active client has p > 0; the guard only keeps padding rows finite.
    w = jnp.where(c.valid, 1.0 / jnp.where(c.valid, p, 1.0), 0.0)
    total, losses = rounds.train(task, world, hp, server.params, c, key, server.round,
                                 sum_weights=w)
    delta = aggregate.divided(total, m)
    server = rounds.apply_update(sopt, server, delta, world_state, skip=~jnp.any(c.valid))
    return server, clients, rounds.metrics(mask, c, losses)

  return FederatedAlgorithm(init, round_fn)
