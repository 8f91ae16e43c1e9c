"""FedMax, FedMax(k) and FedSoftMax (Ben Mansour, Carenini & Duplessis, §2.3).

Algorithm 1 with loss-aware aggregation weights. Each round t:
  1. observe the cohort I_t (the paper: everyone, --participation=full);
  2. ℓ_i = F_i(w_t) − F_i*: every cohort client's full local loss at the broadcast model
     (one vectorized pass over the cohort's examples; the population's under full
     participation), less F_i* (our reading, docs/papers/hetero_agg.md): 0
     (--local_optimum=zero), or estimated once before round 1 by training each client
     alone (--local_optimum=estimate, algorithms/local_optimum.py);
  3. α = WEIGHTS[strategy](ℓ, p), p_i = n_i / Σ_{j∈I_t} n_j:
       fedmax      α = 1/|J| on J = argmax ℓ                      (eq. 15, 22)
       fedmax_k    α = 1/k on the k largest ℓ                     (--fedmax_k)
       fedsoftmax  α ∝ p · exp(β ℓ)                               (--softmax_beta)
     optionally floored, α ← (1 − ε) α + ε p                      (--alpha_floor, eq. (16)-(19));
  4. every i ∈ I_t runs E epochs of SGD from w_t (τ_i = E⌈n_i/b⌉ steps, the world's step
     budgets) at the round's client learning rate (core/schedules.py; the paper's
     η_0 · 0.99^t is --lr_decay_per_round=0.99);
  5. w_{t+1} = Σ_i α_i w_i = w_t + Σ_i α_i Δ_i (through the server optimizer; sgd, lr 1
     is the paper's).
"""


import jax
import jax.numpy as jnp

from fedjax_bench.algorithms import loss_weights
from fedjax_bench.core import client_map, rounds
from fedjax_bench.core.rounds import ServerState
from fedjax_bench.task.task import Task
from fedjax_bench.core.types import FederatedAlgorithm, variant, with_count
from fedjax_bench.errors import UsageError
from fedjax_bench.settings import NON_NEGATIVE, POSITIVE, PROBABILITY, coerce, section, setting
from fedjax_bench.sim.world import World


@section("loss-aware aggregation")
class Hparams(rounds.Synchronous):
  alpha_floor: float = setting(0.0, "alpha <- (1 - eps) alpha + eps p, so every client keeps at "
                               "least eps of its p (the paper's eq. (16)-(19)).",
                               check=PROBABILITY, sweep=True)
  record_alpha: bool = setting(False, "Report every client's aggregation weight each round "
                               "(metrics alpha_0000, alpha_0001, ...).")
  local_optimum: str = setting("zero", "F_i* in the loss gap l_i = F_i(w_t) - F_i* that the "
                               "weights read: zero (the default), or estimate: before "
                               "round 1 each client trains alone from the initial model for "
                               "--local_optimum_steps local steps (--batch_size, --sampling, "
                               "--client_opt at --client_lr), and F_i* is the lower of its "
                               "full local loss then and at the start (metrics "
                               "local_optimum_mean/_max).",
                               choices=("zero", "estimate"))
  local_optimum_steps: int = setting(500, "--local_optimum=estimate: the local steps each "
                                     "client trains alone.", check=POSITIVE,
                                     used_if=lambda hp: hp.local_optimum == "estimate")


@section("loss-aware aggregation")
class SoftmaxHparams(Hparams):
  softmax_beta: float = setting(1.0, "fedsoftmax: alpha_i ∝ p_i exp(beta * loss_i) (beta = 1/T; "
                                "0 is FedAvg with alpha = p).", check=NON_NEGATIVE, sweep=True)
  softmax_temperature: float = setting(0.0, "fedsoftmax: the paper's temperature T; if > 0, "
                                       "--softmax_beta = 1/T.", check=NON_NEGATIVE)


@section("loss-aware aggregation")
class TopKHparams(Hparams):
  fedmax_k: int = setting(10, "fedmax_k: uniform weight on the k clients with the largest loss "
                          "at the global model.", check=POSITIVE)


