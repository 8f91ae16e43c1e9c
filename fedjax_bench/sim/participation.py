"""Participation schemes: who is active in round t, as a boolean mask over all clients.

A scheme is a pure state machine, ``init(key) -> state`` and
``step(key, t, state) -> (mask, state)``, so stateful availability (a Markov chain
per client) fits the same mould as a fresh draw per round; stateless schemes keep
``()``. ``probs(t)`` gives the marginal probabilities p_i^t where they are known:
the oracle that known-probability FedAvg is allowed to read.
"""

import math
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_bench.errors import UsageError

PARTICIPATIONS = ("uniform", "full", "bernoulli", "uniform_sparse", "proportional")


def _no_state(key):
  del key
  return ()


class Participation(NamedTuple):
  num_clients: int
  cap: int  # static cohort size: at most this many clients train in a round
  step: Callable[[jax.Array, jax.Array, Any], tuple[jax.Array, Any]]  # (key, t, state)
  init: Callable[[jax.Array], Any] = _no_state
  probs: Optional[Callable[[jax.Array], jax.Array]] = None  # t -> [num_clients] p_i^t
  # (key, t) -> [cap] increasing client ids, for populations too large for a mask per
  # round (`uniform_sparse`); rounds.observe then builds the cohort without a mask.
  draw_ids: Optional[Callable[[jax.Array, jax.Array], jax.Array]] = None

  def sample(self, key, t, state=()):
    """The mask alone (for stateless schemes and tests)."""
    return self.step(key, t, state)[0]


def stateless(num_clients: int, cap: int, sample: Callable[[jax.Array, jax.Array], jax.Array],
              probs: Optional[Callable[[jax.Array], jax.Array]] = None) -> Participation:
  """A scheme that draws a fresh mask each round: ``sample(key, t) -> mask``."""
  return Participation(num_clients, cap, lambda key, t, state: (sample(key, t), state),
                       _no_state, probs)


def cap_for(probs: np.ndarray) -> int:
  """Mean plus 7 standard deviations of the active count: more than this many
  independent Bernoulli successes happen with probability below 1e-11 per round."""
  probs = np.asarray(probs, np.float64)
  mean, var = float(probs.sum()), float((probs * (1 - probs)).sum())
  return min(probs.shape[0], max(1, math.ceil(mean + 7 * math.sqrt(var) + 1)))


def full(num_clients: int) -> Participation:
  return stateless(num_clients, num_clients, lambda key, t: jnp.ones(num_clients, bool),
                   lambda t: jnp.ones(num_clients, jnp.float32))


def uniform(num_clients: int, clients_per_round: int) -> Participation:
  """Exactly m of n clients, uniformly without replacement."""
  if not 0 < clients_per_round <= num_clients:
    raise UsageError(f"clients_per_round={clients_per_round} must be in [1, num_clients="
                     f"{num_clients}]")

  def sample(key, t):
    _, chosen = jax.lax.top_k(jax.random.uniform(key, (num_clients,)), clients_per_round)
    return jnp.zeros(num_clients, bool).at[chosen].set(True)

  rate = clients_per_round / num_clients
  return stateless(num_clients, clients_per_round, sample,
                   lambda t: jnp.full(num_clients, rate, jnp.float32))


def distinct_ids(key, num_clients: int, m: int) -> jax.Array:
  """m distinct ids of [0, num_clients), increasing, uniform over the m-subsets, in O(m log m)
  work: draw m ids with replacement, then redraw the duplicates until there are none. The
  procedure commutes with every relabelling of the clients, so every m-subset is equally
  likely. Expected redraw rounds: about 1 + m²/(2n) when m is much smaller than n."""
  def redraw(state):
    ids, key, _ = state
    key, sub = jax.random.split(key)
    ids = jnp.sort(ids)
    dup = jnp.concatenate([jnp.zeros(1, bool), ids[1:] == ids[:-1]])
    ids = jnp.where(dup, jax.random.randint(sub, (m,), 0, num_clients), ids)
    return ids, key, jnp.any(dup)

  key, sub = jax.random.split(key)
  ids = jax.random.randint(sub, (m,), 0, num_clients)
  ids, _, _ = jax.lax.while_loop(lambda s: s[2], redraw, (ids, key, jnp.bool_(True)))
  return jnp.sort(ids).astype(jnp.int32)


