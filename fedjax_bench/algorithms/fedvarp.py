"""FedVARP (Jhunjhunwala et al., UAI 2022) as in the FedAWE paper's code
(github.com/mingxiang12/FedAWE).

A SAGA-style control variate: the server remembers y_i, each client's latest update
(0 at first), and their mean ybar.

  if A_t is not empty:
    x_{t+1} = x_t + eta_g * ( (1/|A_t|) sum_{i in A_t} (Delta_i - y_i) + ybar )
    y_i = Delta_i for i in A_t;  ybar = mean_j y_j
  else: nothing changes (the code's choice)

Memory: y is O(m d) floats; ybar is kept incrementally as in MIFA.
"""

import jax
import jax.numpy as jnp

from fedjax_bench.core import aggregate, cohort as cohort_lib, rounds
from fedjax_bench.core.client_memory import init_with_memory, refresh
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.settings import coerce

Hparams = rounds.Synchronous


def build(task, world, hp: rounds.Synchronous) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  sopt = hp.optimizer()
  m = world.num_clients

  def init(key):
    return init_with_memory(task, world, sopt, key)

  def round_fn(server, memory, key):
    mask, c, world_state = rounds.observe(world, server, key)
    deltas, losses = rounds.train(task, world, hp, server.params, c, key, server.round)
    corrections = jax.tree.map(jnp.subtract, deltas, cohort_lib.gather(memory, c))
    step = jax.tree.map(jnp.add, aggregate.weighted_mean(corrections, c.valid), server.aux)
    memory, mean = refresh(memory, server.aux, c, deltas, m)
    server = rounds.apply_update(sopt, server, step, world_state, skip=~jnp.any(c.valid),
                                 aux=mean)
    return server, memory, rounds.metrics(mask, c, losses)

  return FederatedAlgorithm(init, round_fn)
