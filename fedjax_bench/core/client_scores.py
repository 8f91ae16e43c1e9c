"""Every client's loss and accuracy at one model, in one vectorized pass, or a cohort's loss.

Loss-aware aggregation (FedMax, FedSoftMax) and q-FFL weigh clients by these losses, IFCA
picks each client's cluster by them; FedALIGN admits free clients whose score is close to
the priority clients'.
"""

import jax
import jax.numpy as jnp

from fedjax_bench.core import client_map

# Examples a cohort client's loss pass scores at once (`of_cohort`): wide enough to keep
# the forward pass's products efficient, small enough that the padding of a client's last
# chunk (at most COHORT_CHUNK - 1 rows) stays a small part of a client of hundreds.
COHORT_CHUNK = 256


def per_client(task, params) -> tuple[jax.Array, jax.Array]:
  """(F_i(params), accuracy_i) for every client i over all of its training examples.

  One forward pass over the flat example array (chunks of ``task.eval_chunk``), summed
  per client with a segment sum: the cost is one epoch of inference, whatever the cohort.
  Clients without examples get 0. No l2 penalty: the scores compare data fits.
  """
  x, y, rows, owner = task.layout()
  n = x.shape[0] if rows is None else rows.shape[0]
  chunk = min(task.eval_chunk, n)
  pad = (-n) % chunk
  if rows is None:
    x = jnp.concatenate([x, jnp.zeros((pad,) + x.shape[1:], x.dtype)])
    y = jnp.concatenate([y, jnp.zeros(pad, y.dtype)])
    data, read = (x, y), lambda d: d
  else:  # a run's view: gather each chunk's rows when it is scored
    data = (jnp.concatenate([rows, jnp.zeros(pad, rows.dtype)]),)
    read = lambda d: (x[d[0]], y[d[0]])
  owner = jnp.concatenate([owner, jnp.full(pad, task.num_clients, jnp.int32)])
  shape = lambda a: a.reshape((-1, chunk) + a.shape[1:])
  segments = task.num_clients + 1

  def one(batch):
    *d, ob = batch
    xb, yb = read(tuple(d))
    out = task.logits(params, xb)
    loss = task.pointwise_loss(out, yb)
    correct = _correct(task, out, yb)
    return (jax.ops.segment_sum(loss, ob, num_segments=segments),
            jax.ops.segment_sum(correct, ob, num_segments=segments))

  loss_sums, correct_sums = jax.lax.map(one, (*map(shape, data), shape(owner)))
  counts = jnp.maximum(task.counts.astype(jnp.float32), 1.0)
  return (jnp.sum(loss_sums, 0)[:task.num_clients] / counts,
          jnp.sum(correct_sums, 0)[:task.num_clients] / counts)


def minibatch(task, params, key, batch_size: int) -> tuple[jax.Array, jax.Array]:
  """(loss, accuracy) of every client on ``batch_size`` of its examples drawn without
  replacement (all of them when it has fewer), client i's draw from ``fold_in(key, i)``."""
  slots = jnp.arange(task.max_count)
  batch_size = min(batch_size, task.max_count)

  def one(i):
    count = task.counts[i]
    u = jax.random.uniform(jax.random.fold_in(key, i), (task.max_count,))
    pos = jnp.argsort(jnp.where(slots < count, u, 2.0))[:batch_size]
    w = (jnp.arange(batch_size) < count).astype(jnp.float32)
    x, y = task.client_data(i)(jnp.minimum(pos, jnp.maximum(count - 1, 0)))
    out = task.logits(params, x)
    total = jnp.maximum(jnp.sum(w), 1.0)
    return (jnp.sum(w * task.pointwise_loss(out, y)) / total,
            jnp.sum(w * _correct(task, out, y)) / total)

  return jax.vmap(one)(jnp.arange(task.num_clients))


def _correct(task, outputs, y) -> jax.Array:
  if task.loss_type != "cross_entropy":
    return jnp.zeros(y.shape, jnp.float32)
  return (jnp.argmax(outputs, -1) == y).astype(jnp.float32)


def of_cohort(task, params, ids, valid, *, width: int = -1) -> jax.Array:
  """F_i(params) over all of client i's training examples for the cohort rows ``ids``
  ([k]; 0 at rows not ``valid``), each client's examples in chunks of COHORT_CHUNK, as many
  as its own count needs: a round's cost follows the cohort's data, where `per_client`
  scores the whole population's. No l2 penalty, as `per_client`."""
  chunk = max(1, min(COHORT_CHUNK, task.max_count))

  def one(i):
    count = task.counts[i]
    read = task.client_data(i)

    def add(carry):
      j, total = carry
      pos = j * chunk + jnp.arange(chunk)
      x, y = read(jnp.minimum(pos, jnp.maximum(count - 1, 0)))
      w = (pos < count).astype(jnp.float32)
      return j + 1, total + jnp.sum(w * task.pointwise_loss(task.logits(params, x), y))

    chunks = (count + chunk - 1) // chunk
    _, total = jax.lax.while_loop(lambda c: c[0] < chunks, add,
                                  (jnp.zeros((), count.dtype), jnp.zeros((), jnp.float32)))
    return total / jnp.maximum(count, 1).astype(jnp.float32)

  chunks = jnp.maximum((task.counts[ids] + chunk - 1) // chunk, 1)
  return client_map.map_clients(one, ids, work=jnp.where(valid, chunks, 0), width=width)


def cohort_width(task, width: int) -> int:
  """The `of_cohort` width a ``--client_width`` resolves to for ``task``'s model."""
  return client_map.resolve_width(width, client_map.is_convolutional(
      jax.eval_shape(task.init_params, jax.random.PRNGKey(0))))