def uniform_sparse(num_clients: int, clients_per_round: int) -> Participation:
  """``uniform`` (m of n without replacement) drawn as ids in O(m), never as a mask over
  all n: the round costs what its cohort costs, for populations of millions. Its mask
  (``sample``) is only for tests; algorithms see the cohort (rounds.observe)."""
  if not 0 < clients_per_round <= num_clients:
    raise UsageError(f"clients_per_round={clients_per_round} must be in [1, num_clients="
                     f"{num_clients}]")
  m = clients_per_round
  if 2 * m > num_clients:  # redrawing would take long; the O(n) draw is as cheap here
    base = uniform(num_clients, m)
    draw = lambda key, t: jnp.nonzero(base.sample(key, t), size=m)[0].astype(jnp.int32)
  else:
    draw = lambda key, t: distinct_ids(key, num_clients, m)

  def mask(key, t):
    return jnp.zeros(num_clients, bool).at[draw(key, t)].set(True)

  rate = m / num_clients
  return stateless(num_clients, m, mask,
                   lambda t: jnp.full(num_clients, rate, jnp.float32))._replace(draw_ids=draw)


def bernoulli(probs, cap: int | None = None) -> Participation:
  """Client i is active with probability probs[i], independently.

  The default cap is `cap_for(probs)`; the excess over a cap would not train (the
  engine reports ``dropped_clients``).
  """
  probs = np.asarray(probs, np.float32)
  if probs.ndim != 1 or np.any(probs < 0) or np.any(probs > 1):
    raise UsageError("participation probabilities must be a vector in [0, 1]")
  n = probs.shape[0]
  if cap is None or cap <= 0:
    cap = cap_for(probs)
  p = jnp.asarray(probs)
  return stateless(n, min(cap, n), lambda key, t: jax.random.uniform(key, (n,)) < p,
                   lambda t: p)


def proportional(sizes, clients_per_round: int) -> Participation:
  """Exactly m distinct clients, drawn one after another without replacement, client k
  with probability proportional to sizes[k] among those not yet drawn (the q-FFL and
  FedProx papers' cohort: ``np.random.choice(N, m, replace=False, p=n_k / n)``). Clients
  with no examples are never drawn. The marginal inclusion probabilities have no closed
  form, so ``probs`` is None (oracles such as fedavg_known refuse the scheme)."""
  sizes = np.asarray(sizes, np.float64)
  if sizes.ndim != 1 or sizes.size == 0 or not np.all(np.isfinite(sizes) & (sizes >= 0)):
    raise UsageError("proportional participation needs the clients' sizes: a non-empty "
                     "vector of non-negative example counts")
  n, m, with_data = sizes.shape[0], clients_per_round, int(np.count_nonzero(sizes))
  if not 0 < m <= n:
    raise UsageError(f"clients_per_round={m} must be in [1, num_clients={n}]")
  if m > with_data:
    raise UsageError(f"clients_per_round={m} exceeds the {with_data} clients with training "
                     "examples that proportional participation can draw")
  # Gumbel-top-k: the m largest log(p_k) + G_k (G_k iid standard Gumbel), in order, are
  # distributed exactly as m successive draws without replacement with weights p (Vieira
  # 2014; Kool, van Hoof & Welling 2019). Why: over any set S of clients the argmax is k
  # with probability p_k / sum_S p (Gumbel-max) and is independent of the max over S;
  # whether the first winner beat the rest depends on the rest only through their max, so
  # given the first draw the runner-up is a weighted draw from the rest, and so on. One
  # jittable top_k of the key, no sequential loop. log(0) = -inf is never among the top m,
  # since at least m entries are finite.
  with np.errstate(divide="ignore"):
    logits = jnp.asarray(np.log(sizes), jnp.float32)

  def sample(key, t):
    _, chosen = jax.lax.top_k(logits + jax.random.gumbel(key, (n,)), m)
    return jnp.zeros(n, bool).at[chosen].set(True)

  return stateless(n, m, sample)


def make(name: str, num_clients: int, *, clients_per_round: int = 10,
         prob: float = 0.1, cap: int = 0, sizes=None) -> Participation:
  """``sizes``: the clients' training example counts, which proportional needs."""
  if name == "full":
    return full(num_clients)
  if name == "uniform":
    return uniform(num_clients, clients_per_round)
  if name == "uniform_sparse":
    return uniform_sparse(num_clients, clients_per_round)
  if name == "bernoulli":
    if not 0 < prob <= 1:
      raise UsageError(f"--participation_prob={prob} must be in (0, 1]")
    return bernoulli(np.full(num_clients, prob), cap)
  if name == "proportional":
    if sizes is None or len(sizes) != num_clients:
      raise UsageError(f"--participation=proportional needs the {num_clients} clients' "
                       "training sizes (make(..., sizes=...))")
    return proportional(sizes, clients_per_round)
  raise UsageError(f"unknown --participation={name!r}; valid: {', '.join(PARTICIPATIONS)}")
