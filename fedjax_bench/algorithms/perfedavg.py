"""Per-FedAvg (Fallah, Mokhtari & Ozdaglar, "Personalized Federated Learning with Theoretical
Guarantees: A Model-Agnostic Meta-Learning Approach", NeurIPS 2020, arXiv:2002.07948),
Algorithm 1 with its first-order (FO) and Hessian-free (HF) approximations.

The global model w minimizes the MAML objective (1/n) sum_i F_i(w), F_i(w) = f_i(w - alpha
grad f_i(w)): a model from which one step of SGD at alpha on a client's own data gives a good
personalized model. Each round:
  1. the server samples A_k (the world's participation) and sends w_k;
  2. each i in A_k sets w_i = w_k and, for each of its local steps t (--local_steps, or its
     epochs' steps), with independent minibatches D, D' (and D'' for HF):
       w_tilde = w_i - alpha grad f_i(w_i; D)
       g       = grad f_i(w_tilde; D')
       FO:  w_i <- w_i - beta g
       HF:  w_i <- w_i - beta (g - alpha d),
            d = [grad f_i(w_i + delta g; D'') - grad f_i(w_i - delta g; D'')] / (2 delta),
            the paper's finite-difference estimate of the Hessian-vector product
            grad^2 f_i(w_i; D'') g (--perfedavg_delta), not an exact one;
  3. w_{k+1} = the (weighted) mean of the w_i (--weighting, uniform as the paper's 1/(rn)),
     through the server optimizer (sgd at lr 1: the paper's average).
alpha is --perfedavg_alpha; beta is the round's client learning rate, the step of the client
optimizer on the meta-gradient (--client_opt=sgd being the paper's). The inner step is plain
SGD at alpha.

Minibatches: a local step draws 2B (FO) or 3B (HF) examples, B = --batch_size, as --sampling
draws one minibatch, and deals them in turn to D, D' (and D''): disjoint random minibatches of
B (of a shuffled epoch with --sampling=shuffle, partial at an epoch's end). --local_epochs
counts steps of B examples (ceil(n_i / B) an epoch), each of which reads 2B (3B).

Evaluation (needs --holdout_fraction): each client's personalized model is w after
--perfedavg_finetune_steps steps of SGD at alpha on minibatches of B of its own training data
(the paper's one step), scored on its own test data (personal_test_accuracy) beside the
global model's. The minibatches are drawn from a key kept in the server state ("run" ->
"init" -> "personal_train", then the round, "local_train" and the client), so an evaluation
is a function of the state. (--finetune_steps, the evaluation protocol's fine-tuning of any
global model at --finetune_lr, is reported beside it as finetuned_test_*.)

alpha -> 0 makes both variants SGD on the D' minibatches at beta (FedAvg with one of each
step's minibatches; not FedAvg's draws, so no bit-for-bit reduction).
"""

import dataclasses

import jax
import jax.numpy as jnp
import optax

from fedjax_bench.algorithms import fedavg
from fedjax_bench.core import aggregate, keys, local_terms, rounds
from fedjax_bench.core.cohort import Cohort
from fedjax_bench.core.types import FederatedAlgorithm, variant
from fedjax_bench.errors import UsageError
from fedjax_bench.settings import POSITIVE, coerce, section, setting

VARIANTS = ("fo", "hf")


@section("perfedavg")
class Hparams(fedavg.Hparams):
  perfedavg_alpha: float = setting(0.01, "alpha: the step of the inner SGD step of each local "
                                   "step, and of the personalization from the global model.",
                                   check=POSITIVE, sweep=True)
  perfedavg_finetune_steps: int = setting(1, "Evaluation: the SGD steps at --perfedavg_alpha "
                                          "on minibatches of a client's own training data "
                                          "that personalize the global model (the paper's "
                                          "one).", check=POSITIVE)


@section("perfedavg")
class HFHparams(Hparams):
  perfedavg_delta: float = setting(1e-3, "delta of perfedavg_hf's finite-difference "
                                   "Hessian-vector product [grad f(w + delta g) - grad "
                                   "f(w - delta g)] / (2 delta).", check=POSITIVE, sweep=True)


