"""Participation masks to static-size cohort slabs and back, and the client states the
slab reads and writes, which may be sharded over the engine mesh's "clients" axis.

The slab has a static size ``cap``; its rows are the ids of the active clients in
increasing order, padded with invalid rows. Training the slab instead of the
population makes a round cost what its active clients cost (`client_map`).
"""

import contextlib
import contextvars
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
  """The cohort's rows of client state ([cap, ...] per leaf; padding rows read client 0).

  With the client state sharded (`sharded_over` with ``num_clients``), each device reads
  the cohort rows it holds, zeros elsewhere, and a psum over the axis makes the slab whole
  on every device: O(cap) traffic, exact (every row is one value plus zeros)."""
  axis = _STATE_AXIS.get()
  if axis is None:
    return jax.tree.map(lambda a: a[cohort.ids], tree)
  name = axis[0]

  def take(a):
    local, own = _local_ids(cohort.ids, a.shape[0], name)
    rows = a[jnp.clip(local, 0, a.shape[0] - 1)]
    return _psum(jnp.where(rows_like(own, rows), rows, jnp.zeros_like(rows)), name)

  return jax.tree.map(take, tree)


def scatter(tree, cohort: Cohort, rows):
  """Writes the valid slab rows back into the population arrays (sharded: only the rows
  this device holds)."""
  axis = _STATE_AXIS.get()
  if axis is not None:
    per = jax.tree.leaves(tree)[0].shape[0]
    local, own = _local_ids(cohort.ids, per, axis[0])
    ids = jnp.where(cohort.valid & own, local, per)
    return jax.tree.map(lambda a, r: a.at[ids].set(r, mode="drop"), tree, rows)
  n = jax.tree.leaves(tree)[0].shape[0]
  # Padding rows point past the end and are dropped, so they never clobber client 0.
  ids = jnp.where(cohort.valid, cohort.ids, n)
  return jax.tree.map(lambda a, r: a.at[ids].set(r, mode="drop"), tree, rows)


def members(like: jax.Array, cohort: Cohort) -> jax.Array:
  """[rows of ``like``] bool: which client-state rows (this device's, when sharded) belong
  to the cohort's valid clients."""
  return scatter(jnp.zeros(like.shape[0], bool), cohort, cohort.valid)


def read_row(tree, i):
  """Client ``i``'s row of every leaf (``i`` a traced scalar); sharded, the device holding
  it contributes the row and a psum hands it to all."""
  axis = _STATE_AXIS.get()
  if axis is None:
    return jax.tree.map(lambda a: jax.lax.dynamic_index_in_dim(a, i, keepdims=False), tree)

  def take(a):
    local, own = _local_ids(i, a.shape[0], axis[0])
    row = jax.lax.dynamic_index_in_dim(a, jnp.clip(local, 0, a.shape[0] - 1), keepdims=False)
    return _psum(jnp.where(own, row, jnp.zeros_like(row)), axis[0])

  return jax.tree.map(take, tree)


def write_row(tree, i, row):
  """``tree`` with client ``i``'s row replaced (in place); sharded, only by its holder."""
  axis = _STATE_AXIS.get()
  if axis is None:
    return jax.tree.map(lambda a, r: jax.lax.dynamic_update_index_in_dim(a, r, i, 0), tree, row)
  per = jax.tree.leaves(tree)[0].shape[0]
  local, own = _local_ids(i, per, axis[0])
  ids = jnp.where(own, local, per)
  return jax.tree.map(lambda a, r: a.at[ids].set(r, mode="drop"), tree, row)


def population_sum(tree):
  """sum_i over ALL clients of each client-state leaf; sharded, per-device sums of the real
  rows (not the padding) added with psum, so the float addition order differs."""
  axis = _STATE_AXIS.get()
  if axis is None:
    return jax.tree.map(lambda a: jnp.sum(a, axis=0), tree)
  name, _, n = axis

  def total(a):
    real = _start(a.shape[0], name) + jnp.arange(a.shape[0]) < n
    here = jnp.where(rows_like(real, a), a, jnp.zeros_like(a))
    return jax.lax.psum(jnp.sum(here, axis=0), name)

  return jax.tree.map(total, tree)


