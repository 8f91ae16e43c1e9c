"""Local training mapped over a cohort's rows: how many clients train at once, in which
order, and on which device (the engine mesh's "clients" axis, `cohort.sharded_over`).
"""

import jax
import jax.numpy as jnp

from fedjax_bench.core import aggregate
from fedjax_bench.core.cohort import client_axis, rows_like

CPU_CLIENT_WIDTH = 4  # measured best for the MLP on a 2-core CPU (docs/performance.md)


def resolve_width(width: int, convolutional: bool = False) -> int:
  """-1 (auto): CPU_CLIENT_WIDTH on CPU (1 for convolutional models), 0 (the whole cohort
  at once) on GPU and TPU.

  XLA:CPU turns vmapped convolutions with per-client weights into grouped convolutions
  that run slower than one client at a time: a batch-32 step of the MNIST CNN takes
  52 ms alone and 642 ms for 4 clients vmapped (docs/performance.md, "Convolutions on CPU")."""
  if width >= 0:
    return width
  if jax.default_backend() != "cpu":
    return 0
  return 1 if convolutional else CPU_CLIENT_WIDTH


def is_convolutional(params) -> bool:
  """Whether a parameter tree has convolution kernels (leaves of rank >= 4)."""
  return any(len(leaf.shape) >= 4 for leaf in jax.tree.leaves(params))


def map_clients(fn, *args, work: jax.Array, width: int = -1, prepare=None):
  """Maps ``fn`` over the leading (client) axis of ``args``.

  width 0 vmaps the whole cohort; width k runs a loop over chunks of k vmapped
  clients; -1 picks by backend. The numbers agree
  up to float rounding; the speed does not: XLA:CPU runs batched dots slowly and on
  one core, so small widths win there. Under `sharded_over`, each device of the
  axis maps its own slice of the cohort and the results are put together with one
  psum (each row is one device's value plus zeros: exact).

  ``work`` ([clients] int) makes the cost follow the work: a row with work
  0 (a padding row of the cohort slab) is not computed and its outputs are zeros;
  the others run in decreasing order of work, k at a time, in a `lax.while_loop`
  that stops after the last chunk holding work (`_by_work`). A chunk then holds rows
  of similar work (local steps: a vmapped client loop runs to its chunk's longest),
  and the results come back in row order. Under `sharded_over` the rows are dealt
  round-robin in that order, so that every device gets the same share of the work.
  With width 0 the whole cohort is still vmapped (padding rows computed, their
  outputs zeroed): one wide step per local step is what an accelerator wants.

  ``prepare`` (optional) maps a row's ``args`` to a tuple of extra per-row arguments of
  ``fn``, computed vmapped over all the rows at hand before the chunks (under
  `sharded_over`, over this device's rows only: no collective to share them).
  """
  axis = client_axis()
  width = resolve_width(width)
  if axis is None:
    return _busy_chunks(fn, _prepared(prepare, args), width, work)
  n = jax.tree.leaves(args)[0].shape[0]
  rows, mine, my_work = _my_rows(args, work, *axis)
  out = _busy_chunks(fn, _prepared(prepare, mine), width, my_work)
  return jax.lax.psum(_scattered(out, rows, n), axis[0])


def map_clients_sum(fn, weights: jax.Array, *args, work: jax.Array, width: int = -1,
                    prepare=None):
  """`map_clients` for an ``fn`` returning (tree, aux) when only sum_i w_i tree_i of the
  trees is needed: (that sum, stacked aux).

  The sum accumulates chunk by chunk, so the [clients, ...] stack of trees is never
  written (for FedAvg on the MLP that stack and its all-gather over devices were a
  fifth of a round on CPU); under `sharded_over`, each device sums its own clients and
  one psum adds the partial sums and puts the aux rows together. It equals
  `weighted_sum` of `map_clients`'s trees up to the order of float additions. Rows of
  work 0 add nothing and their aux is zeros (`map_clients`).
  """
  axis = client_axis()
  width = resolve_width(width)
  if axis is None:
    return _busy_chunks(fn, _prepared(prepare, args), width, work, weights)
  n = weights.shape[0]
  rows, (my_weights, mine), my_work = _my_rows((weights, args), work, *axis)
  my_weights = jnp.where(rows < n, my_weights, 0)
  total, aux = _busy_chunks(fn, _prepared(prepare, mine), width, my_work, my_weights)
  return jax.lax.psum((total, _scattered(aux, rows, n)), axis[0])


def _prepared(prepare, args):
  return args if prepare is None else (*args, *jax.vmap(prepare)(*args))


