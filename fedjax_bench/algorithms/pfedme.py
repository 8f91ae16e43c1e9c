"""pFedMe (T Dinh, Tran & Nguyen, "Personalized Federated Learning with Moreau Envelopes",
NeurIPS 2020, arXiv:2006.08848), Algorithm 1.

Client i's objective is the Moreau envelope of its loss,
    F_i(w) = min_theta f_i(theta) + lambda/2 ||theta - w||^2,
whose minimizer theta_hat_i(w) is client i's personalized model and whose gradient is
lambda (w - theta_hat_i(w)). Each round:
  1. the server samples S^t (the world's participation) and sends w^t;
  2. each i in S^t sets w_{i,0} = w^t and, for each of its R local rounds r (its local
     steps: --local_steps, or its epochs' steps), on a fresh minibatch D_i:
       theta_hat_i = K steps (--pfedme_k) of  theta <- theta - p (grad f_i(theta; D_i)
                                                          + lambda (theta - w_{i,r}))
                     (p = --pfedme_personal_lr), an approximate minimizer of
                     f_i(theta; D_i) + lambda/2 ||theta - w_{i,r}||^2;
       w_{i,r+1} = w_{i,r} - eta lambda (w_{i,r} - theta_hat_i)
     (eta the round's client learning rate: a step of the client optimizer on the envelope's
     gradient, --client_opt=sgd being the paper's), and keeps its last theta_hat_i;
  3. w^{t+1} = (1 - beta) w^t + beta mean_i w_{i,R} = w^t + beta mean_i (w_{i,R} - w^t)
     (--pfedme_beta; --weighting, uniform as the paper's 1/S), through the server optimizer
     (sgd at lr 1 gives the paper's step).
Each client's theta_i starts at w^0 and is kept between the rounds it is sampled in;
evaluation scores each client's theta_i on its own test data (personal_test_accuracy; needs
--holdout_fraction) beside the global model's. The reported client_loss is f_i of the
personalized model on each local round's fresh minibatch, before its K steps.

Our reading where the paper leaves a choice: the K steps of a local round start from the
previous local round's theta_hat_i (from w^t in a round's first), as the authors' code
(CharlieDinh/pFedMe) does, and read the local round's one minibatch, as theirs. The paper's
Algorithm 1 lets every client compute each round and sends S of them; here a client computes
only in the rounds it is available, which is the paper's when --participation=full.

beta = 1: w^{t+1} = w^t + mean_i (w_{i,R} - w^t), FedAvg's server step on the clients' local
models, bit for bit (1 * Delta is Delta), which is the plain average mean_i w_{i,R} up to
float rounding (tested against it). K = 1 with eta lambda = 1 makes every local round one
SGD step at p on the local round's minibatch: pFedMe is then FedAvg at --client_lr=p (tested,
up to rounding).
"""

import jax
import jax.numpy as jnp
import optax

from fedjax_bench.algorithms import fedavg
from fedjax_bench.core import aggregate, cohort as cohort_lib, local_terms, rounds, schedules
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.errors import UsageError
from fedjax_bench.settings import POSITIVE, coerce, section, setting


@section("pfedme")
class Hparams(fedavg.Hparams):
  pfedme_lambda: float = setting(15.0, "lambda: the Moreau envelope's pull of each "
                                 "personalized model theta_i toward the local model w "
                                 "(the paper's MNIST value).", check=POSITIVE, sweep=True)
  pfedme_k: int = setting(5, "K: the gradient steps that solve each local round's "
                          "personalized model theta_i approximately.", check=POSITIVE)
  pfedme_personal_lr: float = setting(0.05, "The personal learning rate: the step p of those K "
                                      "steps, which need p (lambda + L) < 2 for an L-smooth "
                                      "loss (the paper's MNIST runs take 0.1 with lambda 15, "
                                      "which diverged on LEAF Synthetic's MLP).",
                                      check=POSITIVE, sweep=True)
  pfedme_beta: float = setting(1.0, "beta: the server step w <- (1 - beta) w + beta * mean of "
                               "the clients' local models (1: their average; the paper also "
                               "runs 2).", check=POSITIVE, sweep=True)


def envelope_objective(loss_fn, lam, k: int, personal_lr):
  """One local round's objective on the pair (w, theta): its gradient in w is the Moreau
  envelope's, lambda (w - theta_hat), and in theta the new theta_hat itself, theta_hat
  being K gradient steps from theta on f_i(.; D) + lambda/2 ||. - w||^2 on the round's
  minibatch D (`local_steps` turns the second into theta <- theta_hat). Its value: f_i(theta;
  D) before the K steps."""
  grad = jax.value_and_grad(loss_fn)

  def h(packed, xb, yb, wb, rng):
    w, theta = jax.lax.stop_gradient(packed)

    def step(theta, _):
      loss, g = grad(theta, xb, yb, wb, rng)
      theta = jax.tree.map(lambda t, gi, wi: t - personal_lr * (gi + lam * (t - wi)),
                           theta, g, w)
      return theta, loss

    theta_hat, losses = jax.lax.scan(step, theta, None, length=k)
    envelope_grad = jax.tree.map(lambda wi, ti: lam * (wi - ti), w, theta_hat)
    return local_terms.with_gradient(losses[0], packed, (envelope_grad, theta_hat))

  return h


def local_steps(client_opt: optax.GradientTransformation):
  """The optimizer of the pair (w, theta): the client optimizer on w (sgd at eta: w - eta
  lambda (w - theta_hat)); theta replaced by theta_hat, its 'gradient'."""
  def update(grads, state, packed):
    uw, state = client_opt.update(grads[0], state, packed[0])
    return (uw, jax.tree.map(jnp.subtract, grads[1], packed[1])), state

  return optax.GradientTransformation(lambda packed: client_opt.init(packed[0]), update)


def build(task, world, hp: Hparams) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  if task.client_test is None:
    raise UsageError("pfedme is scored on each client's own test data: give "
                     "--holdout_fraction (e.g. 0.2)")
  sopt = hp.optimizer()
  n = world.num_clients
  objective = envelope_objective(task.loss, hp.pfedme_lambda,
                                 rounds.static(hp.pfedme_k, "pfedme_k"), hp.pfedme_personal_lr)

  def init(key):  # every theta_i = w^0
    server = rounds.init_server(task, world, sopt, key)
    return server, jax.tree.map(lambda a: jnp.broadcast_to(a, (n,) + a.shape), server.params)

  def round_fn(server, theta, key):
    mask, c, world_state = rounds.observe(world, server, key)
    weights = fedavg.client_weights(task, c.ids, c.valid, hp.weighting)
    w = server.params
    opt = local_steps(hp.client_optimizer(schedules.client_lr(hp, server.round)))
    # Every client starts at (w^t, w^t); the w_{i,R} - w^t are summed, the theta_hat_i - w^t
    # kept per client.
    total, losses, dtheta = rounds.train(task, world, hp, (w, w), c, key, server.round,
                                         loss_fn=objective, sum_weights=weights,
                                         transform=lambda i, d: d[0],
                                         keep=lambda i, d: d[1], opt=opt)
    theta = cohort_lib.scatter(theta, c, jax.tree.map(jnp.add, w, dtheta))
    delta = jax.tree.map(lambda d: hp.pfedme_beta * d, aggregate.mean_of_sum(total, weights))
    server = rounds.apply_update(sopt, server, delta, world_state, skip=~jnp.any(c.valid))
    return server, theta, rounds.metrics(mask, c, losses)

  return FederatedAlgorithm(init, round_fn, personal_params=lambda server, theta: theta)
