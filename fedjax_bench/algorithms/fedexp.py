"""FedExP (Jhunjhunwala, Wang & Joshi, ICLR 2023, "FedExP: Speeding up Federated Averaging
via Extrapolation"), Algorithm 1: FedAvg with a server step size from the extrapolation
formula of POCS.

Each round:
  1. observe the available clients S_t (the world's participation);
  2. every i in S_t runs local SGD from w_t and returns Delta_i = w_t - w_i (the paper's
     sign: a pseudo-gradient);
  3. Delta = sum_i p_i Delta_i with p_i = 1/|S_t| (--weighting=uniform, the paper) or
     n_i / sum_{S_t} n_j (data_size, as the authors' code weighs);
  4. eta_g = max(1, sum_i p_i ||Delta_i||^2 / (2 (||Delta||^2 + eps))), which for uniform
     p_i is Algorithm 1's max(1, sum_i ||Delta_i||^2 / (2 M (||Delta||^2 + eps))) with M the
     round's clients (under partial participation the sums run over S_t, as in the
     authors' code);
  5. w_{t+1} = w_t - eta_g Delta, through the server optimizer (sgd at lr 1: the paper);
     nothing changes in a round where nobody is available.
--fedexp_step=one fixes eta_g = 1: FedAvg, bit for bit. eps is --fedexp_epsilon, constant
(the authors' code uses 1e-3 for CIFAR-10/100 and CINIC-10, adds |S_t| eps instead of eps
and decays eps by the square of its client learning rate's decay; we apply the formula as
Algorithm 1 prints it).

Evaluation (--fedexp_eval=last_two, the paper's experiments and the authors' code): the
iterates oscillate, so a run scores the average of the last two, (w_t + w_{t-1}) / 2; after
the first round it scores w_1 itself (the authors' code does not average in w_0), and before
any round w_0. --fedexp_eval=last scores w_t. A round reports server_step, eta_g (counted
in rounds where someone trained).
"""

import jax
import jax.numpy as jnp

from fedjax_bench.algorithms import fedavg
from fedjax_bench.core import aggregate, rounds
from fedjax_bench.core.rounds import ServerState
from fedjax_bench.core.types import FederatedAlgorithm, with_count
from fedjax_bench.settings import NON_NEGATIVE, coerce, section, setting

STEPS = ("extrapolated", "one")
EVALS = ("last_two", "last")


@section("fedexp")
class Hparams(fedavg.Hparams):
  fedexp_step: str = setting("extrapolated", "FedExP's server step size eta_g: the "
                             "extrapolation formula max(1, mean ||Delta_i||^2 / (2 (||Delta||^2 "
                             "+ eps))), or one (FedAvg).", choices=STEPS)
  fedexp_epsilon: float = setting(1e-3, "eps of FedExP's step size: added to ||Delta||^2 in "
                                  "the denominator (the authors' value for CIFAR-10).",
                                  check=NON_NEGATIVE, sweep=True,
                                  used_if=lambda hp: hp.fedexp_step == "extrapolated")
  fedexp_eval: str = setting("last_two", "The model FedExP's evaluation scores: the average of "
                             "the last two iterates (the paper), or the last.", choices=EVALS)


def step_size(mean_sq, delta, eps):
  """eta_g = max(1, mean_sq / (2 (||delta||^2 + eps))); 1 where the denominator is 0."""
  den = sq_norm(delta) + eps
  return jnp.maximum(1.0, jnp.where(den > 0, mean_sq / (2.0 * jnp.where(den > 0, den, 1.0)),
                                    1.0))


def sq_norm(tree):
  return sum(jnp.sum(jnp.square(a)) for a in jax.tree.leaves(tree))


def build(task, world, hp: Hparams) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  sopt = hp.optimizer()
  extrapolate = hp.fedexp_step == "extrapolated"

  def init(key):  # the previous iterate (aux) starts as w_0: round 0 scores w_0
    server = rounds.init_server(task, world, sopt, key)
    return server._replace(aux=server.params), ()

  def round_fn(server: ServerState, clients, key):
    mask, c, world_state = rounds.observe(world, server, key)
    weights = fedavg.client_weights(task, c.ids, c.valid, hp.weighting)
    # FedAvg's streamed sum of the w_i - w_t, and each client's ||w_i - w_t||^2.
    total, losses, sq = rounds.train(task, world, hp, server.params, c, key, server.round,
                                     sum_weights=weights, keep=lambda i, d: sq_norm(d))
    delta = aggregate.mean_of_sum(total, weights)
    if extrapolate:
      mean_sq = jnp.sum(weights * sq) / jnp.maximum(jnp.sum(weights), 1e-30)
      eta = step_size(mean_sq, delta, hp.fedexp_epsilon)
      delta = jax.tree.map(lambda d: eta.astype(d.dtype) * d, delta)
    else:
      eta = jnp.ones((), jnp.float32)
    trained = jnp.any(c.valid)
    new = rounds.apply_update(sopt, server, delta, world_state, skip=~trained,
                              aux=server.params)
    # After the first round the previous iterate is w_1 itself (the authors' code).
    first = server.round == 0
    new = new._replace(aux=jax.tree.map(lambda a, b: jnp.where(first, a, b), new.params,
                                        new.aux))
    return new, clients, {**rounds.metrics(mask, c, losses),
                          **with_count({"server_step": eta}, trained)}

  eval_params = None
  if hp.fedexp_eval == "last_two":
    def eval_params(server, clients):
      return jax.tree.map(lambda a, b: (a + b) / 2, server.params, server.aux)

  return FederatedAlgorithm(init, round_fn, eval_params=eval_params)
