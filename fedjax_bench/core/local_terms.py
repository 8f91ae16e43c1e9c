"""Terms that algorithms add to a client's local objective, for `local.train_cohort`'s
``loss_fn``.

Each term changes the gradient, not the reported loss: it is added as
``term - stop_gradient(term)``, which is exactly 0 in value, so a client's loss metric
stays its data loss F_i whatever the algorithm adds to h_i.
"""

import jax
import jax.numpy as jnp
import optax


def _gradient_only(term):
  return term - jax.lax.stop_gradient(term)


def proximal(loss_fn, anchor, mu):
  """h(v) = loss_fn(v) + mu/2 ||v - anchor||^2 (FedProx's h_k, Ditto's personal
  objective). ``mu`` may be traced (a grid's value); a Python 0 gives ``loss_fn`` itself."""
  if isinstance(mu, (int, float)) and not mu:
    return loss_fn

  def h(v, xb, yb, wb, rng):
    prox = 0.5 * mu * optax.tree.norm(optax.tree.sub(v, anchor), squared=True)
    return loss_fn(v, xb, yb, wb, rng) + _gradient_only(prox)

  return h


def corrected(loss_fn):
  """For a per-client gradient correction v_i (SCAFFOLD's c - c_i, FedDyn's linear
  term): local training runs on the pair (w, v), started per client from (x, v_i)
  (`local.train_cohort`'s ``per_client_start``), on h((w, v)) = loss_fn(w) + <v, w> with
  v held constant (stop_gradient): the gradient in w is grad loss_fn(w) + v_i and in v
  exactly 0, so SGD leaves v_i as it was and its delta is 0."""
  def h(packed, xb, yb, wb, rng):
    w, v = packed
    linear = sum(jnp.vdot(jax.lax.stop_gradient(a), b)
                 for a, b in zip(jax.tree.leaves(v), jax.tree.leaves(w)))
    return loss_fn(w, xb, yb, wb, rng) + _gradient_only(linear)

  return h


def pair_start(params, v):
  """`corrected`'s per-client start: (``params`` repeated for each of v's rows, v)."""
  rows = jax.tree.leaves(v)[0].shape[0]
  return jax.tree.map(lambda a: jnp.broadcast_to(a, (rows,) + a.shape), params), v


def with_gradient(value, params, grad):
  """A scalar equal to ``value`` whose gradient in ``params`` is ``grad`` (a tree like
  ``params``), both held constant: for a local step that a method defines by its update
  direction rather than by a loss (pFedMe's Moreau envelope gradient, Per-FedAvg's
  meta-gradient), so that the client optimizer steps along it. The gradient is ``grad``
  exactly (the transpose of <grad, params> in params is 1 * grad)."""
  linear = sum(jnp.vdot(jax.lax.stop_gradient(g), p)
               for g, p in zip(jax.tree.leaves(grad), jax.tree.leaves(params)))
  return jax.lax.stop_gradient(value) + _gradient_only(linear)
