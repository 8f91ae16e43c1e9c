"""AREA, AsynchRonous Exact Averaging (Iakovidou & Kim, 2024), Algorithms 1-2.

Client i keeps y_i, the last model it sent (x0 until its first message); the server
keeps x_s and an aggregator u. When client j's message arrives (Algorithm 1 with the experiments'
aggregation every
Δ messages, Section 5.1):

  x_loc = LocalSGD(x_recv[j], alpha_recv[j])      P_X after every local step
  m = x_loc - y_j;   u += m / n;   y_j = x_loc
  alpha = h(alpha);  j receives (x_s, alpha)      before the aggregation (Alg. 1 order)
  every Delta messages:  x_s += u;  u = 0

So x_s + u = mean_i y_i at all times, and every aggregation sets x_s to the plain mean of
the latest models of ALL clients: no bias toward clients that report more often.
h(alpha) gives alpha_k = alpha0 / (k + 1)^beta after k messages (`area_lr_power` beta;
0: constant). `iterate_form_init` reproduces eqs. (2)-(4): client j sends the result it
computed at its previous message (the first message is 0) and computes the next one from
the model it receives. The server stores no per-client state.
"""

import jax
import jax.numpy as jnp

from fedjax_bench.algorithms import asynchronous
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.settings import NON_NEGATIVE, coerce, section, setting


@section("area")
class Hparams(asynchronous.Hparams):
  area_lr_power: float = setting(0.0, "Diminishing stepsize alpha0 / (k+1)^beta over client "
                                 "messages k (0: constant).", check=NON_NEGATIVE, sweep=True)
  iterate_form_init: bool = setting(False, "The paper's iterate form (2)-(4): a client's first "
                                    "message is zero and every message lags one event.")


def build(task, world, hp: Hparams) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  n = world.num_clients

  def init(x0):
    return asynchronous.zeros_like(x0), x0          # u = 0, y_i = x0

  def ingest(u, y_j, x_loc, x_recv_j, staleness):
    m = jax.tree.map(jnp.subtract, x_loc, y_j)
    return jax.tree.map(lambda a, b: a + b / n, u, m), x_loc

  def aggregate(x, u, count):
    return jax.tree.map(jnp.add, x, u), asynchronous.zeros_like(u)

  return asynchronous.build(
      task, world, hp, asynchronous.Method(init, ingest, aggregate),
      lr_power=hp.area_lr_power, lagged=hp.iterate_form_init)
