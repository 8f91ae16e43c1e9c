"""FedALIGN (Ravi & Shomorony, "Utilizing Free Clients in Federated Learning for Focused
Model Enhancement", Section 3.1, Algorithm 1) and the baselines it is compared with.

The objective counts only the priority clients P: F(w) = Σ_{k∈P} p_k F_k(w),
p_k = D_k / Σ_{i∈P} D_i. Each round r, at the broadcast model w:
  1. g = the score of w on the priority clients' data (accuracy, or loss), and s_k the
     score of w on free client k's data (all of it, or --selection_batch examples);
  2. after the warm-up (r ≥ --warmup_rounds) free client k opts in if it is no worse than
     g by ε_r and the server accepts it if |s_k − g| < ε_r (--align_epsilon, its schedule);
  3. the priority clients and the admitted free clients run local SGD from w (with
     --prox_mu > 0, on F_k(v) + μ/2 ‖v − w‖²: FedProx);
  4. w ← (Σ_{k∈P} p_k w_k + Σ_{k∉P} p_k I_k w_k) / (1 + Σ_{k∉P} p_k I_k).
Baselines (Section 4): fedavg_priority admits nobody (FedALIGN at ε = 0);
fedavg_all_clients admits every free client after the warm-up (ε = ∞); local_model trains
one free client alone (w ← ClientUpdate(w, data_j)).
Partial participation (App. A.4, App. C.3) and the inclusion metrics are the protocol the four
methods share (`prioritized.py`). --compat=authors_code runs the released script's round
instead (`fedalign_authors_round.py`, docs/papers/fedalign.md).

Keys: client k's local key depends on (seed, round, k) only, never on the method or on
who else was admitted, so FedALIGN at ε = 0 is FedAvg on P bit for bit.
"""


import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_bench.core import aggregate, client_scores, cohort, keys, rounds
from fedjax_bench.core.rounds import ServerState
from fedjax_bench.task.task import Task
from fedjax_bench.core.types import FederatedAlgorithm, Variant, variant
from fedjax_bench.algorithms import fedalign_authors_round, fedavg, prioritized
from fedjax_bench.algorithms.prioritized import FREE_SAMPLINGS, PRIORITY_SAMPLINGS
from fedjax_bench.algorithms.prioritized import admitted_name  # noqa: F401 (re-exported)
from fedjax_bench.errors import UsageError
from fedjax_bench.settings import (NON_NEGATIVE, PROBABILITY, UNIT_INTERVAL, at_least, coerce,
                                   section, setting)
from fedjax_bench.sim.world import World

METHODS = ("fedalign", "fedavg_priority", "fedavg_all_clients", "local_model")
SCORES = ("accuracy", "loss")
INEQUALITIES = ("strict", "nonstrict")
EPS_SCHEDULES = ("constant", "step", "linear_to_zero", "exp_decay")
COMPATS = ("none", "authors_code")
_SCHEDULED = lambda hp: hp.align_eps_schedule != "constant"


@section("prioritized FL")
class Hparams(fedavg.Hparams):
  align_epsilon: float = setting(0.2, "fedalign: admit free client k when |s_k - g| < epsilon "
                                 "(accuracy points / 100, or loss).", check=NON_NEGATIVE,
                                 sweep=True)
  align_score: str = setting("accuracy", "fedalign: the score compared with the priority "
                             "clients'.", choices=SCORES)
  align_inequality: str = setting("strict", "fedalign: strict (<, so epsilon 0 is FedAvg on the "
                                  "priority clients) or <=.", choices=INEQUALITIES)
  align_eps_schedule: str = setting("constant", "fedalign: epsilon over rounds; step: "
                                    "--align_eps_late from --align_eps_round on; linear_to_zero: "
                                    "from --align_eps_round to --align_eps_end_round; exp_decay: "
                                    "times --align_eps_gamma^round.", choices=EPS_SCHEDULES)
  align_eps_late: float = setting(0.0, "fedalign: epsilon after the step.", check=NON_NEGATIVE,
                                  sweep=True, used_if=_SCHEDULED)
  align_eps_round: int = setting(0, "fedalign: the round of the step, or where the linear decay "
                                 "starts.", check=NON_NEGATIVE, sweep=True, used_if=_SCHEDULED)
  align_eps_end_round: int = setting(1, "fedalign: where the linear decay reaches 0.",
                                     check=NON_NEGATIVE, sweep=True, used_if=_SCHEDULED)
  align_eps_gamma: float = setting(0.99, "fedalign: the exp_decay factor per round.",
                                   check=PROBABILITY, sweep=True, used_if=_SCHEDULED)
  selection_batch: int = setting(0, "fedalign: score free clients on this many of their "
                                 "examples (0: all; the authors' code: 32).", check=NON_NEGATIVE)
  warmup_rounds: int = setting(-1, "Rounds with the priority clients only (-1: 10% of "
                               "--rounds).", check=at_least(-1), sweep=True)
  prox_mu: float = setting(0.0, "FedProx term mu/2 ||w - w_global||^2 in local training.",
                           check=NON_NEGATIVE, sweep=True)
  priority_fraction: float = setting(1.0, "Fraction of the priority clients sampled per round.",
                                     check=UNIT_INTERVAL)
  free_fraction: float = setting(1.0, "Fraction (or Bernoulli probability) of the free clients "
                                 "sampled per round.", check=UNIT_INTERVAL)
  priority_sampling: str = setting("without_replacement", "Uniform, or K draws with replacement "
                                   "proportional to p_k (the theory's).",
                                   choices=PRIORITY_SAMPLINGS)
  free_sampling: str = setting("without_replacement", "How free clients are sampled.",
                               choices=FREE_SAMPLINGS)
  compat: str = setting("none", "authors_code reproduces the released script's server update "
                        "(docs/papers/fedalign.md).", choices=COMPATS)
  record_admitted: bool = setting(False, "Report every free client's admission (admitted_NNNN, "
                                  "the fraction of a block's rounds).")


