"""Mime and MimeLite (Karimireddy, Jaggi, Kale, Mohri, Reddi, Stich & Suresh, "Breaking the
centralized barrier for cross-device federated learning", NeurIPS 2021, arXiv:2008.03606),
Algorithm 1, as FedJAX implements it (fedjax/algorithms/mime.py, mime_lite.py).

A base optimizer B = (U, V) (the paper's Section 3) holds server statistics s: a step is
x <- x - eta U(g, s), and s <- V(g, s) updates the statistics. Each round:
  1. observe the available clients S (the world's participation); send x and s;
  2. every i in S computes its full-batch gradient grad f_i(x) over all of its examples;
     c = sum_S w_i grad f_i(x) / sum_S w_i   (w_i = 1: the paper's 1/|S|; --weighting=
     data_size: w_i = n_i, FedJAX's mean over the cohort's examples);
  3. every i in S: y_i = x; for k = 1..K_i, with minibatch zeta of its data,
       Mime:      g = grad f_i(y_i; zeta) - grad f_i(x; zeta) + c    (SVRG-style)
       MimeLite:  g = grad f_i(y_i; zeta)
       y_i <- y_i - eta U(g, s)        (s frozen: no client step changes it);
  4. s <- V(c, s): the statistics advance once, with the mean full-batch gradient at x, not
     with the model deltas (MimeLite computes the same c, after training, for this only);
     x <- x + eta_s sum_S w_i (y_i - x) / sum_S w_i   (--server_lr = eta_s, FedJAX's
     server_learning_rate; the paper's x <- mean of the y_i is eta_s = 1).
Nothing changes in a round where nobody is available.

The base optimizers (--mime_opt), as optax transformations whose state is s (FedJAX's
base_optimizer, an optax optimizer at the client learning rate eta = --client_lr):
  sgd       U(g, s) = g, no statistics;
  momentum  U(g, m) = V(g, m) = g + beta m   (optax.sgd's heavy ball, as FedJAX's).
            The paper writes momentum as U = V = (1 - beta) g + beta m; with m = 0 at the
            start the two are the same algorithm at eta = eta_paper (1 - beta) (the tests
            check it against the paper's form);
  adam      Kingma & Ba's (optax.adam): U(g, (t, m, v)) is the bias-corrected step of
            m' = b1 m + (1 - b1) g, v' = b2 v + (1 - b2) g^2 at step t + 1, and V advances
            (t, m, v) by one step.
MimeLite with --mime_opt=sgd (or momentum with beta = 0) is FedAvg bit for bit: the same
local SGD steps, the same weighted mean, the same server step.

Our reading where the paper and FedJAX leave room:
  - grad f_i(x) is the gradient of the client's training loss (with --l2's penalty) over all
    of its examples in evaluation mode: no augmentation or dropout, so it is f_i's own
    gradient. The local steps run in training mode, and Mime's grad f_i(x; zeta) uses the
    step's own minibatch and noise key (zeta includes the augmentation and dropout draws),
    so the correction cancels the step's noise as SVRG's does. Batch-norm models, which
    normalize differently in the two modes, are refused.
  - c and V's input are the same weighted mean (FedJAX weights both by examples).
  - The statistics advance only by V: the client steps see s as it was at the round's start
    (FedJAX applies its optimizer with the round's opt_state and drops the new state).
  - The full-batch gradients are summed over chunks of --batch_size examples (the memory of
    one local step; the cost of about one epoch of gradients per client).
"""

from typing import Any

import jax
import jax.numpy as jnp
import optax

from fedjax_bench.algorithms import fedavg
from fedjax_bench.core import aggregate, client_map, local, parts, rounds, schedules
from fedjax_bench.core.local import LocalTraining
from fedjax_bench.core.schedules import ClientLrSchedule
from fedjax_bench.core.server_opt import ServerLr
from fedjax_bench.core.types import FederatedAlgorithm, variant
from fedjax_bench.errors import UsageError
from fedjax_bench.settings import DECAY, POSITIVE, coerce, section, setting

BASE_OPTS = ("sgd", "momentum", "adam")
_ADAM = lambda hp: hp.mime_opt == "adam"


# No server optimizer: Mime's statistics replace it (--server_lr is FedAvg's server step).
@section("Mime and MimeLite")
class Hparams(LocalTraining, ClientLrSchedule, ServerLr, fedavg.Weighted):
  mime_opt: str = setting("momentum", "Mime's base optimizer B = (U, V), whose server "
                          "statistics every client step applies, frozen: sgd; momentum (heavy "
                          "ball: m = g + beta m, --mime_momentum); adam (Kingma & Ba, "
                          "bias-corrected). Steps at --client_lr.", choices=BASE_OPTS)
  mime_momentum: float = setting(0.9, "beta of --mime_opt=momentum (0: sgd).", sweep=True,
                                 check=DECAY, used_if=lambda hp: hp.mime_opt == "momentum")
  mime_beta1: float = setting(0.9, "beta1 of --mime_opt=adam.", sweep=True, check=DECAY,
                              used_if=_ADAM)
  mime_beta2: float = setting(0.999, "beta2 of --mime_opt=adam.", sweep=True, check=DECAY,
                              used_if=_ADAM)
  mime_eps: float = setting(1e-8, "epsilon of --mime_opt=adam (outside the square root).",
                            sweep=True, check=POSITIVE, used_if=_ADAM)


