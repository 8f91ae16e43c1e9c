"""The algorithm contract (DESIGN.md): a bundle of pure functions, like optax's transforms."""

from typing import Any, Callable, NamedTuple, Optional

import jax

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


def params_to_evaluate(alg: FederatedAlgorithm, server, clients) -> Params:
  if alg.eval_params is None:
    return server.params
  return alg.eval_params(server, clients)
