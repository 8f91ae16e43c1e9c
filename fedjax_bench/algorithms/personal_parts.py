"""Personalization by parts of the model (registers no algorithm): each client keeps a part
of the model as its own and the server averages the rest. FedPer and FedRep keep the head
(the last ``--head_layers`` layers, `models.layers`), FedBN the batch normalization.

`build` is the round FedPer (Arivazhagan et al. 2019) and FedBN (Li et al. 2021) share:
every sampled client trains the whole model from (the server's shared part, its own part)
jointly, keeps its new own part, and the server averages the shared part's updates as FedAvg
does (the own part's deltas are zeroed, so the server's copy of it stays where it started:
no client reads it). A part is a tree of the parameters' structure with None at the other
leaves (`core.parts`), held per client in the client states: O(the part) per client,
sharded over the clients axis like every client state, and scored as `types.Personal`
without making whole per-client models.
"""

import jax
import jax.numpy as jnp

from fedjax_bench.algorithms import fedavg
from fedjax_bench.core import aggregate, cohort as cohort_lib, parts, rounds
from fedjax_bench.core.types import FederatedAlgorithm, Personal
from fedjax_bench.data.federated import pixels_to_float
from fedjax_bench.errors import UsageError
from fedjax_bench.models import layers
from fedjax_bench.settings import NON_NEGATIVE, section, setting


@section("personalization layers")
class HeadLayers:
  head_layers: int = setting(1, "The head each client keeps as its own (fedper, fedrep): the "
                             "model's last this many layers (docs/models.md; 1: the output "
                             "layer); the others are the shared body. 0: no head (FedAvg).",
                             check=NON_NEGATIVE)


def require_client_test(task, algo: str) -> None:
  if task.client_test is None:
    raise UsageError(f"{algo} is scored on each client's own test data: give "
                     "--holdout_fraction (e.g. 0.2)")


def head_mask(task, head_layers: int):
  """The mask of ``task``'s parameters that is its model's last ``head_layers`` layers; a
  UsageError when no body would be left."""
  head_layers = rounds.static(head_layers, "head_layers")
  x = pixels_to_float(task.x[:1]).reshape((1,) + task.feature_shape)
  names = layers.layers(task.model, x)
  if head_layers >= len(names):
    raise UsageError(f"--head_layers={head_layers} leaves the model no shared body: its "
                     f"layers are {', '.join(names)}; valid: 0 to {len(names) - 1}")
  return layers.head_mask(shapes(task), names, head_layers)


def shapes(task):
  return jax.eval_shape(task.init_params, jax.random.PRNGKey(0))


def own_rows(part, n: int):
  """Every client's copy of ``part``: [n, ...] leaves."""
  return jax.tree.map(lambda a: jnp.broadcast_to(a, (n,) + a.shape), part)


def build(task, world, hp: fedavg.Hparams, mask) -> FederatedAlgorithm:
  """The round of FedPer and FedBN with own part ``mask`` (`models.layers`'s masks): with an
  empty mask every client starts from the server's model, FedAvg's round."""
  sopt = hp.optimizer()
  empty = layers.is_empty(mask)

  def init(key):  # every client's part starts as the initial model's
    server = rounds.init_server(task, world, sopt, key)
    return server, own_rows(parts.select(server.params, mask), world.num_clients)

  def round_fn(server, own, key):
    observed, c, world_state = rounds.observe(world, server, key)
    weights = fedavg.client_weights(task, c.ids, c.valid, hp.weighting)
    if empty:
      total, losses = rounds.train(task, world, hp, server.params, c, key, server.round,
                                   sum_weights=weights)
    else:
      mine = cohort_lib.gather(own, c)
      start = parts.broadcast_merge(server.params, mine)  # (shared, own part) per client
      total, losses, moved = rounds.train(task, world, hp, start, c, key, server.round,
                                          per_client_start=True, sum_weights=weights,
                                          keep=lambda i, delta: parts.select(delta, mask))
      own = cohort_lib.scatter(own, c, jax.tree.map(jnp.add, mine, moved))
    delta = parts.zero(aggregate.mean_of_sum(total, weights), mask)
    server = rounds.apply_update(sopt, server, delta, world_state, skip=~jnp.any(c.valid))
    return server, own, rounds.metrics(observed, c, losses)

  return FederatedAlgorithm(init, round_fn,
                            personal_params=lambda server, own: Personal(server.params, own))
