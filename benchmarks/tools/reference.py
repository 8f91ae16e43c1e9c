"""Reference convergence curves: one small fixed run per algorithm, committed
under ``results/reference/NAME.json`` and rerun by ``tests/algorithms/test_reference_curves.py``.

Every algorithm of ``algorithms.ALGORITHMS`` has one configuration that needs no download
(LEAF Synthetic, generated from ``--partition_seed``; logistic regression), few clients, a
few rounds and two seeds: ``COMMON``, the schedule of its kind, and its declared defaults
(``Hparams``); ``CONFIGS`` adds overrides that go through an algorithm's own paths (its
compressor, availability dynamics, staleness weighting, admission rule, ...). A config is
resolved exactly as the command line resolves its flags (`config.resolve`: the papers'
defaults, no setting without effect), then ``experiment.setup`` and ``engine.run``.
``python benchmarks/run.py --algo=NAME --seeds=0,1 --FLAG=VALUE ...`` with the overrides
of ``flags(NAME)`` runs the same thing (on all cores, which changes the last bits).

Tolerances (float32; see docs/design.md, "Devices and reproducibility"):

* ``RTOL``, ``ATOL``: a rerun on the same kind of CPU with the same device count against
  the committed curves. Same seed, same device count is bitwise in this repo; the slack is
  for another CPU (other vector widths) or another XLA version.
* ``CROSS_DEVICE_RTOL``, ``CROSS_DEVICE_ATOL``: 4 CPU devices against a 1-device run of
  the same session. The round scans compile to different summation orders for different
  vector widths, so the last bits of the parameters may differ (~1e-6 after a few rounds).
  Measured against the fresh 1-device numbers, so that files made on another CPU fail
  once, in the 1-device comparison, and not again as a device-count difference.
* Not chaotic: every configuration, started from parameters perturbed by ``PERTURBATION``
  relative (`perturbed_start`), must stay within ``RTOL``/``ATOL`` of its committed curves.
  A configuration that amplifies a 1e-6 change of its start past the tolerance would also
  amplify another CPU's rounding past it (fednova's once did: 1e-7 became 2e-4 in six
  rounds), so it is no regression test; such configurations are changed until they pass.
  The perturbed run is made when the curves are (``update_references.py``) and committed
  beside them (``"perturbed_start"``), where the tests compare the two.
* A curve is close when ``|actual - expected| <= atol + rtol * |expected|`` everywhere
  (``numpy.isclose``), and a NaN only matches a NaN.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

REFERENCE_DIR = Path(__file__).resolve().parents[2] / "results" / "reference"
METRICS = ("test_accuracy", "test_loss", "train_loss")
SEEDS = (0, 1)
RTOL, ATOL = 1e-4, 1e-5
CROSS_DEVICE_RTOL, CROSS_DEVICE_ATOL = 1e-5, 0.0
PERTURBATION = 1e-6

# Shared by every algorithm: a small LEAF Synthetic(1, 1) population (20 clients of 45..711
# examples, 344 test examples), multinomial logistic regression, 5 local steps of batch 10 at
# client_lr 0.03 (at 0.1 some configurations amplified a 1e-6 change of their start past the
# tolerance: fedalign_prox 3e-4, fedprox_priority 7e-5, fedsoftmax 2e-5).
COMMON = dict(dataset="synthetic", model="logreg", num_clients=20, local_steps=5,
              batch_size=10, client_lr=0.03, train_eval_examples=0)
SYNC = dict(rounds=6, eval_every=2)            # 4 evaluations: rounds 0, 2, 4, 6
ASYNC = dict(rounds=40, eval_every=10)         # server events; evaluations at 0, 10, ..., 40
AVAIL = dict(availability="sine", availability_period=4, availability_p_min=0.1)

# name -> overrides on top of COMMON and SYNC/ASYNC; the comment says what it exercises. An
# algorithm without an entry runs at its declared defaults.
CONFIGS = {
    # Synchronous FedAvg family and client unavailability.
    "fedavg": dict(participation="uniform", clients_per_round=5, weighting="data_size",
                   server_opt="momentum", server_momentum=0.5),  # data weights, FedAvgM
    "fedavg_all": dict(AVAIL),                   # averages over all n under sine availability
    "fedavg_known": dict(AVAIL),                 # the oracle 1 / p_i^t weights
    "fedau": dict(AVAIL, fedau_k=2),             # interval estimates, cutoff K reached
    "f3ast": dict(AVAIL, f3ast_budget=3, f3ast_beta=0.1),  # budgeted least-selected clients
    "fedawe": dict(AVAIL, client_lr_schedule="inv_sqrt", client_lr_decay_rounds=2),
    "mifa": dict(availability="markov", markov_a=0.3, availability_p_min=0.1),
    "fedvarp": dict(participation="bernoulli", participation_prob=0.3),
    # Fed-EF: compressors and error feedback.
    "fedsgd": dict(participation="uniform", clients_per_round=5, compressor="stoc",
                   stoc_bits=2, error_feedback=False),      # direct stochastic quantization
    "fedams": dict(participation="uniform", clients_per_round=5, compressor="hvsign",
                   compress_k=0.1, server_lr=0.03),         # AMSGrad, sign compression + EF
    "fedef_sgd": dict(participation="uniform", clients_per_round=5, compressor="topk",
                      compress_k=0.05, ef_restart_after=2, ef_restart_from=2),
    "fedef_ams": dict(participation="uniform", clients_per_round=5, compressor="topk",
                      compress_k=0.05, down_compressor="topk", down_compress_k=0.2,
                      server_lr=0.03),                      # two-way compression
    # Asynchronous: one round is one server event.
    "area": dict(async_rates="normal", async_rate_std=3.0),
    "fedbuff": dict(fedbuff_staleness="sqrt", async_delta=3),
    "asfedavg": dict(asfedavg_mode="model_average", async_delay="lognormal"),
    "mifa_async": dict(aggregation="poisson"),
    "sfedavg": dict(async_delta=5, sfedavg_weighting="data"),
    # Loss-aware aggregation.
    "fedmax": dict(participation="uniform", clients_per_round=8, lr_decay_per_round=0.9),
    "fedmax_k": dict(participation="uniform", clients_per_round=8, fedmax_k=3),
    "fedsoftmax": dict(participation="uniform", clients_per_round=8, softmax_beta=2.0,
                       alpha_floor=0.1),
    "fednova": dict(participation="uniform", clients_per_round=8, local_epochs=1.0,
                    batch_size=50),              # unequal local step counts (1..15)
    # Prioritized FL: priority clients chosen from --partition_seed.
    "fedalign": dict(num_priority=4, warmup_rounds=2, align_epsilon=0.3),
    "fedavg_priority": dict(num_priority=4, priority_fraction=0.5),
    "fedavg_all_clients": dict(num_priority=4, free_fraction=0.5),
    "local_model": dict(num_priority=4),
    "fedalign_prox": dict(num_priority=4, warmup_rounds=2, align_epsilon=0.3,
                          align_score="loss"),
    "fedprox_priority": dict(num_priority=4),
    "fedprox_all_clients": dict(num_priority=4, free_fraction=0.5),
    # The standard baselines.
    "fedprox": dict(participation="uniform", clients_per_round=5, prox_mu=0.1,
                    straggler_fraction=0.5,   # partial work of 3 stragglers of 5 kept
                    weighting="data_size"),   # the paper's weights
    "scaffold": dict(participation="uniform", clients_per_round=5, local_epochs=1.0),
    "feddyn": dict(participation="uniform", clients_per_round=5, feddyn_alpha=0.1),
    "qfedavg": dict(participation="uniform", clients_per_round=5, qffl_q=2.0),
    "dp_fedavg": dict(participation="bernoulli", participation_prob=0.3, dp_clip=0.5,
                      dp_noise_multiplier=0.05),  # clipped updates, noise on their sum
    "dp_fedavg_adaptive": dict(participation="bernoulli", participation_prob=0.3, dp_clip=0.5,
                               dp_noise_multiplier=0.05),  # E|C_t| = 6: sigma_b = 0.3
    "ditto": dict(participation="uniform", clients_per_round=5, holdout_fraction=0.25,
                  ditto_lambda=0.5),
    # Mime: the server's statistics in every client step (Mime: and the control variate).
    "mime": dict(participation="uniform", clients_per_round=5, mime_momentum=0.5),
    "mime_lite": dict(participation="uniform", clients_per_round=5, mime_opt="adam",
                      client_lr=0.003, weighting="data_size"),  # Adam's state frozen
    # Personalization, part 1: a part of the model per client (scored on its own test data).
    "fedper": dict(participation="uniform", clients_per_round=5, holdout_fraction=0.25,
                   model="mlp", mlp_hidden=(8,)),      # the output layer kept per client
    "fedrep": dict(participation="uniform", clients_per_round=5, holdout_fraction=0.25,
                   model="mlp", mlp_hidden=(8,), head_steps=3),  # head steps, then body's
    "fedbn": dict(participation="uniform", clients_per_round=5, holdout_fraction=0.25,
                  model="mlp_bn", mlp_hidden=(8,),     # batch norm kept per client
                  sampling="shuffle_drop_last"),  # full batches: a one-row batch's zero
                  # variance amplifies rounding (1 vs 4 devices: 1e-5 with partial batches)
    "fedexp": dict(participation="uniform", clients_per_round=5),  # eta_g from 5 updates
    "ifca": dict(participation="uniform", clients_per_round=5, holdout_fraction=0.25,
                 ifca_clusters=2),             # each client's pick, scored on its own data
    # Personalization, part 2 (scored on each client's own test data).
    "apfl": dict(participation="uniform", clients_per_round=5, holdout_fraction=0.25,
                 apfl_alpha=0.5),                  # the adaptive alpha, projected to [0, 1]
    "pfedme": dict(participation="uniform", clients_per_round=5, holdout_fraction=0.25,
                   pfedme_lambda=5.0, pfedme_k=3, pfedme_beta=1.5),  # beta != 1
    "perfedavg_fo": dict(participation="uniform", clients_per_round=5, holdout_fraction=0.25,
                         perfedavg_alpha=0.05),
    "perfedavg_hf": dict(participation="uniform", clients_per_round=5, holdout_fraction=0.25,
                         perfedavg_alpha=0.05),
}


def flags(name: str) -> dict:
  """The settings ``name``'s reference run gives (everything else is declared defaults), as
  JSON holds them (a tuple as a list), so they compare equal to a reference file's."""
  from fedjax_bench import algorithms
  schedule = ASYNC if algorithms.get(name).kind == algorithms.ASYNCHRONOUS else SYNC
  return json.loads(json.dumps({"algo": name, **COMMON, **schedule, **CONFIGS.get(name, {})}))


