"""FedBuff (Nguyen et al., 2022), buffered asynchronous aggregation (spec 002 §3.3).

  message from j:  B += s(tau_j) (x_loc - x_recv[j]),  tau_j = version - recv_version[j]
  every Delta:     x_s += eta_g * B / D;  B = 0

D = the number of buffered messages (`fedbuff_divisor` "buffer": Delta under the count
rule) or n ("num_clients"); s = 1 ("none") or 1 / sqrt(1 + tau) ("sqrt"); eta_g =
server_lr. Clients that report more often pull x_s toward their own optimum.
"""

import jax
import jax.numpy as jnp

from fedjax_bench.core import asynchronous
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.errors import UsageError

DIVISORS = ("buffer", "num_clients")
STALENESS = ("none", "sqrt")


def build(task, world, hp: dict) -> FederatedAlgorithm:
  divisor = hp.get("fedbuff_divisor", "buffer")
  if divisor not in DIVISORS:
    raise UsageError(f"unknown --fedbuff_divisor={divisor!r}; valid: {', '.join(DIVISORS)}")
  staleness_weight = hp.get("fedbuff_staleness", "none")
  if staleness_weight not in STALENESS:
    raise UsageError(f"unknown --fedbuff_staleness={staleness_weight!r}; valid: "
                     f"{', '.join(STALENESS)}")
  eta_g = hp.get("server_lr", 1.0)
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
