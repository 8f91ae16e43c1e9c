"""FedProx (Li et al., MLSys 2020), Algorithm 2, with the paper's systems heterogeneity.

Each round:
  1. observe the available clients S_t (the world's participation);
  2. stragglers (Section 5.2): all but round((1 - f) |S_t|) of S_t, chosen uniformly
     (f = --straggler_fraction), run fewer local steps: e uniform in {1, ..., E - 1} of
     the E units of their budget tau_k (E = --local_epochs, whole epochs as the paper
     draws them; with --local_steps, E = tau_k: single steps), i.e. tau_k e / E steps;
  3. every client k of S_t that trains runs local SGD from w_t on
     h_k(w; w_t) = F_k(w) + mu/2 ||w - w_t||^2;
  4. w_{t+1} = w_t + sum_k p_k Delta_k / sum_k p_k (--weighting, uniform as every
     algorithm's; the paper's code weights by data size: give --weighting=data_size),
     through the server optimizer as FedAvg.

--straggler_policy=keep aggregates the stragglers' partial work (FedProx); drop discards
it, as the paper's FedAvg baseline does. With mu = 0 and no stragglers this is FedAvg.
"""

import jax
import jax.numpy as jnp

from fedjax_bench.algorithms import fedavg
from fedjax_bench.core import aggregate, keys, local_terms, rounds
from fedjax_bench.core.cohort import Cohort
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.errors import UsageError
from fedjax_bench.settings import NON_NEGATIVE, PROBABILITY, coerce, section, setting

STRAGGLER_POLICIES = ("keep", "drop")


@section("fedprox")
class Hparams(fedavg.Hparams):
  prox_mu: float = setting(0.01, "FedProx term mu/2 ||w - w_global||^2 in local training.",
                           check=NON_NEGATIVE, sweep=True)
  straggler_fraction: float = setting(
      0.0, "Fraction of each round's clients that run fewer local steps (FedProx's "
      "systems heterogeneity: 0, 0.5, 0.9 in the paper).", check=PROBABILITY)
  straggler_policy: str = setting(
      "keep", "What the server does with a straggler's partial work: keep it (FedProx) or "
      "drop it (the paper's FedAvg).", choices=STRAGGLER_POLICIES)


def stragglers(key, c: Cohort, fraction: float, budget, units):
  """([cap] bool, [cap] int32): the stragglers, all but round((1 - fraction) |S|) of the
  cohort's valid rows chosen uniformly, and their steps tau_k e / E with e uniform in
  {1, ..., E - 1} (E = ``units``). Client k's draws come from its own key, split in two:
  the uniform that ranks it, and e."""
  pair = jax.vmap(jax.random.split)(keys.per_client(key, c.ids))  # [cap, 2] keys
  u = jax.vmap(jax.random.uniform)(pair[:, 0])
  order = jnp.argsort(jnp.where(c.valid, u, 2.0))
  rank = jnp.zeros_like(order).at[order].set(jnp.arange(order.shape[0]))
  kept = jnp.round((1.0 - fraction) * jnp.sum(c.valid))
  units = jnp.broadcast_to(units, budget.shape)
  e = jax.vmap(lambda k, n: jax.random.randint(k, (), 1, n))(pair[:, 1], units)
  return c.valid & (rank >= kept), (budget * e) // units


def build(task, world, hp: Hparams) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  sopt = hp.optimizer()
  fraction, drop = hp.straggler_fraction, hp.straggler_policy == "drop"
  if fraction > 0 and hp.local_epochs > 0 and (hp.local_epochs != int(hp.local_epochs)
                                               or hp.local_epochs < 2):
    raise UsageError(f"--straggler_fraction needs a whole --local_epochs of at least 2 "
                     f"(stragglers run 1 to E - 1 epochs); got {hp.local_epochs:g}")
  if fraction > 0 and hp.local_epochs <= 0 and hp.local_steps < 2:
    raise UsageError(f"--straggler_fraction needs --local_steps of at least 2 (stragglers "
                     f"run 1 to K - 1 steps); got {hp.local_steps}")
  epochs = int(hp.local_epochs)
  n = world.num_clients

  def round_fn(server, clients, key):
    mask, c, world_state = rounds.observe(world, server, key)
    world_t, late = world, jnp.zeros(c.valid.shape, bool)
    if fraction > 0:
      budget = world.client_steps[c.ids]
      late, cut = stragglers(keys.for_purpose(key, "stragglers"), c, fraction, budget,
                             epochs or budget)
      steps = jnp.where(late, cut, budget)
      rows = jnp.where(c.valid, c.ids, n)  # padding rows are dropped
      world_t = world._replace(client_steps=world.client_steps.at[rows].set(steps,
                                                                            mode="drop"))
      if drop:
        c = c._replace(valid=c.valid & ~late)
    weights = fedavg.client_weights(task, c.ids, c.valid, hp.weighting)
    loss_fn = local_terms.proximal(task.loss, server.params, hp.prox_mu)
    total, losses = rounds.train(task, world_t, hp, server.params, c, key, server.round,
                                 loss_fn=loss_fn, sum_weights=weights)
    delta = aggregate.mean_of_sum(total, weights)
    server = rounds.apply_update(sopt, server, delta, world_state, skip=~jnp.any(c.valid))
    return server, clients, {**rounds.metrics(mask, c, losses),
                             "num_stragglers": jnp.sum(late).astype(jnp.float32)}

  return FederatedAlgorithm(lambda key: (rounds.init_server(task, world, sopt, key), ()),
                            round_fn)
