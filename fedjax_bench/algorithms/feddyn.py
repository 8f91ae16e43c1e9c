"""FedDyn (Acar et al., ICLR 2021), Algorithm 1.

Server state: theta and h (0 at first); client state: g_k = grad L_k(theta_k), the
gradient each client last ended at (0 at first). Each round:
  1. observe the available clients P_t (the world's participation);
  2. each k in P_t runs local SGD from theta^{t-1} on
       L_k(theta) - <g_k, theta> + alpha/2 ||theta - theta^{t-1}||^2
     to theta_k^t, then g_k <- g_k - alpha (theta_k^t - theta^{t-1});
  3. h^t = h^{t-1} - alpha (1/m) sum_{k in P_t} (theta_k^t - theta^{t-1})
     theta^t = (1/|P_t|) sum_{k in P_t} theta_k^t - h^t / alpha
     (through the server optimizer: sgd at --server_lr = 1, the paper's, applies this).
     --weighting=data_size weights both by n_k: 1/m becomes n_k / sum_all n_j in h, and
     the mean over P_t the n_k-weighted one.
Absent clients keep their g_k; a round nobody trains changes nothing. alpha = 0 is
FedAvg with the same --weighting (h stays 0 and its term is dropped).

Memory: g_k is O(m d) floats, sharded over the clients axis like the other client states.
"""

import jax
import jax.numpy as jnp

from fedjax_bench.algorithms import fedavg
from fedjax_bench.core import aggregate, cohort as cohort_lib, local_terms, rounds
from fedjax_bench.core.client_memory import init_with_memory
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.settings import NON_NEGATIVE, coerce, section, setting


@section("feddyn")
class Hparams(fedavg.Hparams):
  feddyn_alpha: float = setting(0.01, "FedDyn's alpha: the weight of the dynamic "
                                "regularizer (the paper: 0.1, 0.01, 0.001).",
                                check=NON_NEGATIVE, sweep=True)


def build(task, world, hp: Hparams) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  hp.require_sgd("feddyn", "Acar et al. 2021 minimize the local objective by plain SGD, and "
                 "adamw's decay would also shrink the g_k trained beside theta")
  sopt = hp.optimizer()
  m = world.num_clients
  alpha = hp.feddyn_alpha
  static_zero = isinstance(alpha, (int, float)) and not alpha
  population = m if hp.weighting == "uniform" else jnp.sum(task.counts.astype(jnp.float32))

  def init(key):  # h = 0 in the server's aux, every g_k = 0
    return init_with_memory(task, world, sopt, key)

  def round_fn(server, grads, key):
    mask, c, world_state = rounds.observe(world, server, key)
    theta, h = server.params, server.aux
    g_k = cohort_lib.gather(grads, c)
    start = local_terms.pair_start(theta, jax.tree.map(jnp.negative, g_k))
    loss_fn = local_terms.corrected(local_terms.proximal(task.loss, theta, alpha))
    weights = fedavg.client_weights(task, c.ids, c.valid, hp.weighting)
    # The streamed sum of the theta_k^t - theta^{t-1} (FedAvg's, so alpha = 0 is FedAvg bit
    # for bit) and each client's own, kept for its g_k.
    total, losses, d = rounds.train(task, world, hp, start, c, key, server.round,
                                    per_client_start=True, loss_fn=loss_fn,
                                    sum_weights=weights, keep=lambda i, dk: dk[0])
    total = total[0]
    grads = cohort_lib.scatter(grads, c, jax.tree.map(lambda g, dk: g - alpha * dk, g_k, d))
    mean = aggregate.mean_of_sum(total, weights)
    if static_zero:
      step = mean
    else:
      h = jax.tree.map(lambda a, s: a - alpha * s, h, aggregate.divided(total, population))
      inv = jnp.where(alpha > 0, 1.0 / jnp.where(alpha > 0, alpha, 1.0), 0.0)
      step = jax.tree.map(lambda a, b: a - inv * b, mean, h)
    server = rounds.apply_update(sopt, server, step, world_state, skip=~jnp.any(c.valid),
                                 aux=h)
    return server, grads, rounds.metrics(mask, c, losses)

  return FederatedAlgorithm(init, round_fn)
