"""q-FedAvg (Li, Sanjabi, Beirami & Smith, ICLR 2020: q-FFL), Algorithm 2.

Each round:
  1. observe the available clients S_t (the world's participation);
  2. each k in S_t evaluates F_k(w^t) on all of its training examples and runs local SGD
     from w^t to wbar_k (as FedAvg);
  3. with L = 1 / eta_l (the paper's Lipschitz estimate from the local learning rate):
       Delta w_k = L (w^t - wbar_k),   Delta_k = F_k^q(w^t) Delta w_k,
       h_k = q F_k^{q-1}(w^t) ||Delta w_k||^2 + L F_k^q(w^t);
  4. w^{t+1} = w^t - sum_k Delta_k / sum_k h_k  (through the server optimizer: sgd at
     --server_lr = 1 is the paper's step; a round nobody trains changes nothing).
q = 0 is FedAvg with uniform weights (Delta_k / h_k averages the local models); larger q
weighs clients of higher loss more. F_k has no l2 term (as `client_scores`).
"""

import jax
import jax.numpy as jnp

from fedjax_bench.core import aggregate, client_scores, rounds, schedules
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.settings import NON_NEGATIVE, coerce, section, setting


@section("qfedavg")
class Hparams(rounds.Synchronous):
  qffl_q: float = setting(1.0, "q of q-FFL: 0 is FedAvg, larger q weighs clients of higher "
                          "loss more (the paper: 0.001 to 15).", check=NON_NEGATIVE, sweep=True)


def build(task, world, hp: Hparams) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  hp.require_sgd("qfedavg", "L = 1 / eta_l, the paper's Lipschitz estimate, is read from the "
                 "step size of plain local SGD (Li et al. 2020, Algorithm 2)")
  sopt = hp.optimizer()
  q = hp.qffl_q
  static_zero = isinstance(q, (int, float)) and not q
  width = client_scores.cohort_width(task, hp.client_width)

  def round_fn(server, clients, key):
    mask, c, world_state = rounds.observe(world, server, key)
    f = client_scores.of_cohort(task, server.params, c.ids, c.valid, width=width)  # F_k(w^t)
    f = jnp.where(c.valid, f, 1.0)  # padding rows weigh 0; 1 keeps their F^(q-1) finite
    valid = c.valid.astype(jnp.float32)
    fq = f ** q
    weights = valid * fq
    # The streamed sum_k F_k^q (wbar_k - w^t), and each client's ||wbar_k - w^t||^2.
    total, losses, sq = rounds.train(
        task, world, hp, server.params, c, key, server.round, sum_weights=weights,
        keep=lambda i, d: sum(jnp.sum(jnp.square(a)) for a in jax.tree.leaves(d)))
    lip = 1.0 / schedules.client_lr(hp, server.round)
    slope = jnp.where(q > 0, q * f ** jnp.where(q > 0, q - 1.0, 0.0), 0.0)
    # sum_k h_k, with ||Delta w_k||^2 = L^2 ||wbar_k - w^t||^2.
    h = lip * jnp.sum(weights) + jnp.sum(valid * slope * lip ** 2 * sq)
    # w^t - sum_k Delta_k / sum_k h_k = w^t + L total / h: the weighted mean times
    # L sum_k F_k^q / h, which is 1 at q = 0 (h_k = L): a constant q = 0 takes FedAvg's
    # step itself, bit for bit.
    mean = aggregate.mean_of_sum(total, weights)
    if static_zero:
      step = mean
    else:
      ratio = jnp.where(h > 0, lip * jnp.sum(weights) / jnp.where(h > 0, h, 1.0), 0.0)
      step = jax.tree.map(lambda s: ratio * s, mean)
    server = rounds.apply_update(sopt, server, step, world_state,
                                 skip=~jnp.any(c.valid))
    return server, clients, {**rounds.metrics(mask, c, losses),
                             "cohort_loss_at_start": jnp.sum(valid * f)
                             / jnp.maximum(jnp.sum(valid), 1.0)}

  return FederatedAlgorithm(lambda key: (rounds.init_server(task, world, sopt, key), ()),
                            round_fn)
