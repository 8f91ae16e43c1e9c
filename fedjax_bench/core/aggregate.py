"""Masked and weighted means and sums over the client (leading) axis."""

import jax
import jax.numpy as jnp


def weighted_sum(tree, weights: jax.Array):
  return jax.tree.map(lambda a: jnp.tensordot(weights.astype(a.dtype), a, axes=1), tree)


def weighted_mean(tree, weights: jax.Array):
  """sum_i w_i x_i / sum_i w_i; zeros when every weight is zero."""
  total = jnp.sum(weights)
  scale = jnp.where(total > 0, 1.0 / jnp.where(total > 0, total, 1.0), 0.0)
  return jax.tree.map(lambda s: s * scale.astype(s.dtype), weighted_sum(tree, weights))