def split(batch, parts: int):
  """A minibatch's examples dealt in turn to ``parts`` minibatches (rows j, j + parts, ...)."""
  return [jax.tree.map(lambda a: a[j::parts], batch) for j in range(parts)]


def meta_objective(loss_fn, alpha, delta=None):
  """A local step's objective on a 2B (FO, ``delta`` None) or 3B (HF) minibatch: its gradient
  is the step's meta-gradient g (FO) or g - alpha d (HF), its value f_i(w; D)."""
  grad = jax.value_and_grad(loss_fn)
  parts = 2 if delta is None else 3

  def h(w, xb, yb, wb, rng):
    w0 = jax.lax.stop_gradient(w)
    batches = split((xb, yb, wb), parts)
    rngs = [jax.random.fold_in(rng, j) for j in range(parts)]
    loss, g_inner = grad(w0, *batches[0], rngs[0])
    w_tilde = jax.tree.map(lambda a, b: a - alpha * b, w0, g_inner)
    _, g = grad(w_tilde, *batches[1], rngs[1])
    if delta is not None:
      shifted = lambda sign: jax.tree.map(lambda a, b: a + sign * delta * b, w0, g)
      _, g_plus = grad(shifted(1.0), *batches[2], rngs[2])
      _, g_minus = grad(shifted(-1.0), *batches[2], rngs[2])
      g = jax.tree.map(lambda gi, p, m: gi - alpha * ((p - m) / (2 * delta)), g, g_plus, g_minus)
    return local_terms.with_gradient(loss, w, g)

  return h


def build(task, world, hp: Hparams, *, method: str) -> FederatedAlgorithm:
  if method not in VARIANTS:
    raise UsageError(f"unknown Per-FedAvg variant {method!r}; valid: {', '.join(VARIANTS)}")
  hp = coerce(HFHparams if method == "hf" else Hparams, hp)
  if task.client_test is None:
    raise UsageError(f"perfedavg_{method} is scored on each client's own test data: give "
                     "--holdout_fraction (e.g. 0.2)")
  sopt = hp.optimizer()
  n = world.num_clients
  alpha = hp.perfedavg_alpha
  objective = meta_objective(task.loss, alpha, hp.perfedavg_delta if method == "hf" else None)
  # A local step reads 2B (FO) or 3B (HF) examples.
  steps_hp = dataclasses.replace(hp, batch_size=(2 if method == "fo" else 3) * hp.batch_size)
  tune_steps = rounds.static(hp.perfedavg_finetune_steps, "perfedavg_finetune_steps")
  tune_world = world._replace(client_steps=jnp.full((n,), tune_steps, jnp.int32),
                              max_steps=tune_steps)

  def init(key):  # the server keeps the key of the evaluations' personalization draws
    return rounds.init_server(task, world, sopt, key,
                              aux=keys.for_purpose(key, "personal_train")), ()

  def round_fn(server, clients, key):
    mask, c, world_state = rounds.observe(world, server, key)
    weights = fedavg.client_weights(task, c.ids, c.valid, hp.weighting)
    total, losses = rounds.train(task, world, steps_hp, server.params, c, key, server.round,
                                 loss_fn=objective, sum_weights=weights)
    delta = aggregate.mean_of_sum(total, weights)
    server = rounds.apply_update(sopt, server, delta, world_state, skip=~jnp.any(c.valid))
    return server, clients, rounds.metrics(mask, c, losses)

  def personal_params(server, clients):
    """Every client's w after --perfedavg_finetune_steps SGD steps at alpha on its own data."""
    everyone = Cohort(jnp.arange(n, dtype=jnp.int32), jnp.ones((n,), bool))
    key = jax.random.fold_in(server.aux, server.round)
    deltas, _ = rounds.train(task, tune_world, hp, server.params, everyone, key, server.round,
                             opt=optax.sgd(alpha))
    return jax.tree.map(jnp.add, server.params, deltas)

  return FederatedAlgorithm(init, round_fn, personal_params=personal_params)


perfedavg_fo = variant(build, Hparams, method="fo")
perfedavg_hf = variant(build, HFHparams, method="hf")