def config(name: str):
  """``name``'s reference run's Config, as the command line would resolve its flags."""
  from fedjax_bench import config as config_lib
  return config_lib.resolve(flags(name), seeds=SEEDS)


def perturbed_start(build, relative: float):
  """``build`` whose algorithm starts from its server parameters, and the per-client copies
  of them in its client states (local models, memories), multiplied by 1 + relative * z,
  z ~ N(0, 1) per entry from a fixed key (zeros stay zero). Other client statistics (F3AST's
  equal selection rates, say) are left alone: perturbing them breaks exact ties that no
  CPU's rounding breaks."""
  import jax
  import jax.numpy as jnp

  def perturb(tree, salt, keep=lambda x: True):
    leaves, treedef = jax.tree.flatten(tree)
    key = jax.random.fold_in(jax.random.PRNGKey(12345), salt)
    out = [x * (1 + relative * jax.random.normal(jax.random.fold_in(key, j), x.shape,
                                                 x.dtype))
           if jnp.issubdtype(x.dtype, jnp.inexact) and keep(x) else x
           for j, x in enumerate(leaves)]
    return jax.tree.unflatten(treedef, out)

  def perturbed(hp):
    alg = build(hp)

    def init(key):
      server, clients = alg.init(key)
      shapes = {x.shape for x in jax.tree.leaves(server.params)}
      copies = lambda x: x.ndim >= 1 and x.shape[1:] in shapes
      return (server._replace(params=perturb(server.params, 0)),
              perturb(clients, 1, copies))

    return alg._replace(init=init)

  return perturbed


