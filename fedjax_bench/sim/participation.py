"""Participation schemes: each gives a boolean mask over all clients per round."""

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_bench.errors import UsageError

PARTICIPATIONS = ("uniform", "full", "bernoulli")


class Participation(NamedTuple):
  num_clients: int
  cap: int  # static cohort size: at most this many clients train in a round
  sample: Callable[[jax.Array, jax.Array], jax.Array]  # (key, t) -> [num_clients] bool


def full(num_clients: int) -> Participation:
  return Participation(num_clients, num_clients,
                       lambda key, t: jnp.ones(num_clients, bool))


def uniform(num_clients: int, clients_per_round: int) -> Participation:
  """Exactly m of n clients, uniformly without replacement."""
  if not 0 < clients_per_round <= num_clients:
    raise UsageError(f"clients_per_round={clients_per_round} must be in [1, num_clients="
                     f"{num_clients}]")

  def sample(key, t):
    _, chosen = jax.lax.top_k(jax.random.uniform(key, (num_clients,)), clients_per_round)
    return jnp.zeros(num_clients, bool).at[chosen].set(True)

  return Participation(num_clients, clients_per_round, sample)


def bernoulli(probs, cap: int | None = None) -> Participation:
  """Client i is active with probability probs[i], independently.

  The default cap is the mean count plus 7 standard deviations, which more than
  ``cap`` active clients exceed with probability below 1e-11 per round; the
  excess would not train (the engine reports ``dropped_clients``).
  """
  probs = np.asarray(probs, np.float32)
  if probs.ndim != 1 or np.any(probs < 0) or np.any(probs > 1):
    raise UsageError("participation probabilities must be a vector in [0, 1]")
  n = probs.shape[0]
  if cap is None or cap <= 0:
    mean, var = float(probs.sum()), float((probs * (1 - probs)).sum())
    cap = min(n, max(1, math.ceil(mean + 7 * math.sqrt(var) + 1)))
  p = jnp.asarray(probs)
  return Participation(n, min(cap, n), lambda key, t: jax.random.uniform(key, (n,)) < p)


def make(name: str, num_clients: int, *, clients_per_round: int = 10,
         prob: float = 0.1, cap: int = 0) -> Participation:
  if name == "full":
    return full(num_clients)
  if name == "uniform":
    return uniform(num_clients, clients_per_round)
  if name == "bernoulli":
    if not 0 < prob <= 1:
      raise UsageError(f"--participation_prob={prob} must be in (0, 1]")
    return bernoulli(np.full(num_clients, prob), cap)
  raise UsageError(f"unknown --participation={name!r}; valid: {', '.join(PARTICIPATIONS)}")
