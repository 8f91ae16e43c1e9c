"""APFL (Deng, Kamani & Mahdavi, "Adaptive Personalized Federated Learning", arXiv:2003.13461,
2020), Algorithm 1 (Local Descent APFL) with the adaptive mixing weight.

Each client i keeps a local model v_i and a mixing weight alpha_i; its personalized model is
    v_bar_i = alpha_i v_i + (1 - alpha_i) w.
Each round:
  1. the server samples U_t (the world's participation) and sends w^t;
  2. each i in U_t sets w_i = w^t and, for each of its local steps on a minibatch xi,
     all from the step's old values (w_i, v_i, alpha_i; v_bar_i = alpha_i v_i + (1 - alpha_i) w_i):
       w_i     <- w_i - eta grad f_i(w_i; xi)
       v_i     <- v_i - eta grad_v f_i(v_bar_i; xi)  = v_i - eta alpha_i grad f_i(v_bar_i; xi)
       alpha_i <- Proj_[0,1](alpha_i - eta grad_alpha f_i(v_bar_i; xi))
                = Proj_[0,1](alpha_i - eta <v_i - w_i, grad f_i(v_bar_i; xi)>)
     (the alpha step only with --apfl_adaptive: the paper's gradient step on alpha_i, whose
     range is [0, 1]; otherwise alpha_i = --apfl_alpha throughout);
  3. w^{t+1} = the (weighted) mean of the w_i (--weighting, uniform as the paper's 1/|U_t|),
     through the server optimizer (sgd at lr 1: the paper's average).
Every v_i starts at w^0 and every alpha_i at --apfl_alpha; a client not sampled keeps its
v_i and alpha_i. eta is the round's client learning rate; w_i's and v_i's steps are the client
optimizer's (--client_opt; the paper's is sgd), each with its own state, alpha_i's plain
projected SGD at eta.

Evaluation scores each client's v_bar_i = alpha_i v_i + (1 - alpha_i) w^t on its own test data
(personal_test_accuracy; needs --holdout_fraction) beside the global model's.

Reduction: --apfl_alpha=0 without --apfl_adaptive leaves v_bar_i = w_i, and w's steps, draws
and average are FedAvg's: the global model is FedAvg's bit for bit (tested).

Our reading where the paper leaves a choice: the mixture is of parameters (the paper's
v_bar), not of the two models' outputs as the authors' FedTorch code computes; w_i, v_i and
alpha_i step together from the old values on the same minibatch, as Algorithm 1 writes
them (the code steps w first and updates alpha once per round, with a 0.02 alpha penalty).
"""

import jax
import jax.numpy as jnp
import optax

from fedjax_bench.algorithms import fedavg
from fedjax_bench.core import aggregate, cohort as cohort_lib, rounds, schedules
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.errors import UsageError
from fedjax_bench.settings import PROBABILITY, coerce, section, setting


@section("apfl")
class Hparams(fedavg.Hparams):
  apfl_alpha: float = setting(0.25, "alpha_i, the weight of client i's local model v_i in its "
                              "personalized model alpha_i v_i + (1 - alpha_i) w: the start of "
                              "every alpha_i (--apfl_adaptive) or its value throughout "
                              "(0 without --apfl_adaptive: FedAvg's global model).",
                              check=PROBABILITY, sweep=True)
  apfl_adaptive: bool = setting(True, "Learn each alpha_i by projected SGD on "
                                "f_i(alpha v_i + (1 - alpha) w) at every local step (the "
                                "paper's adaptive alpha); false: alpha_i = --apfl_alpha.")


def mixed(alpha, v, w):
  """alpha v + (1 - alpha) w, per leaf (alpha a scalar, or one per leading row of v)."""
  def mix(vi, wi):
    a = jnp.reshape(alpha, jnp.shape(alpha) + (1,) * (vi.ndim - jnp.ndim(alpha)))
    return a * vi + (1 - a) * wi
  return jax.tree.map(mix, v, w)


