"""AS-FedAvg, asynchronous FedAvg (a baseline of the AREA paper's
Section 5; our definition, docs/papers/area.md): FedAvg's rule applied to the first
Delta clients that finish, each having trained from its own stale model.

  "model_average" (default):  message: B += x_loc;   every Delta: x_s = B / Delta;  B = 0
  "async_sgd":                every message at once: x_s += x_loc - x_recv[j]   (Delta = 1)

A client that reports twice in one buffer counts twice. Both forms are biased toward
clients that report more often.
"""

import jax
import jax.numpy as jnp

from fedjax_bench.algorithms import asynchronous
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.settings import coerce, section, setting

MODES = ("model_average", "async_sgd")


@section("asfedavg")
class Hparams(asynchronous.Hparams):
  asfedavg_mode: str = setting("model_average", "Average the Delta buffered models, or apply "
                               "each delta at once.", choices=MODES)


def build(task, world, hp: Hparams) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  mode = hp.asfedavg_mode

  def init(x0):
    return asynchronous.zeros_like(x0), ()

  if mode == "model_average":
    def ingest(buffer, memory, x_loc, x_recv_j, staleness):
      return jax.tree.map(jnp.add, buffer, x_loc), memory

    def aggregate(x, buffer, count):
      # count is Delta under the count rule; a Poisson aggregation may find fewer (or none).
      mean = jax.tree.map(lambda b: b / jnp.maximum(count, 1), buffer)
      return asynchronous.select(count > 0, mean, x), asynchronous.zeros_like(buffer)

    return asynchronous.build(task, world, hp, asynchronous.Method(init, ingest, aggregate))

  def ingest_delta(buffer, memory, x_loc, x_recv_j, staleness):
    return jax.tree.map(lambda b, a, x: b + (a - x), buffer, x_loc, x_recv_j), memory

  def apply(x, buffer, count):
    return jax.tree.map(jnp.add, x, buffer), asynchronous.zeros_like(buffer)

  return asynchronous.build(task, world, hp, asynchronous.Method(init, ingest_delta, apply),
                            delta=1)
