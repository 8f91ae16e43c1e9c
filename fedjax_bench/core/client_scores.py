"""Every client's loss and accuracy at one model, in one vectorized pass.

Loss-aware aggregation (spec 003) weighs clients by these losses; FedALIGN (spec 004)
admits free clients whose score is close to the priority clients'.
"""

import jax
import jax.numpy as jnp
import numpy as np


def per_client(task, params) -> tuple[jax.Array, jax.Array]:
  """(F_i(params), accuracy_i) for every client i over all of its training examples.

  One forward pass over the flat example array (chunks of ``task.eval_chunk``), summed
  per client with a segment sum: the cost is one epoch of inference, whatever the cohort.
  Clients without examples get 0. No l2 penalty: the scores compare data fits.
  """
  owner = owners(task)
  n, chunk = task.x.shape[0], min(task.eval_chunk, task.x.shape[0])
  pad = (-n) % chunk
  x = jnp.concatenate([task.x, jnp.zeros((pad,) + task.x.shape[1:], task.x.dtype)])
  y = jnp.concatenate([task.y, jnp.zeros(pad, task.y.dtype)])
  owner = jnp.concatenate([owner, jnp.full(pad, task.num_clients, jnp.int32)])
  shape = lambda a: a.reshape((-1, chunk) + a.shape[1:])
  segments = task.num_clients + 1

  def one(batch):
    xb, yb, ob = batch
    out = task.logits(params, xb)
    loss = task.pointwise_loss(out, yb)
    correct = _correct(task, out, yb)
    return (jax.ops.segment_sum(loss, ob, num_segments=segments),
            jax.ops.segment_sum(correct, ob, num_segments=segments))

  loss_sums, correct_sums = jax.lax.map(one, (shape(x), shape(y), shape(owner)))
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
    idx = task.offsets[i] + jnp.minimum(pos, jnp.maximum(count - 1, 0))
    out = task.logits(params, task.x[idx])
    total = jnp.maximum(jnp.sum(w), 1.0)
    return (jnp.sum(w * task.pointwise_loss(out, task.y[idx])) / total,
            jnp.sum(w * _correct(task, out, task.y[idx])) / total)

  return jax.vmap(one)(jnp.arange(task.num_clients))


def owners(task) -> jax.Array:
  """[num_examples] int32: the client of each row of the flat layout (host-side, static)."""
  counts = np.asarray(task.counts)
  return jnp.asarray(np.repeat(np.arange(len(counts), dtype=np.int32), counts))


def _correct(task, outputs, y) -> jax.Array:
  if task.loss_type != "cross_entropy":
    return jnp.zeros(y.shape, jnp.float32)
  return (jnp.argmax(outputs, -1) == y).astype(jnp.float32)
