"""Local training: a client's own ``num_steps`` optimizer steps (at most ``max_steps``)
in a lax.while_loop, one client's view.

Vmap ``train`` over a cohort: vmapped, the loop runs to the largest ``num_steps`` of
the clients at hand and holds the others' state after their own (computational
heterogeneity); `train_cohort` trains clients of similar step counts together. Minibatches come from the client's own
examples, either uniformly with replacement or as shuffled epochs: every epoch is a
fresh permutation, visited in batches. With "shuffle" the last batch of an epoch is
partial (drop_remainder=False), padding rows weighted 0; with "shuffle_drop_last" an
epoch is floor(count/B) full batches and the rest of the permutation is left out, as a
PyTorch DataLoader with drop_last=True (a client with fewer than B examples uses all of
them, one partial batch an epoch).

A client's key (`keys.per_client` of the round's "local_train" key) has two sub-purposes:
"local_sampling" (step s's minibatch draws from its fold with s) and "local_noise" (step
s's augmentation and dropout from its fold with s).
"""

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax

from fedjax_bench.core import client_map, keys, parts
from fedjax_bench.core import swaps as swaps_lib
from fedjax_bench.errors import UsageError
from fedjax_bench.settings import DECAY, NON_NEGATIVE, POSITIVE, at_least, section, setting

SAMPLINGS = ("shuffle", "shuffle_drop_last", "replacement")
CLIENT_OPTS = ("sgd", "momentum", "adam", "adamw")
# Bytes of minibatches read ahead of local training, over all clients trained at once.
GATHER_BUDGET = 64 << 20


@section("local training")
class LocalTraining:
  local_steps: int = setting(10, "Local optimizer steps per round.", check=POSITIVE)
  local_epochs: float = setting(0.0, "If > 0, each client runs this many epochs of ceil(n_i / "
                                "batch_size) steps (floor, at least 1, with --sampling="
                                "shuffle_drop_last) instead of --local_steps.", check=NON_NEGATIVE)
  batch_size: int = setting(32, "Local minibatch size.", check=POSITIVE)
  sampling: str = setting("shuffle", "Local minibatches: shuffled epochs with a partial last "
                          "batch (shuffle), shuffled epochs of full batches only, the remainder "
                          "dropped as PyTorch's drop_last=True (shuffle_drop_last; the FedAWE "
                          "and FedALIGN authors' code), or uniform with replacement.",
                          choices=SAMPLINGS)
  client_lr: float = setting(0.1, "Client learning rate: the step size of --client_opt (eta_0 "
                             "of a schedule).",
                             check=POSITIVE, sweep=True)
  client_width: int = setting(-1, "Clients trained at once (vmapped) per step of a loop over "
                              "the cohort: 0 = the whole cohort, -1 = auto (4 on CPU, 0 on "
                              "GPU/TPU). Changes speed, not results.", check=at_least(-1))
  fused_logreg: bool = setting(True, "On a CPU, train logistic regression with plain "
                               "--client_opt=sgd by a fused C++ kernel, all of a client's "
                               "local steps in one call (built on first use with the "
                               "machine's C++ compiler; without one, XLA's loop runs). The "
                               "same gradient and update with sums in another order: results "
                               "agree with XLA's loop to float rounding. false: XLA's loop.")


_ADAM = lambda hp: hp.client_opt in ("adam", "adamw")


