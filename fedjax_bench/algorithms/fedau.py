"""FedAU (Wang & Ji, ICLR 2024) as in the FedAWE paper's code (IBM/fedau's `adaptive`).

Each client keeps O(1) state: n_i, its current run of unavailable rounds, and the sum
S_i and count M_i of its recorded participation intervals. omega_i = S_i / M_i (1
before any record) estimates 1 / p_i online; an absence of K rounds is recorded as
an interval of length K so omega stays bounded.

  for i in A_t:      contribution_i = omega_i * Delta_i   (omega from earlier intervals)
                     record the interval n_i + 1; n_i = 0
  for i not in A_t:  n_i += 1; if n_i >= K: record n_i; n_i = 0
  x_{t+1} = x_t + eta_g * (1/m) * sum_{i in A_t} contribution_i
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from fedjax_bench.core import aggregate, cohort as cohort_lib, rounds
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.settings import POSITIVE, coerce, section, setting


class Intervals(NamedTuple):
  absent: jax.Array     # [m] int32 n_i
  total: jax.Array      # [m] float32 S_i
  recorded: jax.Array   # [m] int32 M_i


def weights(s: Intervals) -> jax.Array:
  return jnp.where(s.recorded > 0, s.total / jnp.maximum(s.recorded, 1), 1.0)


def record(s: Intervals, active: jax.Array, cutoff: int) -> Intervals:
  """One round of interval bookkeeping for all clients."""
  absent = jnp.where(active, 0, s.absent + 1)
  ends = active | (absent >= cutoff)
  length = jnp.where(active, s.absent + 1, absent)
  return Intervals(jnp.where(ends, 0, absent),
                   s.total + jnp.where(ends, length, 0).astype(jnp.float32),
                   s.recorded + ends.astype(jnp.int32))


@section("fedau")
class Hparams(rounds.Synchronous):
  fedau_k: int = setting(50, "Cutoff K on a recorded participation interval.", check=POSITIVE)


def build(task, world, hp: Hparams) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  sopt = hp.optimizer()
  m = world.num_clients
  cutoff = hp.fedau_k

  def init(key):
    zeros = jnp.zeros(m, jnp.int32)
    return rounds.init_server(task, world, sopt, key), Intervals(zeros, jnp.zeros(m), zeros)

  def round_fn(server, clients: Intervals, key):
    mask, c, world_state = rounds.observe(world, server, key)
    omega = weights(cohort_lib.gather(clients, c))
    total, losses = rounds.train(task, world, hp, server.params, c, key, server.round,
                                 sum_weights=jnp.where(c.valid, omega, 0.0))
    delta = aggregate.divided(total, m)
    server = rounds.apply_update(sopt, server, delta, world_state, skip=~jnp.any(c.valid))
    clients = record(clients, cohort_lib.members(clients.absent, c), cutoff)
    return server, clients, {**rounds.metrics(mask, c, losses),
                             "mean_omega": cohort_lib.population_mean(weights(clients))}

  return FederatedAlgorithm(init, round_fn)
