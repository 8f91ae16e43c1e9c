"""FedAvg over all clients (FedAWE paper §7, App. J.2): unavailable clients count as
zero updates.

  x_{t+1} = x_t + eta_g * (1/m) * sum_{i in A_t} Delta_i

The step shrinks by |A_t| / m; in the small-step limit it converges to the minimiser
of sum_i p_i F_i / sum_j p_j (Wang & Ji's biased objective), not of the mean F.
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

  def init(key):
    return rounds.init_server(task, world, sopt, key), ()

  def round_fn(server, clients, key):
    mask, c, world_state = rounds.observe(world, server, key)
    total, losses = rounds.train(task, world, hp, server.params, c, key, server.round,
                                 sum_weights=c.valid.astype(jnp.float32))
    delta = aggregate.divided(total, m)
    server = rounds.apply_update(sopt, server, delta, world_state, skip=~jnp.any(c.valid))
    return server, clients, rounds.metrics(mask, c, losses)

  return FederatedAlgorithm(init, round_fn)
