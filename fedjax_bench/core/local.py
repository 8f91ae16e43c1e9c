"""Local training: up to ``max_steps`` optimizer steps in a lax.scan, one client's view.

Vmap ``train`` over a cohort. A client stops after its own ``num_steps`` (the step
mask carries computational heterogeneity). Minibatches come from the client's own
examples, either uniformly with replacement or as shuffled epochs: every epoch is a
fresh permutation, visited in batches, the last batch of an epoch partial
(drop_remainder=False), padding rows weighted 0.
"""

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax

from fedjax_bench.core import cohort, keys

SAMPLINGS = ("shuffle", "replacement")


class LocalSpec(NamedTuple):
  max_steps: int        # static scan length
  batch_size: int
  sampling: str = "shuffle"


def batch_positions(key, step, count, perm, *, batch_size: int, sampling: str):
  """Positions in [0, count) of local step ``step``'s examples, their weights, and ``perm``.

  For shuffled epochs, ``perm`` ([max_count] int32, start from ``arange``) carries an
  incremental Fisher-Yates shuffle: step b of an epoch fixes slots b*B..b*B+B-1 of a
  uniformly random permutation of [0, count), an O(B) cost instead of a sort per step.
  Starting each epoch from the previous epoch's order keeps every epoch uniform.
  """
  count = jnp.asarray(count, jnp.int32)
  step_key = jax.random.fold_in(key, step)
  if sampling == "replacement":
    pos = jax.random.randint(step_key, (batch_size,), 0, jnp.maximum(count, 1))
    return pos, jnp.broadcast_to(count > 0, (batch_size,)).astype(jnp.float32), perm
  if sampling != "shuffle":
    raise ValueError(f"unknown sampling {sampling!r}; valid: {', '.join(SAMPLINGS)}")
  steps_per_epoch = jnp.maximum((count + batch_size - 1) // batch_size, 1)
  slots = (step % steps_per_epoch) * batch_size + jnp.arange(batch_size)
  valid = slots < count
  u = jax.random.uniform(step_key, (batch_size,))
  swaps = jnp.minimum(slots + (u * (count - slots)).astype(jnp.int32), count - 1)

  def swap(j, perm):
    a, b = slots[j], swaps[j]
    pa, pb = perm[a], perm[b]
    return jnp.where(valid[j], perm.at[a].set(pb).at[b].set(pa), perm)

  perm = jax.lax.fori_loop(0, batch_size, swap, perm)
  pos = perm[jnp.clip(slots, 0, jnp.maximum(count - 1, 0))]
  return pos, valid.astype(jnp.float32), perm


def train(params, key, count, num_steps, *, fetch: Callable, loss_fn: Callable,
          opt: optax.GradientTransformation, spec: LocalSpec, max_count: int):
  """Runs one client's local steps; returns (new params, mean loss over its steps).

  ``fetch(positions) -> (x, y)`` reads the client's examples at positions in [0, count)
  (`Task.client_data`: rows of the flat arrays, or examples generated on demand).

  ``loss_fn(params, xb, yb, wb, rng)`` is the weighted minibatch loss in training mode
  (``rng`` drives augmentation and dropout; `Task.loss`); algorithms that add terms (a
  proximal term, say) pass their own.
  """
  noise_key = keys.for_purpose(key, "local_noise")
  grad_fn = jax.value_and_grad(loss_fn)

  def step(carry, s):
    p, opt_state, loss_sum, perm = carry
    pos, w, perm = batch_positions(key, s, count, perm, batch_size=spec.batch_size,
                                   sampling=spec.sampling)
    xb, yb = fetch(pos)
    loss, g = grad_fn(p, xb, yb, w, jax.random.fold_in(noise_key, s))
    updates, new_opt_state = opt.update(g, opt_state, p)
    new_p = optax.apply_updates(p, updates)
    active = s < num_steps
    keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(active, a, b), new, old)
    return (keep(new_p, p), keep(new_opt_state, opt_state),
            loss_sum + jnp.where(active, loss, 0.0), perm), None

  perm = jnp.arange(max_count if spec.sampling == "shuffle" else 1, dtype=jnp.int32)
  init = (params, opt.init(params), jnp.zeros((), jnp.float32), perm)
  (params, _, loss_sum, _), _ = jax.lax.scan(step, init, jnp.arange(spec.max_steps))
  return params, loss_sum / jnp.maximum(num_steps, 1)


def train_cohort(task, world, params, ids, key, *, opt: optax.GradientTransformation,
                 batch_size: int, sampling: str = "shuffle", width: int = -1,
                 loss_fn: Optional[Callable] = None, per_client_start: bool = False,
                 loss_scale: Optional[jax.Array] = None):
  """Local training of the cohort ``ids``, each client with its own key and its world
  step budget: (deltas x_i - start_i [cap, ...], mean losses [cap]).

  Every client starts from ``params``, or with ``per_client_start`` from its own row
  of ``params`` (a [cap, ...] pytree, e.g. FedAWE's stored local models).
  ``loss_fn`` defaults to ``task.loss``; ``width`` is ``cohort.map_clients``'s.
  ``loss_scale`` ([num_clients], optional) multiplies client i's loss by
  ``loss_scale[i]`` (the reported losses are the scaled ones).
  """
  spec = LocalSpec(world.max_steps, batch_size, sampling)
  loss_fn = loss_fn or task.loss
  if width == -1:
    shapes = jax.eval_shape(task.init_params, jax.random.PRNGKey(0))
    width = cohort.resolve_width(-1, cohort.is_convolutional(shapes))

  def one(i, k, start):
    fn = loss_fn
    if loss_scale is not None:
      fn = lambda *args: loss_scale[i] * loss_fn(*args)
    new, loss = train(start, k, task.counts[i], world.client_steps[i],
                      fetch=task.client_data(i), loss_fn=fn, opt=opt, spec=spec,
                      max_count=task.max_count)
    return jax.tree.map(jnp.subtract, new, start), loss

  client_keys = keys.per_client(keys.for_purpose(key, "local_train"), ids)
  if per_client_start:
    return cohort.map_clients(one, ids, client_keys, params, width=width)
  return cohort.map_clients(lambda i, k: one(i, k, params), ids, client_keys, width=width)
