"""Masked and weighted means and sums over the client (leading) axis; norm clipping."""

import jax
import jax.numpy as jnp
import optax


def weighted_sum(tree, weights: jax.Array):
  return jax.tree.map(lambda a: jnp.tensordot(weights.astype(a.dtype), a, axes=1), tree)


def weighted_mean(tree, weights: jax.Array):
  """sum_i w_i x_i / sum_i w_i; zeros when every weight is zero."""
  return mean_of_sum(weighted_sum(tree, weights), weights)


def mean_of_sum(total, weights: jax.Array):
  """`weighted_mean` from the weighted sum ``total`` = sum_i w_i x_i already taken."""
  norm = jnp.sum(weights)
  scale = jnp.where(norm > 0, 1.0 / jnp.where(norm > 0, norm, 1.0), 0.0)
  return jax.tree.map(lambda s: s * scale.astype(s.dtype), total)


def scaled_sum(tree, weights: jax.Array, denominator):
  """sum_i w_i x_i / denominator (a fixed normalizer such as the population size)."""
  return divided(weighted_sum(tree, weights), denominator)


def divided(total, denominator):
  """`scaled_sum` from the weighted sum ``total`` already taken."""
  scale = 1.0 / jnp.asarray(denominator, jnp.float32)
  return jax.tree.map(lambda s: s * scale.astype(s.dtype), total)


def clip_by_global_norm(tree, max_norm):
  """tree * min(1, max_norm / ||tree||_2), the L2 norm over all leaves together."""
  norm = optax.tree.norm(tree)
  scale = jnp.minimum(1.0, max_norm / jnp.maximum(norm, 1e-30))
  return jax.tree.map(lambda a: a * scale.astype(a.dtype), tree)
