"""Masked and weighted means and sums over the client (leading) axis; norm clipping."""

import jax
import jax.numpy as jnp
import optax


def weighted_sum(tree, weights: jax.Array):
  return jax.tree.map(lambda a: jnp.tensordot(weights.astype(a.dtype), a, axes=1), tree)


def weighted_mean(tree, weights: jax.Array):
  """sum_i w_i x_i / sum_i w_i; zeros when every weight is zero."""
  total = jnp.sum(weights)
  scale = jnp.where(total > 0, 1.0 / jnp.where(total > 0, total, 1.0), 0.0)
  return jax.tree.map(lambda s: s * scale.astype(s.dtype), weighted_sum(tree, weights))


def scaled_sum(tree, weights: jax.Array, denominator):
  """sum_i w_i x_i / denominator (a fixed normalizer such as the population size)."""
  scale = 1.0 / jnp.asarray(denominator, jnp.float32)
  return jax.tree.map(lambda s: s * scale.astype(s.dtype), weighted_sum(tree, weights))


def clip_by_global_norm(tree, max_norm):
  """tree * min(1, max_norm / ||tree||_2), the L2 norm over all leaves together."""
  norm = optax.tree.norm(tree)
  scale = jnp.minimum(1.0, max_norm / jnp.maximum(norm, 1e-30))
  return jax.tree.map(lambda a: a * scale.astype(a.dtype), tree)
