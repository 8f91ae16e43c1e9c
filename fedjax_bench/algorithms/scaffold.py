"""SCAFFOLD (Karimireddy et al., ICML 2020), Algorithm 1 with option II control variates.

Server state: x and the server control variate c; client state: c_i (0 at first).
Each round:
  1. observe the available clients S (the world's participation);
  2. each i in S: y_i = x; for k = 1..K_i: y_i <- y_i - eta_l (g_i(y_i) + c - c_i);
     c_i+ = c_i - c + (x - y_i) / (K_i eta_l)            (option II)
     (Delta y_i, Delta c_i) = (y_i - x, c_i+ - c_i);  c_i <- c_i+
  3. Delta x = (1/|S|) sum_{i in S} Delta y_i,  x <- x + eta_g Delta x   (the server
     optimizer: sgd at --server_lr = eta_g);  c <- c + (1/N) sum_{i in S} Delta c_i
     (= (|S| / N) times their mean), so c stays the mean of the c_i.
     --weighting=data_size weights both by n_i: the sum_S n_i-weighted mean of the Delta y_i,
     and c <- c + sum_S n_i Delta c_i / sum_all n_j (c the n-weighted mean of the c_i).
Absent clients keep their c_i. K_i is client i's local steps (--local_steps, or its
epochs' steps), eta_l the round's client learning rate. --control_variates=zero holds
every c_i and c at 0: FedAvg (with the same --weighting).

Memory: c_i is O(N d) floats, sharded over the clients axis like the other client states.
"""

import jax
import jax.numpy as jnp

from fedjax_bench.algorithms import fedavg
from fedjax_bench.core import aggregate, cohort as cohort_lib, local_terms, rounds, schedules
from fedjax_bench.core.client_memory import init_with_memory
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.settings import coerce, section, setting

CONTROL_VARIATES = ("option_ii", "zero")


@section("scaffold")
class Hparams(fedavg.Hparams):
  control_variates: str = setting(
      "option_ii", "SCAFFOLD's client control variates: option II of Algorithm 1 (c_i+ = "
      "c_i - c + (x - y_i) / (K eta_l)), or zero (held at 0: FedAvg).",
      choices=CONTROL_VARIATES)


def build(task, world, hp: Hparams) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  hp.require_sgd("scaffold", "option II's c_i+ = c_i - c + (x - y_i) / (K_i eta_l) is the mean "
                 "gradient of K_i plain SGD steps (Karimireddy et al. 2020, Algorithm 1)")
  sopt = hp.optimizer()
  n = world.num_clients
  hold_zero = hp.control_variates == "zero"
  # The sum of every client's weight: c_i's share of c is its weight over it.
  population = n if hp.weighting == "uniform" else jnp.sum(task.counts.astype(jnp.float32))

  def init(key):  # c = 0 in the server's aux, every c_i = 0
    return init_with_memory(task, world, sopt, key)

  def round_fn(server, c_clients, key):
    mask, s, world_state = rounds.observe(world, server, key)
    x, c = server.params, server.aux
    c_i = cohort_lib.gather(c_clients, s)
    start = local_terms.pair_start(x, jax.tree.map(lambda g, ci: g - ci, c, c_i))
    weights = fedavg.client_weights(task, s.ids, s.valid, hp.weighting)
    # FedAvg's streamed sum of the y_i - x (so that zero control variates are FedAvg bit for
    # bit), and each client's y_i - x kept for its c_i+.
    total, losses, dy = rounds.train(task, world, hp, start, s, key, server.round,
                                     per_client_start=True,
                                     loss_fn=local_terms.corrected(task.loss),
                                     sum_weights=weights, keep=lambda i, d: d[0])
    if hold_zero:
      c_plus = c_i
    else:
      k_eta = (jnp.maximum(world.client_steps[s.ids], 1).astype(jnp.float32)
               * schedules.client_lr(hp, server.round))
      c_plus = jax.tree.map(
          lambda ci, g, d: ci - g - d / k_eta.reshape((-1,) + (1,) * (d.ndim - 1)),
          c_i, c, dy)
    dc = jax.tree.map(jnp.subtract, c_plus, c_i)
    dx = aggregate.mean_of_sum(total[0], weights)
    c = jax.tree.map(jnp.add, c, aggregate.scaled_sum(dc, weights, population))
    server = rounds.apply_update(sopt, server, dx, world_state, skip=~jnp.any(s.valid), aux=c)
    return server, cohort_lib.scatter(c_clients, s, c_plus), rounds.metrics(mask, s, losses)

  return FederatedAlgorithm(init, round_fn)
