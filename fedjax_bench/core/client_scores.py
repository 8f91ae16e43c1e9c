"""Every client's loss and accuracy at one model, in one vectorized pass.

Loss-aware aggregation (FedMax, FedSoftMax) weighs clients by these losses; FedALIGN
admits free clients whose score is close to the priority clients'.
"""

import jax
import jax.numpy as jnp


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


def of_clients(task, params, ids) -> tuple[jax.Array, jax.Array]:
  """(F_i(params), accuracy_i) over all of client i's training examples, for the clients
  ``ids`` only ([k] each): one forward pass over each one's ``max_count`` padded rows, a
  cohort's cost rather than the population's (`per_client`)."""
  slots = jnp.arange(task.max_count)

  def one(i):
    count = task.counts[i]
    x, y = task.client_data(i)(jnp.minimum(slots, jnp.maximum(count - 1, 0)))
    w = (slots < count).astype(jnp.float32)
    out = task.logits(params, x)
    total = jnp.maximum(jnp.sum(w), 1.0)
    return (jnp.sum(w * task.pointwise_loss(out, y)) / total,
            jnp.sum(w * _correct(task, out, y)) / total)

  return jax.vmap(one)(ids)