@section("prioritized FL")
class ProxHparams(Hparams):
  """The FedProx versions (fedalign_prox, fedprox_*): mu = 1 unless given."""
  prox_mu: float = setting(1.0, "FedProx term mu/2 ||w - w_global||^2 in local training.",
                           check=NON_NEGATIVE, sweep=True)


@section("prioritized FL")
class LocalModelHparams(Hparams):
  local_client: int = setting(-1, "local_model (and --test_mix=local_client): the free client "
                              "(-1: the authors' rule, the first free client whose first label "
                              "is among the priority clients' first labels).",
                              check=at_least(-1))


def epsilon(hp: Hparams, r) -> jax.Array:
  """ε_r (Section 3.1): constant; step (--align_eps_late from --align_eps_round on);
  linear_to_zero (from --align_eps_round to --align_eps_end_round); exp_decay (γ^r)."""
  e0 = jnp.asarray(hp.align_epsilon, jnp.float32)
  schedule = hp.align_eps_schedule
  r = jnp.asarray(r, jnp.float32)
  if schedule == "step":
    return jnp.where(r < hp.align_eps_round, e0, hp.align_eps_late)
  if schedule == "linear_to_zero":
    start, end = hp.align_eps_round, hp.align_eps_end_round
    return e0 * jnp.clip((end - r) / jnp.maximum(end - start, 1), 0.0, 1.0)
  if schedule == "exp_decay":
    return e0 * jnp.power(hp.align_eps_gamma, r)
  return e0


def build(task: Task, world: World, hp: Hparams, *, method: str,
          hparams: type = Hparams) -> FederatedAlgorithm:
  hp = coerce(hparams, hp)
  cfg = _check(task, hp, method)
  pfl = prioritized.protocol(task, priority_fraction=cfg["priority_fraction"],
                             free_fraction=cfg["free_fraction"],
                             priority_sampling=cfg["priority_sampling"],
                             free_sampling=cfg["free_sampling"])
  is_p, n, d, full = pfl.priority, pfl.n, pfl.d, pfl.full
  local_id = cfg["local_client"]
  sopt = hp.optimizer()
  mu = hp.prox_mu
  record = hp.record_admitted

  def scores(params, key):
    """Step 1: (g, s [N]) at ``params``, the priority score and each client's score."""
    loss, acc = client_scores.per_client(task, params)
    m = acc if cfg["score"] == "accuracy" else loss
    # Times the reciprocal, as XLA computes a division by a constant: the same g whether
    # the roles are constants or a --data_per_seed run's (traced).
    g = jnp.sum(jnp.where(is_p, d * m, 0.0)) * (1.0 / jnp.sum(jnp.where(is_p, d, 0.0)))
    if cfg["selection_batch"]:
      loss, acc = client_scores.minibatch(task, params, keys.for_purpose(key, "selection"),
                                          cfg["selection_batch"])
      m = acc if cfg["score"] == "accuracy" else loss
    return g, m

  def admit(server: ServerState, key, part):
    """Steps 1-2: the free clients included this round, and the selection diagnostics."""
    r = server.round
    warm = r >= hp.warmup_rounds
    eps = epsilon(hp, r)
    free = ~is_p & part
    if method == "local_model":
      admitted = jnp.arange(n) == local_id
      return admitted, {}
    g, s = scores(server.params, key)
    if cfg["score"] == "accuracy":
      opt_in = s >= g - eps
    else:
      opt_in = s <= g + eps
    gap = jnp.abs(s - g)
    accept = gap < eps if cfg["inequality"] == "strict" else gap <= eps
    asked = free & warm
    if method == "fedalign":
      opt_in, accept = asked & opt_in, asked & opt_in & accept
    else:  # fedavg_all_clients: everyone after the warm-up; fedavg_priority: nobody
      opt_in = accept = asked if method == "fedavg_all_clients" else jnp.zeros(n, bool)
    return accept, {"global_score": g, "epsilon": eps,
                    "n_opt_in": jnp.sum(opt_in).astype(jnp.float32),
                    "n_accepted": jnp.sum(accept).astype(jnp.float32)}

  def local_loss(start):
    """Step 3: F_k, plus μ/2 ‖v − w‖² with --prox_mu."""
    if isinstance(mu, (int, float)) and not mu:  # a grid passes a tracer: keep the term
      return None
    return lambda v, xb, yb, wb, rng: (task.loss(v, xb, yb, wb, rng) + 0.5 * mu
                                       * optax.tree.norm(optax.tree.sub(v, start), squared=True))

  def weights(admitted, mult):
    """Step 4's weights: D_k (∝ p_k; 1 with --weighting=uniform) of the sampled priority
    clients and the admitted ones; dividing by their sum is step 4's normalization."""
    base = d if cfg["weighting"] == "data_size" else jnp.ones(n, jnp.float32)
    if cfg["priority_sampling"] == "with_replacement" and not full:
      prio = mult / pfl.k_p * jnp.sum(jnp.where(is_p, base, 0.0))  # eq. 56: (1/K) Σ_{S_t}
    else:
      prio = jnp.where(is_p, mult, 0.0) * base
    return jnp.where(is_p, prio, jnp.where(admitted, base, 0.0))

  cap = 1 if method == "local_model" else (n if full or cfg["free_sampling"] == "bernoulli"
                                     else pfl.k_p + pfl.k_f)

  def round_fn(server: ServerState, clients, key):
    part, mult = prioritized.sample(pfl, key)
    if method == "local_model":
      mult = jnp.zeros(n, jnp.float32)
    admitted, diag = admit(server, key, part)
    a = weights(admitted, mult)
    c = cohort.from_mask(a > 0, cap)
    w = jnp.where(c.valid, a[c.ids], 0.0)
    total, losses = rounds.train(task, world, hp, server.params, c, key, server.round,
                                 loss_fn=local_loss(server.params), sum_weights=w)
    delta = aggregate.mean_of_sum(total, w)
    server = rounds.apply_update(sopt, server, delta, server.world, skip=~jnp.any(c.valid))
    return server, clients, {**rounds.metrics(a > 0, c, losses), **diag,
                             **prioritized.inclusion_metrics(task, pfl, admitted, record)}

  if cfg["compat"] == "authors_code":
    round_fn = fedalign_authors_round.build_round(task, world, hp, method, pfl, scores,
                                                  epsilon, record)
  return FederatedAlgorithm(
      lambda key: (rounds.init_server(task, world, sopt, key), ()), round_fn)


