"""FedNova with a plain-SGD local solver (Wang et al. 2020); a baseline outside the papers,
for clients that run different numbers of local steps τ_i.

Each round t:
  1. observe the cohort I_t; p_i = n_i / Σ_{j∈I_t} n_j;
  2. every i ∈ I_t runs its τ_i local steps from w_t: Δ_i = w_i − w_t;
  3. Δ = (Σ_j p_j τ_j) Σ_i p_i Δ_i / τ_i   (normalised updates, rescaled to τ_eff);
  4. w_{t+1} = server_opt(w_t, −Δ).
With equal τ_i this is generalised FedAvg (α = p).
"""

import jax.numpy as jnp

from fedjax_bench.algorithms import loss_weights
from fedjax_bench.core import aggregate, rounds
from fedjax_bench.core.rounds import ServerState
from fedjax_bench.task.task import Task
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.settings import coerce
from fedjax_bench.sim.world import World

Hparams = rounds.Synchronous


def build(task: Task, world: World, hp: rounds.Synchronous) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  hp.require_sgd("fednova", "dividing Delta_i by tau_i is the normalization of plain local SGD "
                 "(Wang et al. 2020; their momentum form is not built)")
  sopt = hp.optimizer()

  def init(key):
    return rounds.init_server(task, world, sopt, key), ()

  def round_fn(server: ServerState, clients, key):
    mask, c, world_state = rounds.observe(world, server, key)
    deltas, losses = rounds.train(task, world, hp, server.params, c, key, server.round)
    p = jnp.where(c.valid, task.counts[c.ids], 0).astype(jnp.float32)
    coef = loss_weights.fednova_coefficients(p, world.client_steps[c.ids])
    delta = aggregate.weighted_sum(deltas, jnp.where(c.valid, coef, 0.0))
    server = rounds.apply_update(sopt, server, delta, world_state, skip=~jnp.any(c.valid))
    return server, clients, rounds.metrics(mask, c, losses)

  return FederatedAlgorithm(init, round_fn)
