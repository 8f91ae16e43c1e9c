"""Participation masks to static-size cohort slabs and back.

The slab has a static size ``cap``; its rows are the ids of the active clients in
increasing order, padded with invalid rows. Training the slab instead of the
population makes a round cost what its active clients cost.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp


class Cohort(NamedTuple):
  ids: jax.Array    # [cap] int32 client ids; padding rows hold id 0
  valid: jax.Array  # [cap] bool


def from_mask(mask: jax.Array, cap: int) -> Cohort:
  """Active clients beyond ``cap`` are dropped (callers size ``cap`` so that never happens)."""
  (ids,) = jnp.nonzero(mask, size=cap, fill_value=0)
  valid = jnp.arange(cap) < jnp.sum(mask)
  return Cohort(ids.astype(jnp.int32), valid)


def gather(tree, cohort: Cohort):
  return jax.tree.map(lambda a: a[cohort.ids], tree)


def scatter(tree, cohort: Cohort, rows):
  """Writes the valid slab rows back into the population arrays."""
  n = jax.tree.leaves(tree)[0].shape[0]
  # Padding rows point past the end and are dropped, so they never clobber client 0.
  ids = jnp.where(cohort.valid, cohort.ids, n)
  return jax.tree.map(lambda a, r: a.at[ids].set(r, mode="drop"), tree, rows)