def population_mean(tree):
  """The mean over ALL clients of each client-state leaf (see `population_sum`)."""
  axis = _STATE_AXIS.get()
  if axis is None:
    return jax.tree.map(lambda a: jnp.mean(a, axis=0), tree)
  return jax.tree.map(lambda s: s / axis[2], population_sum(tree))


def population(tree):
  """The whole [num_clients, ...] population of each leaf on every device (an all-gather
  when sharded): for O(1)-per-client state that a population-wide op needs (top_k)."""
  axis = _STATE_AXIS.get()
  if axis is None:
    return tree
  return jax.tree.map(lambda a: jax.lax.all_gather(a, axis[0], tiled=True)[:axis[2]], tree)


def rows_here(num_clients: int) -> int:
  """Client-state rows each device holds: ``num_clients``, or its share under a sharded
  mesh axis (the engine shards every client state over the axis that splits cohorts)."""
  axis = _CLIENT_AXIS.get()
  return num_clients if axis is None else rows_per_device(num_clients, axis[1])


def rows_per_device(num_clients: int, devices: int) -> int:
  return -(-num_clients // devices)


def own_rows(tree, name: str, size: int):
  """This device's rows [k*per, (k+1)*per) of each [num_clients, ...] leaf, the population
  padded with zero rows to a multiple of ``size`` (inside a manual mesh axis ``name``)."""
  def mine(a):
    per = rows_per_device(a.shape[0], size)
    if per * size != a.shape[0]:
      a = jnp.concatenate([a, jnp.zeros((per * size - a.shape[0],) + a.shape[1:], a.dtype)])
    return jax.lax.dynamic_slice_in_dim(a, _start(per, name), per)
  return jax.tree.map(mine, tree)


def _start(per: int, name: str):
  return jax.lax.axis_index(name) * per


def _local_ids(ids, per: int, name: str):
  """Global client ids as this device's row indices, and whether it holds them."""
  local = ids - _start(per, name)
  return local, (local >= 0) & (local < per)


def _psum(x, name):
  if x.dtype == jnp.bool_:
    return jax.lax.psum(x.astype(jnp.int32), name) > 0
  return jax.lax.psum(x, name)


# (mesh axis name, size) when the engine shards each run's cohort over devices.
_CLIENT_AXIS = contextvars.ContextVar("client_axis", default=None)
# (mesh axis name, size, num_clients) when the client states are sharded over it too.
_STATE_AXIS = contextvars.ContextVar("state_axis", default=None)


@contextlib.contextmanager
def sharded_over(axis_name: str, size: int, num_clients: int | None = None):
  """While tracing under a manual mesh axis, `map_clients` splits cohorts over it; with
  ``num_clients``, every leaf of the client states is held as this device's rows
  [k*per, (k+1)*per), per = ceil(num_clients / size) (zero rows pad the last device), and
  `gather`, `scatter`, `members`, `read_row`, `write_row` and the `population_*`
  reductions work on that shard."""
  sharded = size > 1
  token = _CLIENT_AXIS.set((axis_name, size) if sharded else None)
  state = _STATE_AXIS.set((axis_name, size, num_clients)
                          if sharded and num_clients is not None else None)
  try:
    yield
  finally:
    _STATE_AXIS.reset(state)
    _CLIENT_AXIS.reset(token)


def client_axis():
  """(mesh axis name, size) while tracing under `sharded_over` a split cohort, else None."""
  return _CLIENT_AXIS.get()


def rows_like(flag, a):
  """``flag`` [n, ...] broadcast against ``a`` [n, ..., ...]."""
  return flag.reshape(flag.shape + (1,) * (a.ndim - flag.ndim))
