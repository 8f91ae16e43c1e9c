"""The algorithm contract: a bundle of pure functions, like optax's transforms."""

import functools
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

PRNGKey = jax.Array
Params = Any
ServerState = Any    # a pytree whose `round` field is the round counter
ClientStates = Any   # a pytree; every leaf has the client axis first
Metrics = dict       # name -> scalar array, reported per round


class FederatedAlgorithm(NamedTuple):
  init: Callable[[PRNGKey], tuple[ServerState, ClientStates]]
  round: Callable[[ServerState, ClientStates, PRNGKey],
                  tuple[ServerState, ClientStates, Metrics]]
  # The parameters that evaluation scores; None means `server_state.params`.
  eval_params: Optional[Callable[[ServerState, ClientStates], Params]] = None
  # Personalized algorithms: every client's own model ([num_clients, ...] leaves, this
  # device's rows of the client states), or a `Personal` (a shared model and per-client
  # parts), scored on each client's own test data (personal_test_accuracy and its spread).
  personal_params: Optional[Callable[[ServerState, ClientStates], Any]] = None


class Personal(NamedTuple):
  """Personal models as a shared model and per-client parts, which `personal_params` may
  return instead of whole per-client models: client i's model is ``shared`` with the leaves
  of row i of ``rows`` in place (``rows``: a tree of ``shared``'s structure, [num_clients,
  ...] leaves where a client has its own, None at the shared ones; `core.parts.select`).
  Scored without making any client's whole model but a chunk's at a time, so a part of
  O(d_part) per client (FedPer's head, FedBN's batch norm) stays O(d_part) per client."""
  shared: Params
  rows: Params


class Variant(NamedTuple):
  """One of the algorithms of a module that holds several (FedALIGN's methods, Fed-EF's
  optimizers, the loss-aware strategies): its settings class and ``build(task, world,
  hp)``, registered by `algorithms.register` as a module is."""
  Hparams: type
  build: Callable


def variant(build: Callable, settings_class: type, /, **fixed) -> Variant:
  """The `Variant` of ``build`` with the keyword arguments ``fixed`` that name it."""
  return Variant(settings_class, functools.partial(build, **fixed))


def params_to_evaluate(alg: FederatedAlgorithm, server, clients) -> Params:
  if alg.eval_params is None:
    return server.params
  return alg.eval_params(server, clients)


# Metrics that are means over something a round may not have (the cohort's clients, the
# event's message). Beside such a metric `m`, a round reports how many items it is a mean
# over as the metric `count_name(m)` (0 when `m` is undefined; `m` itself is then any
# value, usually 0). Over a block of rounds the engine reports sum(m * count) / sum(count),
# the mean over the block's items (NaN when the block has none), and the count summed over
# the block; `results.summarize` weights the blocks of its final window by these counts.
# A metric without a count is averaged over the rounds; a `cum_*` metric reports its last
# value.
COUNT_SUFFIX = ".count"


def count_name(name: str) -> str:
  return name + COUNT_SUFFIX


def is_count(name: str) -> bool:
  return name.endswith(COUNT_SUFFIX)


def with_count(metrics: Metrics, count, names=None) -> Metrics:
  """``metrics`` plus ``count`` (one scalar, as float32) as the count of each of ``names``
  (default: all of them)."""
  count = jnp.asarray(count, jnp.float32)
  names = list(metrics) if names is None else list(names)
  return {**metrics, **{count_name(k): count for k in names}}
