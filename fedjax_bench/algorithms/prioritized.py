"""The prioritized-FL protocol that FedALIGN and its baselines share (Ravi & Shomorony,
"Utilizing Free Clients in Federated Learning for Focused Model Enhancement", Section 2 and
Appendix A.4).

The priority clients P define the objective F(w) = Σ_{k∈P} p_k F_k(w), with
p_k = D_k / Σ_{i∈P} D_i (defined for every client, free ones included). Each round a part of
both groups takes part: everyone, or a uniform ⌊--priority_fraction·|P|⌋ of P (or K draws
with replacement ∝ p_k, the weights of the appendix's analysis) and a uniform
⌊--free_fraction·|NP|⌋ of the free clients (or each with probability --free_fraction). Which
free clients a method then admits is the method's (`fedalign.py`). The roles are the task's
(`Task.priority`; traced, each run's own, with --data_per_seed).
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_bench.core import keys
from fedjax_bench.task.task import Task

PRIORITY_SAMPLINGS = ("without_replacement", "with_replacement")
FREE_SAMPLINGS = ("without_replacement", "bernoulli")


class Protocol(NamedTuple):
  """One run's roles and how many of each group take part a round."""
  priority: Any           # [N] bool: P
  n: int                  # clients
  d: jax.Array            # [N] float32 D_k, each client's examples
  p: jax.Array            # [N] p_k
  k_p: int                # priority clients sampled a round (or draws, with replacement)
  k_f: int                # free clients sampled a round, without replacement
  full: bool              # everyone takes part every round
  free_ids: np.ndarray    # the free clients' ids (every id where the roles are traced)
  priority_sampling: str  # PRIORITY_SAMPLINGS
  free_sampling: str      # FREE_SAMPLINGS
  free_fraction: float


def protocol(task: Task, *, priority_fraction: float, free_fraction: float,
             priority_sampling: str, free_sampling: str) -> Protocol:
  is_p = task.priority
  n = task.num_clients
  per_run = task.view is not None  # --data_per_seed: each run's roles, traced
  n_p = task.num_priority if per_run else int(np.asarray(is_p).sum())
  n_f = n - n_p
  k_p = max(1, int(np.floor(priority_fraction * n_p)))
  k_f = int(np.floor(free_fraction * n_f))
  full = priority_fraction == 1 and free_fraction == 1
  d = task.counts.astype(jnp.float32)
  p = d / jnp.sum(jnp.where(is_p, d, 0.0))
  free_ids = np.arange(n) if per_run else np.flatnonzero(~np.asarray(is_p))
  return Protocol(is_p, n, d, p, k_p, k_f, full, free_ids, priority_sampling, free_sampling,
                  free_fraction)


def sample(pfl: Protocol, key):
  """(who takes part [N] bool, how often each priority client was drawn [N])."""
  is_p, n = pfl.priority, pfl.n
  key = keys.for_purpose(key, "participation")
  kp, kf = jax.random.split(key)
  if pfl.full:
    return jnp.ones(n, bool), jnp.ones(n, jnp.float32)
  if pfl.priority_sampling == "with_replacement":
    draws = jax.random.choice(kp, n, (pfl.k_p,), p=jnp.where(is_p, pfl.p, 0.0))
    mult = jnp.zeros(n, jnp.float32).at[draws].add(1.0)
  else:
    mult = uniform_subset(kp, is_p, pfl.k_p).astype(jnp.float32)
  if pfl.free_sampling == "bernoulli":
    free = ~is_p & (jax.random.uniform(kf, (n,)) < pfl.free_fraction)
  else:
    free = uniform_subset(kf, ~is_p, pfl.k_f)
  return (mult > 0) | free, mult


def uniform_subset(key, eligible, k: int):
  """k of the ``eligible`` clients uniformly without replacement ([N] bool)."""
  u = jnp.where(eligible, jax.random.uniform(key, eligible.shape), 2.0)
  chosen = jnp.zeros(eligible.shape, bool).at[jnp.argsort(u)[:k]].set(True)
  return chosen & eligible


def inclusion_metrics(task: Task, pfl: Protocol, admitted, record: bool) -> dict:
  """The free clients a round included: how many (and of them the aligned ones), and
  theta_term = 1/(1 + Σ_{k∉P} p_k I_k), whose mean is θ̂ of Theorem 1; with ``record``,
  each free client's 0/1 (`admitted_name`)."""
  free = ~task.priority & admitted
  out = {"n_admitted": jnp.sum(free).astype(jnp.float32),
         "theta_term": 1.0 / (1.0 + jnp.sum(jnp.where(free, pfl.p, 0.0)))}
  if task.aligned is not None:
    out["n_admitted_aligned"] = jnp.sum(free & task.aligned).astype(jnp.float32)
  if record:
    out.update({admitted_name(int(k)): free[k].astype(jnp.float32) for k in pfl.free_ids})
  return out


def admitted_name(k: int) -> str:
  return f"admitted_{k:04d}"
