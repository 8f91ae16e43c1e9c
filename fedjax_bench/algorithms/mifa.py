"""MIFA (Gu et al., NeurIPS 2021) as in the FedAWE paper's code (github.com/mingxiang12/FedAWE).

The server remembers U_i, the latest update of every client (0 before its first), and
steps with the mean over ALL clients every round, even one where nobody is available:

  for i in A_t: U_i = Delta_i        (Delta_i trained from the current x_t)
  x_{t+1} = x_t + eta_g * (1/m) sum_{i=1..m} U_i

Memory: U is O(m d) floats. The mean Ubar is kept incrementally (`core/client_memory.py`),
Ubar += (1/m) sum_{i in A_t} (Delta_i - U_i^old), so a round costs O(|A_t| d), not O(m d).
"""

from fedjax_bench.core import rounds
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
    memory, mean = refresh(memory, server.aux, c, deltas, m)
    server = rounds.apply_update(sopt, server, mean, world_state, skip=False, aux=mean)
    return server, memory, rounds.metrics(mask, c, losses)

  return FederatedAlgorithm(init, round_fn)
