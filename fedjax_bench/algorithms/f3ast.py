"""F3AST (Ribero, Vikalo & de Veciana, 2022), RECONSTRUCTED (docs/papers/fedawe.md).

F3AST is not in the FedAWE authors' code; this follows its TFF reference code with our
choices for what the FedAWE paper leaves open. The server tracks r_k, a running
estimate of each client's selection rate, and up-weights the rarely selected:

  S_t = A_t, or with a budget K the K available clients of smallest r (ties: lower id)
  r_{t+1} = (1 - beta) r_t + beta * 1{k in S_t}
  literal:  x += eta_g * (1/|S_t|) sum_{k in S_t} (1/m) / r_{t+1,k} * Delta_k,  r_0 = 1/m
  selfnorm: x += eta_g * sum_{k in S_t} (1/r_k) / (sum_{j in S_t} 1/r_j) * Delta_k,  r_0 = 1
  unbiased: x += eta_g * (1/m) sum_{k in S_t} Delta_k / r_{t+1,k},  r_0 = 1/m
"""

import jax
import jax.numpy as jnp

from fedjax_bench.core import aggregate, cohort as cohort_lib, rounds
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.settings import NON_NEGATIVE, UNIT_INTERVAL, coerce, section, setting
from fedjax_bench.sim.world import World

VARIANTS = ("literal", "selfnorm", "unbiased")


def select(mask: jax.Array, rates: jax.Array, budget: int) -> jax.Array:
  """The `budget` available clients with the smallest rate (all of them if budget is 0)."""
  if budget <= 0 or budget >= mask.shape[0]:
    return mask
  score = jnp.where(mask, -rates, -jnp.inf)
  _, chosen = jax.lax.top_k(score, budget)  # top_k breaks ties toward the lower index
  return jnp.zeros_like(mask).at[chosen].set(True) & mask


@section("f3ast")
class Hparams(rounds.Synchronous):
  f3ast_beta: float = setting(1e-3, "Rate of the selection-rate average.", check=UNIT_INTERVAL,
                              sweep=True)
  f3ast_variant: str = setting("literal", "Aggregation (reconstructed; docs/papers/fedawe.md).",
                               choices=VARIANTS)
  f3ast_budget: int = setting(0, "Train only this many available clients, the least selected "
                              "so far (0: all available).", check=NON_NEGATIVE)


def build(task, world: World, hp: Hparams) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  sopt = hp.optimizer()
  m = world.num_clients
  beta = hp.f3ast_beta
  variant = hp.f3ast_variant
  budget = rounds.static(hp.f3ast_budget, "f3ast_budget")
  cap = world.participation.cap if budget <= 0 else min(budget, world.participation.cap)
  r0 = 1.0 if variant == "selfnorm" else 1.0 / m

  def init(key):
    return rounds.init_server(task, world, sopt, key), jnp.full(m, r0, jnp.float32)

  def round_fn(server, rates, key):
    mask, world_state = world.observe(key, server.round, server.world)
    selected = select(mask, cohort_lib.population(rates) if budget > 0 else rates, budget)
    c = cohort_lib.from_mask(selected, cap)
    deltas, losses = rounds.train(task, world, hp, server.params, c, key, server.round)
    rates = (1 - beta) * rates + beta * cohort_lib.members(rates, c).astype(jnp.float32)
    inv = jnp.where(c.valid, 1.0 / cohort_lib.gather(rates, c), 0.0)
    if variant == "literal":
      delta = aggregate.scaled_sum(deltas, inv / m, jnp.maximum(jnp.sum(c.valid), 1))
    elif variant == "selfnorm":
      delta = aggregate.weighted_mean(deltas, inv)
    else:
      delta = aggregate.scaled_sum(deltas, inv, m)
    server = rounds.apply_update(sopt, server, delta, world_state, skip=~jnp.any(c.valid))
    return server, rates, rounds.metrics(mask, c, losses)

  return FederatedAlgorithm(init, round_fn)