def base_optimizer(hp: Hparams, lr) -> optax.GradientTransformation:
  """B at step size ``lr``: its update is U (times -lr), its new state V (the optax
  transformation --client_opt of the same name builds)."""
  if hp.mime_opt not in BASE_OPTS:
    raise UsageError(f"unknown --mime_opt={hp.mime_opt!r}; valid: {', '.join(BASE_OPTS)}")
  return local.client_optimizer(hp.mime_opt, lr, momentum=hp.mime_momentum, b1=hp.mime_beta1,
                                b2=hp.mime_beta2, eps=hp.mime_eps)


def frozen(base: optax.GradientTransformation, state: Any) -> optax.GradientTransformation:
  """-eta U(., s): ``base``'s step with its statistics held at ``state``, which no step
  changes (the client optimizer of Mime's local steps)."""
  return optax.GradientTransformation(
      lambda params: (),
      lambda g, own, params=None: (base.update(g, state, params)[0], own))


def svrg(loss_fn, x, c):
  """Mime's local objective at a minibatch zeta: loss_fn(y) + <c - grad loss_fn(x), y>, the
  bracket held constant, so its gradient is grad f_i(y; zeta) - grad f_i(x; zeta) + c; the
  added term is 0 in value, so the reported loss is the data loss."""
  grad = jax.grad(loss_fn)

  def h(y, xb, yb, wb, rng):
    v = jax.tree.map(jnp.subtract, c, grad(x, xb, yb, wb, rng))
    linear = sum(jnp.vdot(jax.lax.stop_gradient(a), b)
                 for a, b in zip(jax.tree.leaves(v), jax.tree.leaves(y)))
    return loss_fn(y, xb, yb, wb, rng) + (linear - jax.lax.stop_gradient(linear))

  return h


def full_gradients(task, params, cohort, weights, *, chunk: int, width: int):
  """sum_i w_i grad f_i(params) over the cohort: f_i the client's loss over all of its
  examples (evaluation mode, with the l2 penalty), in chunks of ``chunk`` examples.
  Padding rows add nothing."""
  chunk = max(1, min(chunk, task.max_count))

  def summed_loss(p, xb, yb, wb):
    return jnp.sum(wb * task.pointwise_loss(task.logits(p, xb), yb))

  grad = jax.grad(summed_loss)
  zeros = jax.tree.map(jnp.zeros_like, params)

  def one(i):
    count = task.counts[i]
    read = task.client_data(i)

    def add(carry):
      k, total = carry
      pos = k * chunk + jnp.arange(chunk)
      xb, yb = read(jnp.minimum(pos, jnp.maximum(count - 1, 0)))
      g = grad(params, xb, yb, (pos < count).astype(jnp.float32))
      return k + 1, jax.tree.map(jnp.add, total, g)

    chunks = (count + chunk - 1) // chunk
    _, total = jax.lax.while_loop(lambda c: c[0] < chunks, add, (jnp.zeros((), count.dtype),
                                                                   zeros))
    n = jnp.maximum(count, 1).astype(jnp.float32)
    g = jax.tree.map(lambda t: t / n, total)
    if task.l2:
      g = jax.tree.map(lambda a, p: a + task.l2 * p, g, params)
    return g, jnp.zeros((), jnp.float32)

  chunks = jnp.maximum((task.counts[cohort.ids] + chunk - 1) // chunk, 1)
  total, _ = client_map.map_clients_sum(one, weights, cohort.ids, width=width,
                                        work=jnp.where(cohort.valid, chunks, 0))
  return total


def build(task, world, hp: Hparams, *, control_variate: bool) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  base_optimizer(hp, 1.0)  # an unknown --mime_opt fails here, not inside a trace
  sopt = optax.sgd(hp.server_lr)  # x <- x + eta_s * mean(y_i - x), FedAvg's server step
  shapes = jax.eval_shape(task.init_params, jax.random.PRNGKey(0))
  if parts.has_state(shapes):
    raise UsageError("mime and mime_lite take the full-batch gradient at x in evaluation mode "
                     "and the local steps' in training mode, which a batch-norm model "
                     "normalizes differently; use a model without batch norm (logreg, mlp, a "
                     "paper's CNN)")
  width = client_map.resolve_width(hp.client_width, client_map.is_convolutional(shapes))

  def init(key):  # s: B's statistics at zero, in the server's aux
    server = rounds.init_server(task, world, sopt, key)
    return server._replace(aux=base_optimizer(hp, 1.0).init(server.params)), ()

  def round_fn(server, clients, key):
    mask, s, world_state = rounds.observe(world, server, key)
    x, stats = server.params, server.aux
    weights = fedavg.client_weights(task, s.ids, s.valid, hp.weighting)
    c = aggregate.mean_of_sum(
        full_gradients(task, x, s, weights, chunk=hp.batch_size, width=width), weights)
    base = base_optimizer(hp, schedules.client_lr(hp, server.round))
    total, losses = rounds.train(task, world, hp, x, s, key, server.round,
                                 loss_fn=svrg(task.loss, x, c) if control_variate else None,
                                 opt=frozen(base, stats), sum_weights=weights)
    delta = aggregate.mean_of_sum(total, weights)
    skip = ~jnp.any(s.valid)
    _, new_stats = base.update(c, stats, x)  # s <- V(c, s)
    new_stats = jax.tree.map(lambda a, b: jnp.where(skip, b, a), new_stats, stats)
    server = rounds.apply_update(sopt, server, delta, world_state, skip=skip, aux=new_stats)
    return server, clients, rounds.metrics(mask, s, losses)

  return FederatedAlgorithm(init, round_fn)


# The registry's names: one module for both, the control variate the only difference.
mime = variant(build, Hparams, control_variate=True)
mime_lite = variant(build, Hparams, control_variate=False)