HPARAMS = {"fedmax": Hparams, "fedmax_k": TopKHparams, "fedsoftmax": SoftmaxHparams}


def build(task: Task, world: World, hp: Hparams, *, strategy: str) -> FederatedAlgorithm:
  if strategy not in loss_weights.WEIGHTS:
    raise UsageError(f"unknown aggregation strategy {strategy!r}; valid: "
                     f"{', '.join(loss_weights.STRATEGIES)}")
  hp = coerce(HPARAMS[strategy], hp)
  sopt = hp.optimizer()
  k = rounds.static(hp.fedmax_k, "fedmax_k") if strategy == "fedmax_k" else 1
  if not 1 <= k <= task.num_clients:
    raise UsageError(f"--fedmax_k={k} must be between 1 and --num_clients={task.num_clients}")
  weigh = loss_weights.WEIGHTS[strategy]
  record_alpha = hp.record_alpha
  beta = hp.softmax_beta if strategy == "fedsoftmax" else 1.0
  estimate = hp.local_optimum == "estimate"
  width = client_map.resolve_width(hp.client_width, client_map.is_convolutional(
      jax.eval_shape(task.init_params, jax.random.PRNGKey(0))))

  def init(key):
    server = rounds.init_server(task, world, sopt, key)
    if estimate:  # F̂_i* in the server's aux
      # Imported here, so that only the runs that estimate load the module (a run's
      # record hashes every loaded module's top level, claims/code.py).
      from fedjax_bench.algorithms import local_optimum
      server = server._replace(aux=local_optimum.estimate(
          task, server.params, local_optimum.key_of(key), steps=hp.local_optimum_steps,
          lr=hp.client_lr, batch_size=hp.batch_size, sampling=hp.sampling,
          opt=hp.client_optimizer(hp.client_lr)))
    return server, ()

  def round_fn(server: ServerState, clients, key):
    mask, c, world_state = rounds.observe(world, server, key)
    losses = loss_weights.cohort_losses(task, server.params, c, width=width)
    if estimate:
      losses = losses - server.aux
    p = jnp.where(rounds.participated(c, task.num_clients), task.counts, 0).astype(jnp.float32)
    alpha = weigh(losses, p, k=k, beta=beta)
    alpha = loss_weights.floor_mix(alpha, p, hp.alpha_floor)
    delta, train_losses = rounds.train(task, world, hp, server.params, c, key, server.round,
                                       sum_weights=jnp.where(c.valid, alpha[c.ids], 0.0))
    server = rounds.apply_update(sopt, server, delta, world_state, skip=~jnp.any(c.valid))
    # alpha and rho are undefined (0/0) in a round nobody trained: count 0 there.
    metrics = {**rounds.metrics(mask, c, train_losses),
               **with_count(alpha_metrics(alpha, losses, p, record_alpha), jnp.any(c.valid))}
    if estimate:
      metrics.update(local_optimum_mean=jnp.mean(server.aux),
                     local_optimum_max=jnp.max(server.aux))
    return server, clients, metrics

  return FederatedAlgorithm(init, round_fn)


def alpha_metrics(alpha, losses, p, record_alpha: bool) -> dict:
  """‖α − p‖₁, ρ(t, w_t), max α, the largest ℓ; with ``record_alpha`` every α_i too."""
  out = {"alpha_p_l1": jnp.sum(jnp.abs(alpha - p / jnp.sum(p))),
         "rho": loss_weights.rho(alpha, losses, p), "alpha_max": jnp.max(alpha),
         "global_loss_max": jnp.max(jnp.where(p > 0, losses, -jnp.inf))}
  if record_alpha:
    out.update({alpha_name(i): alpha[i] for i in range(alpha.shape[0])})
  return out


def alpha_name(i: int) -> str:
  return f"alpha_{i:04d}"


# The registry's names: one module per strategy would repeat the round above.
fedmax = variant(build, Hparams, strategy="fedmax")
fedmax_k = variant(build, TopKHparams, strategy="fedmax_k")
fedsoftmax = variant(build, SoftmaxHparams, strategy="fedsoftmax")