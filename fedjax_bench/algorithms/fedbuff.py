"""FedBuff (Nguyen et al., 2022), buffered asynchronous aggregation (a baseline of the AREA paper's
Section 5).

  message from j:  B += s(tau_j) (x_loc - x_recv[j]),  tau_j = version - recv_version[j]
  every Delta:     x_s += eta_g * B / D;  B = 0

D = the number of buffered messages (`fedbuff_divisor` "buffer": Delta under the count
rule) or n ("num_clients"); s = 1 ("none") or 1 / sqrt(1 + tau) ("sqrt"); eta_g =
server_lr. Clients that report more often pull x_s toward their own optimum.
"""

import jax
import jax.numpy as jnp

from fedjax_bench.algorithms import asynchronous
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.core.server_opt import ServerLr
from fedjax_bench.settings import coerce, section, setting

DIVISORS = ("buffer", "num_clients")
STALENESS = ("none", "sqrt")


@section("fedbuff")
class Hparams(asynchronous.Hparams, ServerLr):
  fedbuff_divisor: str = setting("buffer", "Divide the buffer by Delta or by n.",
                                 choices=DIVISORS)
  fedbuff_staleness: str = setting("none", "Weight a delta of staleness tau by 1 or 1/sqrt(1 + "
                                   "tau).", choices=STALENESS)


def build(task, world, hp: Hparams) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  divisor = hp.fedbuff_divisor
  staleness_weight = hp.fedbuff_staleness
  eta_g = hp.server_lr
  n = world.num_clients

  def init(x0):
    return asynchronous.zeros_like(x0), ()

  def ingest(buffer, memory, x_loc, x_recv_j, staleness):
    s = 1.0
    if staleness_weight == "sqrt":
      s = jax.lax.rsqrt(1.0 + staleness.astype(jnp.float32))
    return jax.tree.map(lambda b, a, x: b + s * (a - x), buffer, x_loc, x_recv_j), memory

  def aggregate(x, buffer, count):
    d = jnp.maximum(count, 1) if divisor == "buffer" else n
    return (jax.tree.map(lambda a, b: a + eta_g * b / d, x, buffer),
            asynchronous.zeros_like(buffer))

  return asynchronous.build(task, world, hp, asynchronous.Method(init, ingest, aggregate))
