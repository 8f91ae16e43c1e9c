"""MIFA (Gu et al., 2021) in the asynchronous memory form we use for the AREA
paper's MIFA baseline (docs/papers/area.md).

Client i remembers U_i, its last update (0 until its first message); the server keeps
Ubar = mean_i U_i incrementally and never resets it:

  message from j:  U_new = x_loc - x_recv[j];  Ubar += (U_new - U_j) / n;  U_j = U_new
  every Delta:     x_s += Ubar                 (re-applies every client's latest update)

No frequency bias, but the stale updates applied again at every aggregation need a
small stepsize. (`mifa` is the round-based baseline of the FedAWE paper.)
"""

import jax
import jax.numpy as jnp

from fedjax_bench.algorithms import asynchronous
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.settings import coerce


Hparams = asynchronous.Hparams


def build(task, world, hp: Hparams) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  n = world.num_clients

  def init(x0):
    zero = asynchronous.zeros_like(x0)
    return zero, zero                                   # Ubar = 0, U_i = 0

  def ingest(ubar, u_j, x_loc, x_recv_j, staleness):
    u_new = jax.tree.map(jnp.subtract, x_loc, x_recv_j)
    ubar = jax.tree.map(lambda m, a, b: m + (a - b) / n, ubar, u_new, u_j)
    return ubar, u_new

  def aggregate(x, ubar, count):
    return jax.tree.map(jnp.add, x, ubar), ubar

  return asynchronous.build(task, world, hp, asynchronous.Method(init, ingest, aggregate))