@section("local training")
class ClientOptimizer:
  """The optimizer of every client's local steps, built from optax. It is made afresh for
  each local run, so its state (momentum, moments, Adam's step count) starts at zero every
  round, as the client optimizer of FedOpt (Reddi et al., ICLR 2021, Algorithm 1's ClientOpt).

    sgd       w <- w - lr g
    momentum  m <- g + beta m;  w <- w - lr m                (heavy ball, optax.sgd's trace)
    adam      Kingma & Ba (ICLR 2015), Algorithm 1: bias-corrected moments, eps outside the
              square root (optax.adam)
    adamw     Loshchilov & Hutter (ICLR 2019), Algorithm 2: adam plus the decoupled decay
              lr * wd * w, the paper's lambda = lr * wd (optax.adamw, torch.optim.AdamW)
  with g the minibatch gradient of the client's local objective (an algorithm's terms
  included), first clipped to global L2 norm --client_grad_clip when that is > 0
  (optax.clip_by_global_norm)."""
  client_opt: str = setting("sgd", "Client optimizer of local training (optax; its state starts "
                            "at zero every round): sgd; momentum (heavy ball, "
                            "--client_momentum); adam (Kingma & Ba 2015); adamw (Loshchilov & "
                            "Hutter 2019, --client_weight_decay).", choices=CLIENT_OPTS)
  # A beta of 1 freezes its average (Adam's bias correction divides by 1 - beta^t); an eps
  # of 0 divides 0 by 0 where a coordinate's gradients are all 0.
  client_momentum: float = setting(0.9, "Momentum beta of --client_opt=momentum: m = g + beta "
                                   "m, step -lr m (0 is sgd).", sweep=True, check=DECAY,
                                   used_if=lambda hp: hp.client_opt == "momentum")
  client_beta1: float = setting(0.9, "beta1 of --client_opt=adam/adamw.", sweep=True,
                                check=DECAY, used_if=_ADAM)
  client_beta2: float = setting(0.999, "beta2 of --client_opt=adam/adamw.", sweep=True,
                                check=DECAY, used_if=_ADAM)
  client_eps: float = setting(1e-8, "epsilon of --client_opt=adam/adamw, outside the square "
                              "root (Kingma & Ba's).", sweep=True, check=POSITIVE,
                              used_if=_ADAM)
  client_weight_decay: float = setting(1e-4, "Decoupled weight decay of --client_opt=adamw, as "
                                       "optax and PyTorch take it: a step also subtracts lr * "
                                       "this * w (the paper's lambda = lr * this; optax's "
                                       "default). L2 in the loss: --l2.", sweep=True,
                                       check=NON_NEGATIVE,
                                       used_if=lambda hp: hp.client_opt == "adamw")
  client_grad_clip: float = setting(0.0, "Clip each local gradient to this global L2 norm "
                                    "before the client optimizer (0: off).",
                                    check=NON_NEGATIVE)

  def client_optimizer(self, lr) -> optax.GradientTransformation:
    """--client_opt at step size ``lr`` (traced or not), after --client_grad_clip. sgd is
    ``optax.sgd(lr)`` itself, the program every run made before --client_opt existed."""
    return client_optimizer(self.client_opt, lr, momentum=self.client_momentum,
                            b1=self.client_beta1, b2=self.client_beta2, eps=self.client_eps,
                            weight_decay=self.client_weight_decay,
                            clip=self.client_grad_clip)

  def require_sgd(self, algo: str, why: str) -> None:
    """Refuses a client optimizer other than plain SGD for a method whose update reads the
    SGD steps themselves (``why``: what of its paper does)."""
    if self.client_opt != "sgd" or self.client_grad_clip:
      given = (f"--client_opt={self.client_opt}" if self.client_opt != "sgd"
               else f"--client_grad_clip={self.client_grad_clip:g}")
      raise UsageError(f"{given} is not valid for --algo={algo}: {why}; valid: --client_opt=sgd "
                       "without --client_grad_clip")


def client_optimizer(name: str, lr, *, momentum=0.9, b1=0.9, b2=0.999, eps=1e-8,
                     weight_decay=1e-4, clip=0.0) -> optax.GradientTransformation:
  """The client optimizer ``name`` (`CLIENT_OPTS`, `ClientOptimizer`) at step size ``lr``;
  with ``clip`` > 0 each gradient is first clipped to that global L2 norm."""
  if name == "sgd":
    opt = optax.sgd(lr)
  elif name == "momentum":
    opt = optax.sgd(lr, momentum=momentum)
  elif name == "adam":
    opt = optax.adam(lr, b1=b1, b2=b2, eps=eps)
  elif name == "adamw":
    opt = optax.adamw(lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)
  else:
    raise UsageError(f"unknown --client_opt={name!r}; valid: {', '.join(CLIENT_OPTS)}")
  if clip:  # 0 (off) adds nothing to the program
    opt = optax.chain(optax.clip_by_global_norm(clip), opt)
  return opt


class LocalSpec(NamedTuple):
  max_steps: int        # static bound on num_steps (the minibatch draws' length)
  batch_size: int
  sampling: str = "shuffle"


