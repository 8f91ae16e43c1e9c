"""Each client's local optimum F_i* = min F_i, estimated by training the client alone
("estimate"; not in the FedSoftMax paper, docs/papers/hetero_agg.md).

Loss-aware weights read the gap ℓ_i = F_i(w_t) − F_i*. The paper never says how F_i* was
obtained; ``--local_optimum=zero`` (the default) takes F_i* = 0. With ``estimate`` the
algorithm's init calls `estimate` once per run, before round 1: every client trains alone
from the run's initial model w_0 for ``steps`` steps of the client optimizer (--client_opt,
SGD by default) on its own examples (minibatches as in local training, `local.train`), all
clients at once (vmapped), and F̂_i* is the lower of its full local loss after training and
at w_0 (an upper bound of F_i*; a diverged client keeps its loss at w_0). The loss is the
one ℓ reads (`client_scores.per_client`): the plain data fit, in evaluation mode, without
the l2 penalty.

Keys: the init key's "local_optimum" purpose (`keys.for_purpose`), then one key per client (`keys.per_client`), whose "local_sampling"
sub-purpose draws that client's minibatches. The rounds' keys are untouched.

Not cached on disk, unlike f* (task/optimum.py): with --data_per_seed a run's partition
reaches the algorithm only as a traced view inside the engine's program, so the estimate
is computed there, once per run, from that run's own data.
"""

import jax
import jax.numpy as jnp
import optax

from fedjax_bench.core import keys, local

EVAL_BATCH = 10  # clients scored at once (each over all of its examples)


def key_of(init_key: jax.Array) -> jax.Array:
  """The estimate's key under a run's init key."""
  return keys.for_purpose(init_key, "local_optimum")


def estimate(task, params, key, *, steps: int, lr, batch_size: int,
             sampling: str = "shuffle", opt: optax.GradientTransformation = None) -> jax.Array:
  """[num_clients] F̂_i*: client i trained alone from ``params`` for ``steps`` steps of
  ``opt`` (default SGD at rate ``lr``; the algorithm passes its client optimizer), the lower
  of its full local loss after them and at ``params``."""
  spec = local.LocalSpec(steps, batch_size, sampling)

  def fit(p, x, y, w, rng):
    del rng  # evaluation mode: the loss ℓ reads
    per_example = task.pointwise_loss(task.logits(p, x), y)
    return jnp.sum(w * per_example) / jnp.maximum(jnp.sum(w), 1e-12)

  def train(i, k):
    trained, _ = local.train(params, k, task.counts[i], steps, fetch=task.client_data(i),
                             loss_fn=fit, opt=opt or optax.sgd(lr), spec=spec,
                             max_count=task.max_count)
    return trained

  ids = jnp.arange(task.num_clients)
  trained = jax.vmap(train)(ids, keys.per_client(key, ids))
  after = jax.lax.map(lambda a: own_loss(task, a[1], a[0]), (ids, trained),
                      batch_size=EVAL_BATCH)
  before = jax.lax.map(lambda i: own_loss(task, params, i), ids, batch_size=EVAL_BATCH)
  return jnp.fmin(after, before)


def own_loss(task, params, i) -> jax.Array:
  """F_i(params): client i's mean loss over all of its examples (0 without any)."""
  count = task.counts[i]
  pos = jnp.arange(task.max_count)
  x, y = task.client_data(i)(jnp.minimum(pos, jnp.maximum(count - 1, 0)))
  w = (pos < count).astype(jnp.float32)
  per_example = task.pointwise_loss(task.logits(params, x), y)
  return jnp.sum(w * per_example) / jnp.maximum(count, 1).astype(jnp.float32)
