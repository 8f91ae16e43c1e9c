"""Aggregation weights as pure functions of the clients' losses on the global model
(the FedSoftMax paper's §2.3), and the one-pass per-client loss they read.

Every weight function maps (losses ℓ [N], objective weights p [N], hyperparameters) to a
point of the simplex: α ≥ 0, Σα = 1. ``p`` is zero for clients outside the round's cohort,
and every function keeps their α at zero.
"""

import jax
import jax.numpy as jnp

from fedjax_bench.core import client_scores

STRATEGIES = ("fedavg", "uniform", "fedmax", "fedmax_k", "fedsoftmax")


def client_losses(task, params) -> jax.Array:
  """F_i(params) for every client i, one vectorized pass (`client_scores.per_client`)."""
  return client_scores.per_client(task, params)[0]


def cohort_losses(task, params, cohort, *, width: int = -1) -> jax.Array:
  """F_i(params) [N] for the clients of ``cohort`` (0 elsewhere, where p is 0 and no weight
  reads it): the population's one pass when the cohort's slab covers the population
  (full participation), else a pass over the cohort's own examples only
  (`client_scores.of_cohort`), so that 10 clients a round of 100 score a tenth of the data."""
  if cohort.ids.shape[0] >= task.num_clients:
    return client_losses(task, params)
  losses = client_scores.of_cohort(task, params, cohort.ids, cohort.valid, width=width)
  rows = jnp.where(cohort.valid, cohort.ids, task.num_clients)
  return jnp.zeros(task.num_clients, jnp.float32).at[rows].set(losses, mode="drop")


def fedavg(losses, p, **_):
  """Generalised FedAvg: α = p (renormalised over the cohort)."""
  del losses
  return p / jnp.sum(p)


def uniform(losses, p, **_):
  """α_i = 1/|cohort| (not in the paper)."""
  del losses
  m = (p > 0).astype(jnp.float32)
  return m / jnp.sum(m)


def fedmax(losses, p, **_):
  """Eq. 15/22: all weight on the worst client(s), split uniformly on exact ties."""
  ell = jnp.where(p > 0, losses, -jnp.inf)
  worst = (ell == jnp.max(ell)).astype(jnp.float32)
  return worst / jnp.sum(worst)


def fedmax_k(losses, p, *, k: int, **_):
  """Uniform 1/k on the k largest losses (top_k order: the lower index wins ties)."""
  ell = jnp.where(p > 0, losses, -jnp.inf)
  k = min(int(k), losses.shape[0])
  _, top = jax.lax.top_k(ell, k)
  chosen = jnp.zeros(losses.shape[0], jnp.float32).at[top].set(1.0) * (p > 0)
  return chosen / jnp.sum(chosen)


def fedsoftmax(losses, p, *, beta, **_):
  """α ∝ p · exp(β ℓ), computed as softmax(log p + β ℓ); β = 0 is FedAvg."""
  logits = jnp.where(p > 0, jnp.log(jnp.where(p > 0, p, 1.0)) + beta * losses, -jnp.inf)
  return jax.nn.softmax(logits)


WEIGHTS = {"fedavg": fedavg, "uniform": uniform, "fedmax": fedmax, "fedmax_k": fedmax_k,
           "fedsoftmax": fedsoftmax}


def floor_mix(alpha, p, eps):
  """(1 − ε) α + ε p: the κ-family floor of the paper's eq. (16)-(19) (κ_i ≥ ε), with p
  renormalised."""
  return (1.0 - eps) * alpha + eps * p / jnp.sum(p)


def rho(alpha, losses, p):
  """The weighting skew ρ = Σ α ℓ / Σ p ℓ (eq. 8, with F_i* folded into ℓ)."""
  return jnp.dot(alpha, losses) / jnp.dot(p / jnp.sum(p), losses)


def fednova_coefficients(p, steps):
  """FedNova (Wang et al. 2020, SGD solver): Δ = (Σ_j p_j τ_j) Σ_i p_i Δ_i / τ_i, i.e.
  coefficients c_i = p_i τ_eff / τ_i on the deltas (they need not sum to 1)."""
  p = p / jnp.sum(p)
  tau = jnp.maximum(steps.astype(jnp.float32), 1.0)
  return p * jnp.sum(p * tau) / tau