def batch_positions(key, step, count, perm, *, batch_size: int, sampling: str, u=None):
  """Positions in [0, count) of local step ``step``'s examples, their weights, and ``perm``.

  ``key`` is the client's "local_sampling" key. For shuffled epochs, ``perm`` ([max_count]
  int32, start from ``arange``) carries an incremental Fisher-Yates shuffle: step b of an
  epoch fixes slots b*B..b*B+B-1 of a uniformly random permutation of [0, count), an O(B)
  cost instead of a sort per step. Starting each epoch from the previous epoch's order
  keeps every epoch uniform (a Fisher-Yates prefix is uniform from any starting order,
  which also makes the dropped remainder's epochs uniform).
  """
  count = jnp.asarray(count, jnp.int32)
  step_key = jax.random.fold_in(key, step)
  if sampling == "replacement":
    pos = jax.random.randint(step_key, (batch_size,), 0, jnp.maximum(count, 1))
    return pos, jnp.broadcast_to(count > 0, (batch_size,)).astype(jnp.float32), perm
  if sampling == "shuffle":
    steps_per_epoch = jnp.maximum((count + batch_size - 1) // batch_size, 1)
  elif sampling == "shuffle_drop_last":
    steps_per_epoch = jnp.maximum(count // batch_size, 1)
  else:
    raise ValueError(f"unknown sampling {sampling!r}; valid: {', '.join(SAMPLINGS)}")
  slots = (step % steps_per_epoch) * batch_size + jnp.arange(batch_size)
  valid = slots < count
  if u is None:  # the step's uniforms, unless drawn already (`step_positions`)
    u = jax.random.uniform(step_key, (batch_size,))
  swaps = jnp.minimum(slots + (u * (count - slots)).astype(jnp.int32), count - 1)
  # Invalid slots swap entry 0 with itself: a no-op without a select over all of perm.
  slots_in = jnp.where(valid, slots, 0)
  swaps = jnp.where(valid, swaps, 0)

  if batch_size <= swaps_lib.MAX_PARALLEL:  # the same swaps, resolved in parallel
    perm = swaps_lib.apply(perm, slots_in, swaps, valid)
  else:
    def swap(j, perm):
      a, b = slots_in[j], swaps[j]
      pa, pb = perm[a], perm[b]
      return perm.at[a].set(pb).at[b].set(pa)

    perm = jax.lax.fori_loop(0, batch_size, swap, perm)
  pos = perm[jnp.clip(slots, 0, jnp.maximum(count - 1, 0))]
  return pos, valid.astype(jnp.float32), perm


def positions_bytes(num_clients: int, spec: LocalSpec) -> int:
  """Bytes of `step_positions` (int32 positions and float32 weights) for ``num_clients``."""
  return num_clients * spec.max_steps * spec.batch_size * 8


def step_positions(key, count, *, spec: LocalSpec, max_count: int):
  """([max_steps, B] positions, [max_steps, B] weights) of every local step of the client
  whose key is ``key``: the draws `batch_positions` makes step by step, made before
  training (vectorized over steps with replacement), so the training scan carries no
  sampling state."""
  key = keys.for_purpose(key, "local_sampling")
  steps = jnp.arange(spec.max_steps)
  if spec.sampling == "replacement":
    pos, w, _ = jax.vmap(lambda s: batch_positions(
        key, s, count, None, batch_size=spec.batch_size, sampling=spec.sampling))(steps)
    return pos, w

  # Every step's uniforms in one vectorized draw, the same numbers as step by step: on CPU
  # each threefry call is a small while loop, and 2 of them a step in the scan were most
  # of the draws' time.
  us = jax.vmap(lambda s: jax.random.uniform(jax.random.fold_in(key, s),
                                             (spec.batch_size,)))(steps)

  def step(perm, xs):
    s, u = xs
    pos, w, perm = batch_positions(key, s, count, perm, batch_size=spec.batch_size,
                                   sampling=spec.sampling, u=u)
    return perm, (pos, w)

  _, (pos, w) = jax.lax.scan(step, jnp.arange(max_count, dtype=jnp.int32), (steps, us))
  return pos, w


def train(params, key, count, num_steps, *, fetch: Callable, loss_fn: Callable,
          opt: optax.GradientTransformation, spec: LocalSpec, max_count: int,
          gather_limit: int = 0, positions=None, update_state: Optional[Callable] = None,
          sgd_kernel: Optional[Callable] = None, sgd_lr=None):
  """Runs one client's local steps; returns (new params, mean loss over its steps).

  ``fetch(positions) -> (x, y)`` reads the client's examples at positions in [0, count)
  (`Task.client_data`: rows of the flat arrays, or examples generated on demand).

  ``loss_fn(params, xb, yb, wb, rng)`` is the weighted minibatch loss in training mode
  (``rng`` drives augmentation and dropout; `Task.loss`); algorithms that add terms (a
  proximal term, say) pass their own.

  When all of the client's minibatches take at most ``gather_limit`` bytes, they are
  read in one gather before the scan (fewer, larger ops: 1.2x faster steps for
  logistic regression on CPU); otherwise each step reads its own. The numbers are the
  same either way. ``positions``: this client's `step_positions`, when drawn already.

  ``update_state(params, new_params, xb, wb, rng) -> new_params`` (a batch-norm model's
  `Task.update_state`) sets what a step changes besides the optimizer's update: the
  running statistics of the step's forward pass.

  ``sgd_kernel(x_dtype)`` (`Task.sgd_kernel`, with ``sgd_lr``: ``opt`` is optax.sgd at
  that step size) may give a fused kernel that runs all of the read-ahead steps in one
  call instead of the loop; where it gives None, or the minibatches are not read ahead,
  the loop runs.
  """
  noise_key = keys.for_purpose(key, "local_noise")
  grad_fn = jax.value_and_grad(loss_fn)
  pos, w = positions or step_positions(key, count, spec=spec, max_count=max_count)
  flat = pos.reshape(-1)
  shapes = jax.eval_shape(fetch, flat)
  read_ahead = sum(a.size * a.dtype.itemsize for a in jax.tree.leaves(shapes)) <= gather_limit
  if read_ahead:
    batches = jax.tree.map(lambda a: a.reshape(pos.shape + a.shape[1:]), fetch(flat))
  else:
    batches = pos
  fused = sgd_kernel(batches[0].dtype) if sgd_kernel is not None and read_ahead else None
  if fused is not None:
    new, loss_sum = fused(params, *batches, w, jnp.minimum(num_steps, spec.max_steps), sgd_lr)
    return new, loss_sum / jnp.maximum(num_steps, 1)

  def step(carry):
    s, p, opt_state, loss_sum = carry
    wb = w[s]
    xb, yb = jax.tree.map(lambda a: a[s], batches) if read_ahead else fetch(batches[s])
    rng = jax.random.fold_in(noise_key, s)
    loss, g = grad_fn(p, xb, yb, wb, rng)
    updates, opt_state = opt.update(g, opt_state, p)
    new = optax.apply_updates(p, updates)
    if update_state is not None:
      new = update_state(p, new, xb, wb, rng)
    return s + 1, new, opt_state, loss_sum + loss

  # A while loop, not a scan of max_steps masked steps: a client costs its own steps
  # (vmapped over clients it runs to their largest num_steps, the others' state held).
  steps = jnp.minimum(num_steps, spec.max_steps)
  init = (jnp.zeros((), jnp.int32), params, opt.init(params), jnp.zeros((), jnp.float32))
  _, params, _, loss_sum = jax.lax.while_loop(lambda c: c[0] < steps, step, init)
  return params, loss_sum / jnp.maximum(num_steps, 1)


def train_cohort(task, world, params, ids, key, *, opt: optax.GradientTransformation,
                 batch_size: int, sampling: str = "shuffle", width: int = -1,
                 loss_fn: Optional[Callable] = None, per_client_start: bool = False,
                 loss_scale: Optional[jax.Array] = None,
                 sum_weights: Optional[jax.Array] = None,
                 valid: Optional[jax.Array] = None,
                 transform: Optional[Callable] = None,
                 keep: Optional[Callable] = None,
                 client_loss: Optional[Callable] = None, sgd_lr=None):
  """Local training of the cohort ``ids``, each client with its own key and its world
  step budget: (deltas x_i - start_i [cap, ...], mean losses [cap]).

  Every client starts from ``params``, or with ``per_client_start`` from its own row
  of ``params`` (a [cap, ...] pytree, e.g. FedAWE's stored local models).
  ``loss_fn`` defaults to ``task.loss``; ``width`` is ``client_map.map_clients``'s.
  ``loss_scale`` ([num_clients], optional) multiplies client i's loss by
  ``loss_scale[i]`` (the reported losses are the scaled ones). ``client_loss(i) ->
  loss_fn`` (optional, instead of ``loss_fn``) is client i's own objective, for a method
  whose local objective reads a value of the client's (FedRep's body steps: its head).
  The parameters of a batch-norm model (`parts.has_state`) carry their running
  statistics, which every step updates (`Task.update_state`).

  With ``sum_weights`` ([cap]) it returns (sum_i w_i delta_i, mean losses [cap]) instead,
  never holding every client's delta at once (`client_map.map_clients_sum`).

  ``sgd_lr``: ``opt`` is plain optax.sgd at this step size, so the task's fused kernel
  (`Task.sgd_kernel`) may train the clients instead of the loop (`train`), when they
  minimize the task's own loss.

  ``valid`` ([cap] bool, optional) marks the slab's real rows: the padding rows are not
  trained, their deltas and losses are zeros and they add nothing to the sum.
  ``transform(i, delta) -> delta`` (optional) changes client i's delta before anything
  sums it (DP-FedAvg's clipping). ``keep(i, delta) -> tree`` (optional) is a per-client
  value of client i's delta (before ``transform``), returned stacked [cap, ...] as a third
  result (zeros for padding rows): what an algorithm needs of each client beside the
  streamed sum (SCAFFOLD's control variates, q-FFL's ||Delta w_k||^2). The
  clients train in decreasing order of their step budgets (`client_map.map_clients`'s
  ``work``), so a chunk of vmapped clients runs about its own clients' steps; the
  results come back in cohort order.
  """
  spec = LocalSpec(world.max_steps, batch_size, sampling)
  own_loss = loss_fn is None
  loss_fn = loss_fn or task.loss
  if width == -1:
    shapes = jax.eval_shape(task.init_params, jax.random.PRNGKey(0))
    width = client_map.resolve_width(-1, client_map.is_convolutional(shapes))
  at_once = width or ids.shape[0]
  client_keys = keys.per_client(keys.for_purpose(key, "local_train"), ids)
  # The cohort's minibatch positions in one vmap (`map_clients`'s prepare: under
  # `sharded_over`, each device draws its own rows') when they fit the budget: the
  # shuffle's small sequential steps then run once for all clients, not once per chunk.
  # Otherwise each client draws its own inside `train`.
  prepare = None
  if positions_bytes(ids.shape[0], spec) <= GATHER_BUDGET:
    prepare = lambda i, k, *_: step_positions(k, task.counts[i], spec=spec,
                                              max_count=task.max_count)

  update = task.update_state if parts.has_state(params) else None
  plain = (sgd_lr is not None and own_loss and client_loss is None
           and loss_scale is None and update is None)
  sgd_kernel = getattr(task, "sgd_kernel", None) if plain else None

  def one(i, k, start, *drawn):
    fn = loss_fn if client_loss is None else client_loss(i)
    if loss_scale is not None:
      fn = lambda *args: loss_scale[i] * loss_fn(*args)
    new, loss = train(start, k, task.counts[i], world.client_steps[i],
                      fetch=task.client_data(i), loss_fn=fn, opt=opt, spec=spec,
                      max_count=task.max_count, gather_limit=GATHER_BUDGET // at_once,
                      positions=drawn or None, update_state=update,
                      sgd_kernel=sgd_kernel, sgd_lr=sgd_lr)
    delta = jax.tree.map(jnp.subtract, new, start)
    kept = None if keep is None else keep(i, delta)
    if transform is not None:
      delta = transform(i, delta)
    return delta, (loss if keep is None else (loss, kept))

  if per_client_start:
    fn, args = one, (ids, client_keys, params)
  else:
    fn, args = (lambda i, k, *drawn: one(i, k, params, *drawn)), (ids, client_keys)
  work = jnp.maximum(world.client_steps[ids], 1)
  if valid is not None:
    work = jnp.where(valid, work, 0)
  if sum_weights is None:
    out = client_map.map_clients(fn, *args, width=width, work=work, prepare=prepare)
  else:
    out = client_map.map_clients_sum(fn, sum_weights, *args, width=width, work=work,
                                     prepare=prepare)
  if keep is None:
    return out
  total, (losses, kept) = out
  return total, losses, kept
