"""A part of a model's parameters: the leaves a mask selects (a tree of Python bools of the
parameters' structure, `models.layers`), held as a tree of the same structure with None
(an empty subtree) at the other leaves. What personalized algorithms keep per client (FedPer's
and FedRep's heads, FedBN's batch normalization) is such a part, O(the part) per client."""

import jax
import jax.numpy as jnp

# The collection of a batch-norm model's running statistics.
STATE = "batch_stats"


def has_state(params) -> bool:
  """Whether a Task's parameters are a stateful model's variables: ``{"params": ...,
  "batch_stats": ...}`` (a model with batch norm, `models.batch_norm`)."""
  return isinstance(params, dict) and STATE in params


def select(tree, mask):
  """The leaves of ``tree`` where ``mask`` is True, None elsewhere."""
  return jax.tree.map(lambda m, x: x if m else None, mask, tree)


def merge(tree, part):
  """``tree`` with the leaves of ``part`` (a `select` of a tree of its structure) in place."""
  return jax.tree.map(lambda x, p: x if p is None else p, tree, part,
                      is_leaf=lambda x: x is None)


def broadcast_merge(tree, part):
  """`merge` of per-client rows ``part`` ([n, ...] leaves, at least one) into a shared
  ``tree``: every leaf [n, ...], the shared ones broadcast."""
  n = jax.tree.leaves(part)[0].shape[0]
  return jax.tree.map(lambda x, p: jnp.broadcast_to(x, (n,) + x.shape) if p is None else p,
                      tree, part, is_leaf=lambda x: x is None)


def zero(tree, mask):
  """``tree`` with zeros at the leaves ``mask`` selects."""
  return jax.tree.map(lambda m, x: jnp.zeros_like(x) if m else x, mask, tree)