def local_objective(loss_fn, adaptive: bool):
  """The local steps' objective on the triple (w, v, alpha): f_i(w) + f_i(v_bar), v_bar =
  alpha v + (1 - alpha) w with w held constant in it, so that the gradient in w is grad
  f_i(w), in v alpha grad f_i(v_bar) and in alpha <v - w, grad f_i(v_bar)> (held constant
  without ``adaptive``). The second term adds to the gradient only: the value, the loss
  a client reports, is f_i(w)."""
  def h(packed, xb, yb, wb, rng):
    w, v, alpha = packed
    if not adaptive:
      alpha = jax.lax.stop_gradient(alpha)
    personal = loss_fn(mixed(alpha, v, jax.lax.stop_gradient(w)), xb, yb, wb, rng)
    return loss_fn(w, xb, yb, wb, rng) + (personal - jax.lax.stop_gradient(personal))
  return h


def local_steps(client_opt: optax.GradientTransformation, lr, adaptive: bool):
  """The optimizer of the triple (w, v, alpha): the client optimizer on w and on v, each with
  its own state, and alpha <- Proj_[0,1](alpha - lr g) (or held, without ``adaptive``)."""
  def init(packed):
    w, v, _ = packed
    return client_opt.init(w), client_opt.init(v)

  def update(grads, state, packed):
    uw, sw = client_opt.update(grads[0], state[0], packed[0])
    uv, sv = client_opt.update(grads[1], state[1], packed[1])
    alpha = packed[2]
    ua = (jnp.clip(alpha - lr * grads[2], 0.0, 1.0) - alpha if adaptive
          else jnp.zeros_like(alpha))
    return (uw, uv, ua), (sw, sv)

  return optax.GradientTransformation(init, update)


def build(task, world, hp: Hparams) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  if task.client_test is None:
    raise UsageError("apfl is scored on each client's own test data: give "
                     "--holdout_fraction (e.g. 0.2)")
  sopt = hp.optimizer()
  n = world.num_clients
  adaptive = hp.apfl_adaptive
  objective = local_objective(task.loss, adaptive)

  def init(key):  # every v_i = w^0, every alpha_i = --apfl_alpha
    server = rounds.init_server(task, world, sopt, key)
    v = jax.tree.map(lambda a: jnp.broadcast_to(a, (n,) + a.shape), server.params)
    return server, (v, jnp.full((n,), hp.apfl_alpha, jnp.float32))

  def round_fn(server, clients, key):
    mask, c, world_state = rounds.observe(world, server, key)
    v, alpha = cohort_lib.gather(clients, c)
    weights = fedavg.client_weights(task, c.ids, c.valid, hp.weighting)
    lr = schedules.client_lr(hp, server.round)
    w = jax.tree.map(lambda a: jnp.broadcast_to(a, (c.ids.shape[0],) + a.shape),
                     server.params)
    # The w_i - w^t summed as FedAvg sums them (so that alpha = 0 is FedAvg bit for bit);
    # each client's (v_i, alpha_i) changes kept beside the sum.
    total, losses, (dv, dalpha) = rounds.train(
        task, world, hp, (w, v, alpha), c, key, server.round, per_client_start=True,
        loss_fn=objective, sum_weights=weights, transform=lambda i, d: d[0],
        keep=lambda i, d: d[1:], opt=local_steps(hp.client_optimizer(lr), lr, adaptive))
    new = (jax.tree.map(jnp.add, v, dv), jnp.clip(alpha + dalpha, 0.0, 1.0))
    clients = cohort_lib.scatter(clients, c, new)
    delta = aggregate.mean_of_sum(total, weights)
    server = rounds.apply_update(sopt, server, delta, world_state, skip=~jnp.any(c.valid))
    alpha_mean = cohort_lib.population_mean(clients[1])
    return server, clients, {**rounds.metrics(mask, c, losses), "alpha_mean": alpha_mean}

  def personal_params(server, clients):  # v_bar_i = alpha_i v_i + (1 - alpha_i) w
    v, alpha = clients
    return mixed(alpha, v, server.params)

  return FederatedAlgorithm(init, round_fn, personal_params=personal_params)
