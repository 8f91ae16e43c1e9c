"""Per-client memory: a table [m, ...] with one row per client, carried across rounds as the
client state, and its mean over all m clients in the server's aux, both zero at first
(`init_with_memory`). MIFA and FedVARP remember each client's latest update: `refresh`
writes the cohort's rows and moves the mean by their change alone,
mean += (1/m) sum_{i in cohort} (new_i - old_i), so a round costs O(|cohort| d), not O(m d).
SCAFFOLD (c_i and c) and FedDyn (g_k and h) start their state from the same zeros.
"""

import jax
import jax.numpy as jnp

from fedjax_bench.core import aggregate, cohort as cohort_lib, rounds


def zeros_per_client(params, m: int):
  return jax.tree.map(lambda a: jnp.zeros((m,) + a.shape, a.dtype), params)


def refresh(memory, mean, c, deltas, m: int):
  """Stores the cohort's new updates and moves the population mean accordingly."""
  valid = c.valid.astype(jnp.float32)
  change = jax.tree.map(jnp.subtract, deltas, cohort_lib.gather(memory, c))
  mean = jax.tree.map(jnp.add, mean, aggregate.scaled_sum(change, valid, m))
  return cohort_lib.scatter(memory, c, deltas), mean


def init_with_memory(task, world, sopt, key):
  """Server state whose aux is the memory's mean, and an all-zero memory [m, ...]."""
  server = rounds.init_server(task, world, sopt, key)
  zero = jax.tree.map(jnp.zeros_like, server.params)
  return server._replace(aux=zero), zeros_per_client(server.params, world.num_clients)