def _my_rows(args, work, name: str, size: int):
  """This device's rows of the leading axis of ``args``: their indices (n for filler
  past the last row), the rows (filler repeats row n-1) and their work (0 at filler).
  The rows in `_by_work` order are dealt round-robin: device d holds ranks d,
  d + size, d + 2 size, ... so every device gets about the same share of the work."""
  n = jax.tree.leaves(args)[0].shape[0]
  per = -(-n // size)
  d = jax.lax.axis_index(name)
  ranked = jnp.concatenate([_by_work(work), jnp.full(per * size - n, n, jnp.int32)])
  rows = ranked[jnp.arange(per) * size + d]
  rows = jnp.where(rows < n, rows, n)
  taken = jnp.minimum(rows, n - 1)
  mine = jax.tree.map(lambda a: a[taken], args)
  my_work = jnp.where(rows < n, work[taken], 0)
  return rows, mine, my_work


def _scattered(out, rows: jax.Array, n: int):
  """This device's per-row results at their ``rows`` of [n, ...] zeros (filler dropped)."""
  return jax.tree.map(
      lambda o: jnp.zeros((n,) + o.shape[1:], o.dtype).at[rows].set(o, mode="drop"), out)


def _by_work(work: jax.Array) -> jax.Array:
  """Row indices in decreasing order of work, ties in row order (stable): for a slab
  with valid rows first and equal work, the identity."""
  return jnp.argsort(-work, stable=True)


def _busy_chunks(fn, args, width: int, work, weights=None):
  """`map_clients` (``weights`` None) or `map_clients_sum` on one device's rows, computing
  only the rows with work > 0: chunks of ``width`` rows in `_by_work` order, in a while
  loop that stops after the last chunk holding work (under a vmap over runs it runs until
  every run is done). A chunk's results are written to their rows in the loop, so nothing is stored
  in sorted order; rows without work keep zeros and add nothing to the sum."""
  n = work.shape[0]
  live = work > 0
  shapes = jax.eval_shape(fn, *jax.tree.map(lambda a: a[0], args))
  stacked_shapes = shapes if weights is None else shapes[1]
  zeros = lambda s, lead=(): jnp.zeros(lead + s.shape, s.dtype)
  if weights is not None:
    weights = jnp.where(live, weights, 0)
  if width == 0:  # the whole cohort vmapped; rows without work computed, then zeroed
    out = jax.vmap(fn)(*args)
    if weights is not None:
      total = aggregate.weighted_sum(out[0], weights)
    stacked = jax.tree.map(lambda o: jnp.where(rows_like(live, o), o, 0),
                           out if weights is None else out[1])
    return stacked if weights is None else (total, stacked)

  k = min(width, n)
  if 1 < k < n <= 2 * k:
    # One vmapped chunk of n rows rather than two of k, the second mostly repeats: W1 with
    # 10 clients a round over 2 devices (5 rows each), 0.86 ms a round against 1.14 ms.
    k = n
  order = _by_work(work)
  busy_chunks = (jnp.sum(live) + k - 1) // k

  def mapped(rows):  # one client at a time without a size-1 vmap (see engine.over_runs)
    chunk_args = jax.tree.map(lambda a: a[rows], args)
    if k > 1:
      return jax.vmap(fn)(*chunk_args)
    return jax.tree.map(lambda o: o[None], fn(*jax.tree.map(lambda a: a[0], chunk_args)))

  def body(carry):
    j, total, stack = carry
    slots = j * k + jnp.arange(k)
    rows = order[jnp.minimum(slots, n - 1)]
    keep = (slots < n) & live[rows]
    # The rest of the last chunk repeats its first row (which has work): a padding row
    # would cost its own work (a client's steps) for nothing.
    out = mapped(jnp.where(keep, rows, rows[0]))
    if weights is not None:
      tree, out = out
      total = jax.tree.map(jnp.add, total,
                           aggregate.weighted_sum(tree, jnp.where(keep, weights[rows], 0)))
    dest = jnp.where(keep, rows, n)  # past the end: dropped
    stack = jax.tree.map(lambda s, o: s.at[dest].set(o, mode="drop"), stack, out)
    return j + 1, total, stack

  total = () if weights is None else jax.tree.map(zeros, shapes[0])
  stack = jax.tree.map(lambda s: zeros(s, (n,)), stacked_shapes)
  _, total, stack = jax.lax.while_loop(lambda c: c[0] < busy_chunks, body,
                                       (jnp.zeros((), jnp.int32), total, stack))
  return stack if weights is None else (total, stack)