def compute(name: str, devices=None, seeds=SEEDS, perturbation: float = 0.0) -> dict:
  """Runs ``name``'s reference config: {"rounds": [...], metric: [evaluation][seed], ...}
  for ``METRICS``, plus "seconds" (compile and run, not compared). ``perturbation``: start
  from parameters perturbed by that much, relative (`perturbed_start`)."""
  from fedjax_bench import engine, experiment
  t0 = time.perf_counter()
  cfg = config(name)
  exp = experiment.setup(cfg, seeds=list(seeds))
  build = perturbed_start(exp.build, perturbation) if perturbation else exp.build
  out = engine.run(build, exp.task, exp.hparams, seeds=list(seeds), rounds=cfg.eval.rounds,
                   eval_every=cfg.eval.eval_every, devices=devices)
  h = out.history
  curves = {"rounds": [int(r) for r in h.rounds]}
  for metric in METRICS:
    curves[metric] = np.asarray(h.metrics[metric][:, 0, :], np.float64).tolist()  # [E, S]
  curves["seconds"] = time.perf_counter() - t0
  curves["compile_seconds"] = out.timing["compile_seconds"]
  return curves


def compute_all(names=None, devices=None, on_done=None) -> dict:
  """{name: compute(name)} for ``names`` (default: every algorithm)."""
  from fedjax_bench import algorithms
  result = {}
  for name in names or list(algorithms.ALGORITHMS):
    result[name] = compute(name, devices)
    if on_done is not None:
      on_done(name, result[name])
  return result