def _check(task: Task, hp: Hparams, method: str) -> dict:
  if method not in METHODS:
    raise UsageError(f"unknown prioritized-FL method {method!r}; valid: {', '.join(METHODS)}")
  if task.priority is None:
    raise UsageError("prioritized FL needs priority clients: give --num_priority (or a "
                     "dataset that defines them: synth_pfl, gaussmix_shards)")
  cfg = {
      "score": hp.align_score, "inequality": hp.align_inequality,
      "schedule": hp.align_eps_schedule, "priority_sampling": hp.priority_sampling,
      "free_sampling": hp.free_sampling, "compat": hp.compat, "weighting": hp.weighting,
      "selection_batch": rounds.static(hp.selection_batch, "selection_batch"),
      "priority_fraction": rounds.static(hp.priority_fraction, "priority_fraction"),
      "free_fraction": rounds.static(hp.free_fraction, "free_fraction"),
  }
  cfg["local_client"] = -1
  if method == "local_model":
    if task.view is not None and task.view.local_client is not None:
      k = task.view.local_client  # each seed's, checked by experiment.setup_per_seed
    else:
      k = int(hp.local_client)
      if k < 0:
        raise UsageError("--algo=local_model needs the free client to train (--local_client)")
      prio = np.asarray(task.priority)
      if not 0 <= k < task.num_clients or prio[k]:
        raise UsageError(f"--local_client={k} must be a free client; free clients: "
                         f"{_ids(np.flatnonzero(~prio))}")
    cfg["local_client"] = k
  if cfg["compat"] == "authors_code":
    if method == "local_model":
      raise UsageError("--compat=authors_code covers fedalign, fedavg_priority and "
                       "fedavg_all_clients, not local_model")
    if cfg["priority_sampling"] != "without_replacement" or cfg["free_sampling"] != \
        "without_replacement":
      raise UsageError("--compat=authors_code samples clients uniformly without replacement")
    if not cfg["selection_batch"]:
      cfg["selection_batch"] = 32  # the script scores one minibatch of 32
  return cfg


def _ids(ids) -> str:
  ids = [int(i) for i in ids]
  return ", ".join(map(str, ids[:20])) + (", ..." if len(ids) > 20 else "")


def _variant(method: str, hparams: type = Hparams) -> Variant:
  return variant(build, hparams, method=method, hparams=hparams)


# The registry's names; the FedProx versions default --prox_mu to 1.
fedalign = _variant("fedalign")
fedavg_priority = _variant("fedavg_priority")
fedavg_all_clients = _variant("fedavg_all_clients")
local_model = _variant("local_model", LocalModelHparams)
fedalign_prox = _variant("fedalign", ProxHparams)
fedprox_priority = _variant("fedavg_priority", ProxHparams)
fedprox_all_clients = _variant("fedavg_all_clients", ProxHparams)