def record(name: str, curves: dict, perturbed: dict) -> dict:
  """The committed file's content for ``name``: its ``curves`` and those of the same run
  started ``PERTURBATION`` away (``perturbed``, both ``compute``'s output)."""
  import jax
  return {"algo": name, "flags": flags(name), "seeds": list(SEEDS),
          "rounds": curves["rounds"], "curves": {m: curves[m] for m in METRICS},
          "perturbed_start": {"relative": PERTURBATION, "rounds": perturbed["rounds"],
                              "curves": {m: perturbed[m] for m in METRICS}},
          "tolerance": {"rtol": RTOL, "atol": ATOL},
          "generated_with": {"jax": jax.__version__, "backend": "cpu", "devices": 1}}


def path(name: str, directory=None) -> Path:
  return Path(directory or REFERENCE_DIR) / f"{name}.json"


def load(name: str, directory=None) -> dict:
  """The committed reference of ``name`` (FileNotFoundError when there is none)."""
  with open(path(name, directory)) as f:
    return json.load(f)


def _array(values) -> np.ndarray:
  return np.array([[np.nan if v is None else v for v in row] for row in values], np.float64)


def differences(expected: dict, actual: dict, rtol: float = RTOL,
                atol: float = ATOL) -> dict:
  """Per metric: {"max_abs", "max_rel", "ok"} of ``actual`` against ``expected`` (both
  {"rounds", metric: [evaluation][seed]}: a committed file's ``expected_curves`` or
  ``compute``'s output). ok: ``|actual - expected| <= atol + rtol * |expected|``
  everywhere. Other rounds or shapes are never ok; a NaN matches only a NaN."""
  out = {}
  same_rounds = list(expected["rounds"]) == list(actual["rounds"])
  for metric in METRICS:
    e, a = _array(expected[metric]), _array(actual[metric])
    if not same_rounds or e.shape != a.shape:
      out[metric] = {"max_abs": float("inf"), "max_rel": float("inf"), "ok": False}
      continue
    both_nan = np.isnan(e) & np.isnan(a)
    diff = np.where(both_nan, 0.0, np.abs(a - e))
    diff = np.where(np.isnan(diff), np.inf, diff)  # a NaN against a number
    with np.errstate(divide="ignore", invalid="ignore"):
      rel = np.where(diff == 0, 0.0, diff / np.abs(np.where(both_nan, 1.0, e)))
    rel = np.where(np.isnan(rel), np.inf, rel)
    ok = bool(np.all(diff <= atol + rtol * np.abs(np.where(both_nan, 0.0, e))))
    out[metric] = {"max_abs": float(diff.max(initial=0.0)),
                   "max_rel": float(rel.max(initial=0.0)), "ok": ok}
  return out


def expected_curves(reference: dict) -> dict:
  """A committed file's curves (or its ``"perturbed_start"``) in ``differences``' form."""
  return {"rounds": reference["rounds"], **reference["curves"]}
