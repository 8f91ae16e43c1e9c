"""The command line: absl flags -> dataset, task, world, algorithm -> engine -> results files.

Bad input exits with status 2 and one line on stderr, before anything is written.
"""

import datetime
import logging
import os
import sys
from typing import Sequence

import numpy as np
from absl import flags

logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)  # no "no TPU" notice

from fedjax_bench import algorithms, checkpoint, data, models, results
from fedjax_bench.algorithms import f3ast, fedavg, fedawe
from fedjax_bench.algorithms import fedalign as _fedalign
from fedjax_bench.core import compression, local, schedules, server_opt
from fedjax_bench.data import pfl_synthetic as _pfl_synthetic
from fedjax_bench.data import priority as _priority
from fedjax_bench.sim import availability, participation
from fedjax_bench.errors import UsageError

_MODULE = "fedjax_bench.cli"
FLAGS = flags.FLAGS

flags.DEFINE_enum("algo", "fedavg", sorted(algorithms.ALGORITHMS), "Algorithm.", module_name=_MODULE)
flags.DEFINE_enum("dataset", "synthetic", list(data.DATASETS), "Dataset.", module_name=_MODULE)
flags.DEFINE_enum("model", "logreg", list(models.MODELS), "Model.", module_name=_MODULE)
flags.DEFINE_enum("partition", None, list(data.PARTITIONS), "How the training set is split "
                  "over clients (default: the dataset's own: natural for synthetic, dirichlet "
                  "for toyfl, iid for image datasets).", module_name=_MODULE)
flags.DEFINE_float("alpha", 0.5, "Dirichlet concentration for --partition=dirichlet "
                   "(smaller: more skewed).", module_name=_MODULE)
flags.DEFINE_integer("shards_per_client", 2, "Label shards per client for --partition=shards.",
                     module_name=_MODULE)
flags.DEFINE_integer("partition_seed", 0, "Seed of the data partition and synthetic data "
                     "(shared by every --seeds run, unless --data_per_seed).",
                     module_name=_MODULE)
flags.DEFINE_bool("data_per_seed", False, "Each seed s draws its own data randomness: the "
                  "partition, generated data, availability phi and asynchronous client rates "
                  "of a one-seed run with --partition_seed=PARTITION_SEED+s, all seeds still in "
                  "one program (the examples are stored once; each run gets index maps). Off: "
                  "the seeds share one draw from --partition_seed.", module_name=_MODULE)
flags.DEFINE_float("synthetic_alpha", 1.0, "LEAF Synthetic(alpha, beta): model heterogeneity.",
                   module_name=_MODULE)
flags.DEFINE_float("synthetic_beta", 1.0, "LEAF Synthetic(alpha, beta): data heterogeneity.",
                   module_name=_MODULE)
flags.DEFINE_integer("num_clients", 100, "Clients in the population.", module_name=_MODULE)
flags.DEFINE_enum("participation", "uniform", list(participation.PARTICIPATIONS),
                  "uniform: --clients_per_round of --num_clients without replacement; full: "
                  "everyone; bernoulli: each client independently with --participation_prob.",
                  module_name=_MODULE)
flags.DEFINE_integer("clients_per_round", 10, "Cohort size for --participation=uniform.",
                     module_name=_MODULE)
flags.DEFINE_float("participation_prob", 0.1, "Probability for --participation=bernoulli.",
                   module_name=_MODULE)
flags.DEFINE_integer("cohort_cap", 0, "Static cohort size for bernoulli participation "
                     "(0: mean + 7 std).", module_name=_MODULE)
flags.DEFINE_enum("availability", "off", ["off", *availability.DYNAMICS],
                  "Client availability: each client is available with its own probability "
                  "p_i^t = p_i * f(t) (FedAWE spec §3); off: --participation decides.",
                  module_name=_MODULE)
flags.DEFINE_enum("availability_probs", "data", ["data", "constant"], "Base p_i: data = "
                  "<label histogram of client i, phi> (FedAWE §3.1); constant = "
                  "--availability_p for every client (the paper's Example 2).",
                  module_name=_MODULE)
flags.DEFINE_enum("availability_phi", "paper", list(availability.PHI_MODES), "Class weights "
                  "phi of the data-correlated p_i: paper = U(0,1) for the first half of the "
                  "classes, U(0,0.5) for the rest, drawn from --partition_seed; stress = 0.9 "
                  "/ 0.1 (the spec's toyfl experiment).", module_name=_MODULE)
flags.DEFINE_alias("toyfl_phi", "availability_phi", module_name=_MODULE)
flags.DEFINE_float("availability_p", 0.5, "p_i of every client for --availability_probs="
                   "constant.", module_name=_MODULE)
flags.DEFINE_float("availability_p_min", 0.0, "Floor on the base p_i (IBM/fedau used 0.02; "
                   "the FedAWE paper none).", module_name=_MODULE)
flags.DEFINE_integer("availability_period", 20, "Period P of staircase/sine/interleaved_sine "
                     "(and of cyclic).", module_name=_MODULE)
flags.DEFINE_float("availability_gamma", 0.3, "Amplitude gamma of the sine dynamics.",
                   module_name=_MODULE)
flags.DEFINE_float("availability_delta0", 0.1, "interleaved_sine: p_i^t below this is 0.",
                   module_name=_MODULE)
flags.DEFINE_float("availability_low", 0.4, "staircase: the factor of the low half-period.",
                   module_name=_MODULE)
flags.DEFINE_float("markov_a", 0.05, "markov: the inactive -> active transition "
                   "probability.", module_name=_MODULE)
flags.DEFINE_integer("rounds", 100, "Communication rounds.", module_name=_MODULE)
flags.DEFINE_integer("local_steps", 10, "Local optimizer steps per round.", module_name=_MODULE)
flags.DEFINE_float("local_epochs", 0.0, "If > 0, each client runs this many epochs of "
                   "ceil(n_i / batch_size) steps (floor, at least 1, with "
                   "--sampling=shuffle_drop_last) instead of --local_steps.", module_name=_MODULE)
flags.DEFINE_integer("batch_size", 32, "Local minibatch size.", module_name=_MODULE)
flags.DEFINE_enum("sampling", "shuffle", list(local.SAMPLINGS), "Local minibatches: shuffled "
                  "epochs with a partial last batch (shuffle), shuffled epochs of full batches "
                  "only, the remainder dropped as PyTorch's drop_last=True (shuffle_drop_last; "
                  "the FedAWE and FedALIGN authors' code), or uniform with replacement.",
                  module_name=_MODULE)
flags.DEFINE_float("client_lr", 0.1, "Client SGD learning rate (eta_0 of a schedule).",
                   module_name=_MODULE)
flags.DEFINE_enum("client_lr_schedule", "constant", list(schedules.SCHEDULES), "Per-round "
                  "client learning rate: constant, or inv_sqrt = client_lr / sqrt(t / "
                  "--client_lr_decay_rounds + 1) (FedAWE's, with 10).", module_name=_MODULE)
flags.DEFINE_integer("client_lr_decay_rounds", 10, "R of --client_lr_schedule=inv_sqrt.",
                     module_name=_MODULE)
flags.DEFINE_float("server_lr", 1.0, "Server learning rate.", module_name=_MODULE)
flags.DEFINE_enum("server_opt", "sgd", list(server_opt.SERVER_OPTS), "Server optimizer on the "
                  "pseudo-gradient: momentum = FedAvgM; adam/yogi/adagrad = FedAdam/FedYogi/"
                  "FedAdagrad as Reddi et al. 2021 Algorithm 2 writes them (no bias correction, "
                  "tau = --server_eps outside the square root, v starts at tau^2); optax_adam/"
                  "optax_yogi = optax's bias-corrected Adam/Yogi; amsgrad = the Fed-EF paper's.",
                  module_name=_MODULE)
flags.DEFINE_float("server_momentum", 0.9, "Momentum for --server_opt=momentum.",
                   module_name=_MODULE)
flags.DEFINE_float("server_beta1", 0.9, "beta1 for the adaptive server optimizers.",
                   module_name=_MODULE)
flags.DEFINE_float("server_beta2", 0.99, "beta2 for adam/yogi/amsgrad/optax_*.",
                   module_name=_MODULE)
flags.DEFINE_float("server_eps", 1e-3, "epsilon (tau) for the adaptive server optimizers.",
                   module_name=_MODULE)
flags.DEFINE_enum("weighting", "uniform", list(fedavg.WEIGHTINGS), "Aggregation weights.",
                  module_name=_MODULE)
flags.DEFINE_float("fedawe_clip", 0.5, "fedawe: clip the averaged echoed update to this L2 "
                   "norm (0.5 as the authors' code; 0: Algorithm 1 as written).",
                   module_name=_MODULE)
flags.DEFINE_enum("fedawe_eval", "mean_local", list(fedawe.EVALS), "fedawe: score the mean of "
                  "all clients' models (the paper's code and theory) or the server model.",
                  module_name=_MODULE)
flags.DEFINE_integer("fedau_k", 50, "fedau: cutoff K on a recorded participation interval.",
                     module_name=_MODULE)
flags.DEFINE_float("f3ast_beta", 1e-3, "f3ast: rate of the selection-rate average.",
                   module_name=_MODULE)
flags.DEFINE_enum("f3ast_variant", "literal", list(f3ast.VARIANTS), "f3ast aggregation "
                  "(reconstructed; BUILD_NOTES.md).", module_name=_MODULE)
flags.DEFINE_integer("f3ast_budget", 0, "f3ast: train only this many available clients, the "
                     "least selected so far (0: all available).", module_name=_MODULE)
flags.DEFINE_enum("compressor", "identity", list(compression.COMPRESSORS), "fedsgd/fedams/"
                  "fedef_*: uplink compressor, per parameter tensor (Fed-EF spec §3).",
                  module_name=_MODULE)
flags.DEFINE_float("compress_k", 0.01, "Fraction kept by topk/hvsign/randk: "
                   "max(1, floor(k d_i)) entries of each tensor.", module_name=_MODULE)
flags.DEFINE_integer("stoc_bits", 4, "Bits per coordinate of --compressor=stoc (QSGD).",
                     module_name=_MODULE)
flags.DEFINE_enum("stoc_norm", "layer", list(compression.STOC_NORMS), "stoc: one norm per "
                  "tensor or one for the whole model.", module_name=_MODULE)
flags.DEFINE_enum("hvsign_scaling", "support", list(compression.HVSIGN_SCALINGS), "hvsign: "
                  "scale by mean |x| over the kept entries, or ||x_S||_1 / d_i.",
                  module_name=_MODULE)
flags.DEFINE_bool("count_indices", False, "Count index bits of sparse messages (the paper "
                  "does not).", module_name=_MODULE)
flags.DEFINE_bool("error_feedback", True, "fedsgd/fedams: keep each client's compression "
                  "error and add it back next time (false: direct compression).",
                  module_name=_MODULE)
flags.DEFINE_integer("ef_restart_after", 0, "Error restarting: zero a client's error last "
                     "updated more than S rounds ago (0: off).", module_name=_MODULE)
flags.DEFINE_integer("ef_restart_from", 0, "Error restarting starts at this round.",
                     module_name=_MODULE)
flags.DEFINE_enum("down_compressor", "none", ["none", *compression.COMPRESSORS], "Two-way "
                  "compression: the server's compressor, with server-side error feedback.",
                  module_name=_MODULE)
flags.DEFINE_float("down_compress_k", 0.01, "--compress_k of the downlink compressor.",
                   module_name=_MODULE)
flags.DEFINE_integer("down_stoc_bits", 4, "--stoc_bits of the downlink compressor.",
                     module_name=_MODULE)
flags.DEFINE_bool("eval_grad_norm", False, "Evaluations also report grad_norm_sq, the "
                  "squared norm of the full-batch training gradient.", module_name=_MODULE)
flags.DEFINE_float("l2", 0.0, "L2 regularization (nu/2)||theta||^2 added to every local "
                   "loss and to train_loss (AREA's MNIST problem: 1e-3).", module_name=_MODULE)
flags.DEFINE_bool("logreg_bias", True, "--model=logreg has a bias (AREA's problem: none).",
                  module_name=_MODULE)
flags.DEFINE_bool("optimality_gap", False, "Solve for f* once (cached) and report "
                  "optimality_gap = train_loss - f*, and dist_sq/rel_dist_sq to theta*; "
                  "train_loss is then over all training examples.", module_name=_MODULE)
flags.DEFINE_enum("quadratic_variant", "heterogeneous", list(data.QUADRATIC_VARIANTS),
                  "--dataset=quadratic: heterogeneous = AREA's 1/2 (100 i x - 1)^2 over "
                  "--num_clients clients; two_clients = (x - 1)^2 and (x + 1)^2.",
                  module_name=_MODULE)
flags.DEFINE_float("sim_time", 0.0, "Asynchronous algorithms (area, fedbuff, asfedavg, "
                   "mifa_async, sfedavg): simulated time horizon T; events after T change "
                   "nothing, and without --rounds the run lasts about T (0: --rounds events).",
                   module_name=_MODULE)
flags.DEFINE_integer("async_delta", 4, "Async: aggregate every this many client messages "
                     "(Delta; sfedavg: clients per synchronous round).", module_name=_MODULE)
flags.DEFINE_enum("async_rates", "uniform", ["uniform", "normal"], "Async: client update rates "
                  "lambda_i: all --async_rate, or N(--async_rate, --async_rate_std) clipped at "
                  "--async_min_rate, drawn from --partition_seed.", module_name=_MODULE)
flags.DEFINE_float("async_rate", 10.0, "Async: mean client update rate.", module_name=_MODULE)
flags.DEFINE_float("async_rate_std", 5.0, "Async: std of --async_rates=normal.",
                   module_name=_MODULE)
flags.DEFINE_float("async_min_rate", 0.5, "Async: rates below this are clipped to it.",
                   module_name=_MODULE)
flags.DEFINE_enum("async_delay", "exponential", ["exponential", "lognormal", "pareto"],
                  "Async: law of the time between a client's messages (mean 1/lambda_i).",
                  module_name=_MODULE)
flags.DEFINE_float("async_delay_shape", 0.0, "Async: shape of lognormal (sigma) or pareto "
                   "(tail index) delays (0: 1 and 1.5).", module_name=_MODULE)
flags.DEFINE_enum("aggregation", "count", ["count", "poisson"], "Async: aggregate after "
                  "--async_delta messages, or at Poisson aggregation events (the theory's).",
                  module_name=_MODULE)
flags.DEFINE_float("async_agg_rate", 0.0, "Async: rate of --aggregation=poisson events (0: "
                   "sum of rates / Delta).", module_name=_MODULE)
flags.DEFINE_enum("grad_scale", "data_weight", ["data_weight", "none"], "Async: the client "
                  "oracle is w_i grad f_i with w_i = n_i / N (AREA spec §1), or unscaled.",
                  module_name=_MODULE)
flags.DEFINE_bool("send_after_aggregation", False, "Async: the client that triggers an "
                  "aggregation receives the new model (default: the one before).",
                  module_name=_MODULE)
flags.DEFINE_bool("iterate_form_init", False, "area: the paper's iterate form (2)-(4): a "
                  "client's first message is zero and every message lags one event.",
                  module_name=_MODULE)
flags.DEFINE_float("area_lr_power", 0.0, "area: diminishing stepsize alpha0 / (k+1)^beta "
                   "over client messages k (0: constant).", module_name=_MODULE)
flags.DEFINE_enum("projection", "none", ["none", "ball", "box"], "Async: project every local "
                  "step onto a ball of --projection_radius or the box [-R, R].",
                  module_name=_MODULE)
flags.DEFINE_float("projection_radius", 1.0, "Async: R of --projection.", module_name=_MODULE)
flags.DEFINE_enum("fedbuff_divisor", "buffer", ["buffer", "num_clients"], "fedbuff: divide "
                  "the buffer by Delta or by n.", module_name=_MODULE)
flags.DEFINE_enum("fedbuff_staleness", "none", ["none", "sqrt"], "fedbuff: weight a delta of "
                  "staleness tau by 1 or 1/sqrt(1 + tau).", module_name=_MODULE)
flags.DEFINE_enum("asfedavg_mode", "model_average", ["model_average", "async_sgd"],
                  "asfedavg: average the Delta buffered models, or apply each delta at once.",
                  module_name=_MODULE)
flags.DEFINE_enum("sfedavg_weighting", "uniform", ["uniform", "data"], "sfedavg: uniform mean "
                  "of the sampled models, or weighted by data size.", module_name=_MODULE)
flags.DEFINE_integer("client_width", -1, "Clients trained at once (vmapped) per step of a loop "
                     "over the cohort: 0 = the whole cohort, -1 = auto (4 on CPU, 0 on "
                     "GPU/TPU). Changes speed, not results.", module_name=_MODULE)
flags.DEFINE_bool("zero_init", False, "Start from all-zero weights (--model=logreg only; the "
                  "FedAWE spec's toyfl experiment; the default of the asynchronous algorithms "
                  "on MNIST, AREA's x0 = 0).", module_name=_MODULE)
flags.DEFINE_bool("augment", True, "Apply the dataset's training augmentation (svhn: random "
                  "crop; cifar10, cinic10: crop and flip; none for the others).",
                  module_name=_MODULE)
flags.DEFINE_bool("batchwise_augmentation", False, "One crop/flip per minibatch instead of "
                  "per image (what the FedAWE authors' code does).", module_name=_MODULE)
flags.DEFINE_list("mlp_hidden", ["200", "200"], "Hidden widths of --model=mlp.",
                  module_name=_MODULE)
flags.DEFINE_string("seeds", "1", "N runs seeds 0..N-1 together; a comma list (5,7) names them.",
                    module_name=_MODULE)
flags.DEFINE_multi_string("sweep", [], "A hyperparameter grid run in one program, like seeds: "
                          "NAME:V1,V2,... (repeat the flag for a product grid), e.g. "
                          "--sweep=client_lr:0.01,0.03,0.1. Scalars that do not shape "
                          "arrays (learning rates, epsilon, mu, beta, ...).",
                          module_name=_MODULE)
flags.DEFINE_integer("eval_every", 10, "Rounds between evaluations.", module_name=_MODULE)
flags.DEFINE_integer("final_window", 0, "`final` in summary.json averages the evaluations of "
                     "the last this many rounds (0: the last evaluation).", module_name=_MODULE)
flags.DEFINE_integer("train_eval_examples", 10000, "train_loss is scored on a fixed random "
                     "subset of this many training examples (0: all).", module_name=_MODULE)
flags.DEFINE_string("output_dir", None, "Where the run's files go (default results/runs/NAME).",
                    module_name=_MODULE)
flags.DEFINE_string("name", None, "Run name (default ALGO_DATASET_MODEL).", module_name=_MODULE)
flags.DEFINE_string("data_dir", None, "TFDS data dir (default $TFDS_DATA_DIR, then TFDS's).",
                    module_name=_MODULE)
flags.DEFINE_string("cache_dir", None, "Converted-dataset cache (default $FEDJAX_BENCH_CACHE, "
                    "then ~/.cache/fedjax_bench).", module_name=_MODULE)

# --- loss-aware aggregation (spec 003_hetero_agg) -------------------------------------------
flags.DEFINE_integer("fedmax_k", 10, "fedmax_k: uniform weight on the k clients with the "
                     "largest loss at the global model.", module_name=_MODULE)
flags.DEFINE_float("softmax_beta", 1.0, "fedsoftmax: alpha_i ∝ p_i exp(beta * loss_i) "
                   "(beta = 1/T; 0 is FedAvg with alpha = p).", module_name=_MODULE)
flags.DEFINE_float("softmax_temperature", 0.0, "fedsoftmax: the paper's temperature T; if > 0, "
                   "--softmax_beta = 1/T.", module_name=_MODULE)
flags.DEFINE_float("alpha_floor", 0.0, "fedmax, fedmax_k, fedsoftmax: alpha <- (1 - eps) "
                   "alpha + eps p, so every client keeps at least eps of its p (spec §4.5).",
                   module_name=_MODULE)
flags.DEFINE_float("lr_decay_per_round", 1.0, "Synchronous algorithms: the client learning "
                   "rate of round t is multiplied by this^t, on top of --client_lr_schedule "
                   "(the FedSoftMax paper: 0.99).", module_name=_MODULE)
flags.DEFINE_bool("record_alpha", False, "fedmax, fedmax_k, fedsoftmax: report every client's "
                  "aggregation weight each round (metrics alpha_0000, alpha_0001, ...).",
                  module_name=_MODULE)
flags.DEFINE_integer("shard_size", 0, "--partition=noniid|very_noniid|iid_unbalanced: examples "
                     "per label shard (0: 60, 100, 60).", module_name=_MODULE)
flags.DEFINE_integer("pool_size", 10000, "--partition=noniid|very_noniid|iid_unbalanced: a "
                     "seeded random subset of this many training examples is partitioned "
                     "(0: all).", module_name=_MODULE)
flags.register_validator("alpha_floor", lambda v: 0 <= v <= 1, "--alpha_floor must be in [0, 1]")

# --- checkpoints, resume and checks -----------------------------------------------------------
flags.DEFINE_integer("checkpoint_every", 1, "Save the whole simulation to OUTPUT_DIR/"
                     "checkpoint.npz after every this many evaluations (0: never); it is "
                     "removed when the run's results are written.", module_name=_MODULE)
flags.DEFINE_bool("check_only", False, "Parse and check the flags as a run would (load the "
                  "data, build the algorithm, trace one round, check flags it does not read), "
                  "then exit without training or writing anything.", module_name=_MODULE)
flags.DEFINE_bool("resume", False, "Continue from OUTPUT_DIR/checkpoint.npz, bit-identically "
                  "to a run never stopped (--rounds may grow); a finished run in OUTPUT_DIR is "
                  "skipped.", module_name=_MODULE)
flags.register_validator("checkpoint_every", lambda v: v >= 0, "--checkpoint_every must be >= 0")

# --- several processes (multi-host) ---------------------------------------------------------
flags.DEFINE_bool("distributed", False, "Run as one process of a multi-host job: calls "
                  "jax.distributed.initialize() (on TPU pods and SLURM/Open MPI it finds its "
                  "peers itself; elsewhere give --coordinator_address, --num_processes and "
                  "--process_id). Runs are sharded over every process's devices; process 0 "
                  "writes the results.", module_name=_MODULE)
flags.DEFINE_string("coordinator_address", None, "--distributed: host:port of process 0.",
                    module_name=_MODULE)
flags.DEFINE_integer("num_processes", 0, "--distributed: how many processes (0: detect).",
                     module_name=_MODULE)
flags.DEFINE_integer("process_id", -1, "--distributed: this process's index (-1: detect).",
                     module_name=_MODULE)

# --- prioritized FL, FedALIGN (spec 004_fedalign) --------------------------------------------
flags.DEFINE_integer("num_priority", 0, "Prioritized FL: priority clients, chosen at random "
                     "(0: 2 for fedalign and its baselines; synth_pfl: 10, gaussmix_shards: "
                     "2). The test set is resampled to their label mix.", module_name=_MODULE)
flags.DEFINE_enum("test_mix", "priority", list(_priority.TEST_MIXES), "With --num_priority: "
                  "the test set's label mix: the priority clients', --local_client's, or the "
                  "official test split as it is.", module_name=_MODULE)
flags.DEFINE_integer("local_client", -1, "local_model (and --test_mix=local_client): the free "
                     "client (-1: the authors' rule, the first free client whose first label "
                     "is among the priority clients' first labels).", module_name=_MODULE)
flags.DEFINE_float("align_epsilon", 0.2, "fedalign: admit free client k when |s_k - g| < "
                   "epsilon (accuracy points / 100, or loss).", module_name=_MODULE)
flags.DEFINE_enum("align_score", "accuracy", list(_fedalign.SCORES), "fedalign: the score "
                  "compared with the priority clients'.", module_name=_MODULE)
flags.DEFINE_enum("align_inequality", "strict", list(_fedalign.INEQUALITIES), "fedalign: "
                  "strict (<, so epsilon 0 is FedAvg on the priority clients) or <=.",
                  module_name=_MODULE)
flags.DEFINE_enum("align_eps_schedule", "constant", list(_fedalign.EPS_SCHEDULES),
                  "fedalign: epsilon over rounds; step: --align_eps_late from "
                  "--align_eps_round on; linear_to_zero: from --align_eps_round to "
                  "--align_eps_end_round; exp_decay: times --align_eps_gamma^round.",
                  module_name=_MODULE)
flags.DEFINE_float("align_eps_late", 0.0, "fedalign: epsilon after the step.",
                   module_name=_MODULE)
flags.DEFINE_integer("align_eps_round", 0, "fedalign: the round of the step, or where the "
                     "linear decay starts.", module_name=_MODULE)
flags.DEFINE_integer("align_eps_end_round", 1, "fedalign: where the linear decay reaches 0.",
                     module_name=_MODULE)
flags.DEFINE_float("align_eps_gamma", 0.99, "fedalign: the exp_decay factor per round.",
                   module_name=_MODULE)
flags.DEFINE_integer("selection_batch", 0, "fedalign: score free clients on this many of "
                     "their examples (0: all; the authors' code: 32).", module_name=_MODULE)
flags.DEFINE_integer("warmup_rounds", -1, "Prioritized FL: rounds with the priority clients "
                     "only (-1: 10%% of --rounds).", module_name=_MODULE)
flags.DEFINE_float("prox_mu", 0.0, "Prioritized FL: FedProx term mu/2 ||w - w_global||^2 in "
                   "local training (fedprox_* and fedalign_prox default to 1).",
                   module_name=_MODULE)
flags.DEFINE_float("priority_fraction", 1.0, "Prioritized FL: fraction of the priority "
                   "clients sampled per round.", module_name=_MODULE)
flags.DEFINE_float("free_fraction", 1.0, "Prioritized FL: fraction (or Bernoulli "
                   "probability) of the free clients sampled per round.", module_name=_MODULE)
flags.DEFINE_enum("priority_sampling", "without_replacement",
                  list(_fedalign.PRIORITY_SAMPLINGS), "Prioritized FL: uniform, or K draws "
                  "with replacement proportional to p_k (the theory's).", module_name=_MODULE)
flags.DEFINE_enum("free_sampling", "without_replacement", list(_fedalign.FREE_SAMPLINGS),
                  "Prioritized FL: how free clients are sampled.", module_name=_MODULE)
flags.DEFINE_enum("compat", "none", list(_fedalign.COMPATS), "Prioritized FL: authors_code "
                  "reproduces the released script's server update (spec 004 §2.5).",
                  module_name=_MODULE)
flags.DEFINE_bool("record_admitted", False, "Prioritized FL: report every free client's "
                  "admission (admitted_NNNN, the fraction of a block's rounds).",
                  module_name=_MODULE)
flags.DEFINE_integer("num_shards", 0, "--partition=shards_random: shards (0: num_clients x "
                     "shards_per_client).", module_name=_MODULE)
flags.DEFINE_enum("synth_noise", "groups", list(_pfl_synthetic.NOISES), "synth_pfl: groups "
                  "(aligned, label-shifted and irrelevant free clients) or paper_skew.",
                  module_name=_MODULE)
flags.DEFINE_integer("synth_aligned", 6, "synth_pfl groups: aligned free clients.",
                     module_name=_MODULE)
flags.DEFINE_float("label_skew", 1.5, "synth_pfl paper_skew: label noise skew (0.5, 1.5, 5: "
                   "low, medium, high).", module_name=_MODULE)
flags.DEFINE_float("random_skew", 1.5, "synth_pfl paper_skew: irrelevant data skew.",
                   module_name=_MODULE)
for _name in ("priority_fraction", "free_fraction"):
  flags.register_validator(_name, lambda v: 0 < v <= 1, f"--{_name} must be in (0, 1]")

_POSITIVE = ("async_delta", "async_rate", "async_min_rate", "projection_radius",
             "num_clients", "clients_per_round", "rounds", "batch_size", "eval_every",
             "shards_per_client", "client_lr", "server_lr", "alpha", "local_steps",
             "client_lr_decay_rounds", "availability_period", "fedau_k", "f3ast_beta",
             "fedmax_k", "lr_decay_per_round", "label_skew", "random_skew")
for _name in _POSITIVE:
  flags.register_validator(_name, lambda v: v is None or v > 0, f"--{_name} must be positive")
_NON_NEGATIVE = ("local_epochs", "fedawe_clip", "f3ast_budget", "ef_restart_after",
                 "ef_restart_from", "final_window", "l2", "async_delay_shape", "sim_time",
                 "async_rate_std", "async_agg_rate", "area_lr_power",
                 "softmax_beta", "softmax_temperature", "shard_size", "pool_size",
                 "num_priority", "align_epsilon", "align_eps_late", "align_eps_round",
                 "align_eps_end_round", "align_eps_gamma", "selection_batch", "prox_mu",
                 "num_shards", "synth_aligned")
for _name in _NON_NEGATIVE:
  flags.register_validator(_name, lambda v: v >= 0, f"--{_name} must be >= 0")
flags.register_validator("client_width", lambda v: v >= -1, "--client_width must be >= -1")
for _name in ("compress_k", "down_compress_k"):
  flags.register_validator(_name, lambda v: 0 < v <= 1, f"--{_name} must be in (0, 1]")
for _name in ("stoc_bits", "down_stoc_bits"):
  flags.register_validator(_name, lambda v: v >= 1, f"--{_name} must be >= 1")
flags.register_multi_flags_validator(
    ["algo", "participation", "clients_per_round", "num_clients"],
    lambda f: (f["participation"] not in ("uniform", "uniform_sparse")
               or f["clients_per_round"] <= f["num_clients"]
               or f["algo"] in algorithms.ASYNCHRONOUS + algorithms.PRIORITIZED),
    "--clients_per_round must not exceed --num_clients")


def parse_seeds(text: str) -> list[int]:
  try:
    if "," in text:
      seeds = [int(s) for s in text.split(",") if s.strip()]
    else:
      seeds = list(range(int(text)))
  except ValueError:
    raise UsageError(f"--seeds={text!r} must be a count (3) or a list (5,7)") from None
  if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
    raise UsageError(f"--seeds={text!r} must name at least one distinct non-negative seed")
  return seeds


def parse_sweep(specs: Sequence[str], valid: Sequence[str]) -> list[dict]:
  """['client_lr:0.01,0.1', 'server_lr:1,0.5'] -> the product grid, one dict per point
  ([] without a sweep)."""
  axes = []
  for spec in specs:
    name, sep, values = spec.partition(":")
    if not sep or not values:
      raise UsageError(f"--sweep={spec!r} must look like NAME:V1,V2,...")
    if name not in valid:
      raise UsageError(f"--sweep: {name!r} is not a hyperparameter; valid: "
                       f"{', '.join(sorted(valid))}")
    if name in (a[0] for a in axes):
      raise UsageError(f"--sweep names {name!r} twice")
    try:
      vals = [float(v) for v in values.split(",") if v.strip()]
    except ValueError:
      raise UsageError(f"--sweep={spec!r}: values must be numbers") from None
    if not vals or len(set(vals)) != len(vals):
      raise UsageError(f"--sweep={spec!r} needs distinct values")
    axes.append((name, vals))
  grid = [{}]
  for name, vals in axes:
    grid = [{**point, name: v} for point in grid for v in vals]
  return grid if axes else []


def parse_argv(argv: Sequence[str]) -> list[str]:
  """absl's parser, but a bad flag is one line and exit status 2, not a usage dump."""
  try:
    return FLAGS(argv)
  except flags.Error as e:
    sys.stderr.write(f"error: {e}\n")
    sys.exit(2)


def our_flags() -> dict:
  return {f.name: f.value for f in FLAGS.get_flags_for_module(_MODULE)}


def main(argv: Sequence[str]) -> int:
  try:
    if len(argv) > 1:
      raise UsageError(f"unexpected arguments {' '.join(argv[1:])!r}; flags look like "
                       "--name=value")
    return _run()
  except UsageError as e:
    sys.stderr.write(f"error: {e}\n")
    return 2


def _output_dir(name: str) -> str:
  out = FLAGS.output_dir or os.path.join("results", "runs", name)
  try:
    os.makedirs(out, exist_ok=True)
    probe = os.path.join(out, ".write_probe")
    with open(probe, "w"):
      pass
    os.remove(probe)
  except OSError as e:
    raise UsageError(f"--output_dir={out!r} is not writable ({e.strerror})") from None
  return out


def _run() -> int:
  # Heavy imports wait until the flags are known to be good.
  import jax
  from fedjax_bench import engine
  from fedjax_bench.core import memory

  seeds = parse_seeds(FLAGS.seeds)
  if FLAGS.check_only:
    check_flags()
    print("ok: the flags are valid for this run")
    return 0
  if FLAGS.distributed:
    _initialize_distributed(jax)
  lead = jax.process_index() == 0  # writes files and prints progress
  cfg, given, grid = resolve_flags()
  name = FLAGS.name or f"{cfg['algo']}_{cfg['dataset']}_{cfg['model']}"
  out = _output_dir(name) if lead else FLAGS.output_dir or os.path.join("results", "runs", name)
  fingerprint = run_fingerprint(cfg, seeds, grid)
  ckpt_path = os.path.join(out, checkpoint.FILE)
  if FLAGS.resume and not os.path.exists(ckpt_path):
    finished = _finished_run(out, fingerprint)
    if finished is not None:
      if lead:
        print(f"{out} already holds this run's results; nothing to do (--resume)")
      return finished
  elif os.path.exists(ckpt_path) and not FLAGS.resume:
    raise UsageError(f"{out} holds the checkpoint of an unfinished run; add --resume to "
                     "continue it, or give another --output_dir")
  exp = build_experiment(cfg, given, grid, seeds=seeds)
  dataset, task = exp.dataset, exp.task
  memory.check_run(exp.build, task, exp.hparams, exp.world, len(seeds) * max(len(grid), 1),
                   jax.device_count(), run_data=exp.run_data)
  report = dataset.report()  # with --data_per_seed: seed 0's
  partitions = report if exp.per_seed is None else exp.per_seed.report()

  if lead:
    per_seed = f" (data per seed; sizes are seed {seeds[0]}'s)" if exp.per_seed else ""
    print(f"{name}: {cfg['algo']} on {cfg['dataset']} ({report['num_clients']} clients, "
          f"sizes {report['size_min']}..{report['size_max']}, "
          f"{report['mean_classes_per_client']:.1f} classes/client), {cfg['model']}, "
          f"seeds {seeds}{per_seed}, {jax.device_count()} {jax.default_backend()} device(s)",
          flush=True)
  if grid and lead:
    print(f"sweep: {len(grid)} grid points x {len(seeds)} seeds = {len(grid) * len(seeds)} "
          "runs in one program", flush=True)
  config = {"name": name, "flags": cfg, "seeds": seeds, "grid": grid, "argv": sys.argv,
            "started": datetime.datetime.now().isoformat(timespec="seconds"),
            "fingerprint": fingerprint,
            "environment": results.environment_info(),
            "dataset": _short(report) if exp.per_seed is None else
                       [_short(r) for r in partitions["seeds"]]}
  ckpt = None
  if FLAGS.checkpoint_every or FLAGS.resume:
    if lead and FLAGS.resume and os.path.exists(ckpt_path):
      print(f"resuming from {ckpt_path}", flush=True)
    on_save = (lambda history: results.write_metrics_csv(
        os.path.join(out, results.METRICS_FILE), history)) if lead else None
    ckpt = engine.Checkpointing(ckpt_path, every=FLAGS.checkpoint_every or 1 << 30,
                                fingerprint=fingerprint, resume=FLAGS.resume, on_save=on_save)
  if lead and not (FLAGS.resume and os.path.exists(ckpt_path)):
    results.atomic_write_json(os.path.join(out, results.CONFIG_FILE), config)
  output = engine.run(exp.build, task, exp.hparams, seeds=seeds, rounds=cfg["rounds"],
                      eval_every=cfg["eval_every"], grid=grid or None,
                      on_eval=_print_progress if lead else None, checkpoint=ckpt,
                      run_data=exp.run_data)
  if not lead:
    return _divergence_status(output, grid, out)
  results.atomic_write_json(os.path.join(out, "partition.json"), partitions)
  summary = results.write_run(out, config=config, history=output.history,
                              final_window=cfg["final_window"], timing=output.timing,
                              extra={"diverged": _diverged_list(output, grid)})
  if os.path.exists(ckpt_path):
    os.remove(ckpt_path)  # the results now hold everything it did
  final = summary["final"]
  points = ([(f"{_point_label(p['hparams'])}: ", i) for i, p in enumerate(final["test_accuracy"])]
            if grid else [("", None)])
  for label, i in points:
    pick = lambda stat: stat if i is None else stat[i]
    gap = (f", optimality_gap {_fmt(pick(final['optimality_gap']), '.3e')}"
           if "optimality_gap" in final else "")
    print(f"{label}test_accuracy {_fmt(pick(final['test_accuracy']))}, train_loss "
          f"{_fmt(pick(final['train_loss']))}{gap}")
  print(f"done: {_rate(output.timing['rounds_per_second'])}, "
        f"compile {output.timing['compile_seconds']:.1f}s; results in {out}")
  return _divergence_status(output, grid, out)


def resolve_flags() -> tuple[dict, set, list]:
  """(config with the paper defaults filled in, the names the user gave, the sweep grid)
  from the parsed flags."""
  from fedjax_bench import experiment
  given = {f.name for f in FLAGS.get_flags_for_module(_MODULE) if f.present}
  cfg = experiment.with_defaults(our_flags(), given)
  grid = parse_sweep(FLAGS.sweep, experiment.sweepable(cfg))
  for swept in grid[0] if grid else ():
    if swept in given:
      raise UsageError(f"--{swept} is given and swept by --sweep; give one")
  return cfg, given, grid


def build_experiment(cfg: dict, given: set, grid: list, seeds: list, dataset=None):
  """The experiment of a resolved configuration, after every check that needs it built:
  sweepable hyperparameters and flags the algorithm does not read. ``dataset`` stands in
  for loading the configured one (tests of flagfiles whose data is not here)."""
  from fedjax_bench import experiment
  exp = experiment.setup(cfg, dataset=dataset, seeds=seeds,
                         participation_given=FLAGS["participation"].present)
  experiment.check_sweepable(exp, grid)
  experiment.check_flags_used(exp, cfg["algo"], given)
  return exp


def check_flags(dataset=None):
  """Every check a run makes of the parsed flags before it trains (`--check_only`)."""
  seeds = parse_seeds(FLAGS.seeds)
  cfg, given, grid = resolve_flags()
  return build_experiment(cfg, given, grid, seeds, dataset=dataset)


def _short(report: dict) -> dict:
  """A partition report without its per-client lists (for config.json)."""
  return {k: v for k, v in report.items() if k not in ("client_sizes", "label_histograms")}


# Flags that change neither the numbers nor which runs there are: a checkpoint written
# with other values of these still resumes. (--rounds may grow to extend a run.)
_NOT_IN_FINGERPRINT = ("output_dir", "name", "resume", "check_only", "checkpoint_every",
                       "data_dir", "cache_dir", "distributed", "coordinator_address",
                       "num_processes", "process_id", "rounds", "seeds", "sweep")


def run_fingerprint(cfg: dict, seeds: list[int], grid: list[dict]) -> dict:
  """What identifies a run for --resume: every flag that shapes its numbers, the seeds and
  the grid (a JSON round trip, so it compares equal to the one read back from a file)."""
  import json
  fp = {k: v for k, v in sorted(cfg.items()) if k not in _NOT_IN_FINGERPRINT}
  fp.update(seeds=list(seeds), grid=list(grid))
  return json.loads(json.dumps(fp))


def _finished_run(out: str, fingerprint: dict):
  """The exit status of the finished run of this configuration in `out`, or None if there is
  none; a finished run of another configuration there is an error."""
  path = os.path.join(out, results.SUMMARY_FILE)
  if not os.path.exists(path):
    return None
  try:
    summary = results.read_summary(out)
  except (OSError, ValueError, UsageError):
    return None  # a damaged summary: run again, overwriting it
  saved = summary.get("config", {}).get("fingerprint")
  if saved != fingerprint:
    raise UsageError(f"--resume: {out} holds the results of another configuration; give "
                     "the same flags, or another --output_dir")
  return 1 if summary.get("diverged") else 0


def _run_label(hparams: dict, seed: int) -> str:
  return f"{_point_label(hparams)} seed {seed}" if hparams else f"seed {seed}"


def _diverged_list(output, grid) -> list:
  """[{"hparams", "seed", "round"}] for every run that diverged (summary.json)."""
  seeds = output.history.seeds
  return [{"hparams": grid[g] if grid else {}, "seed": seeds[s], "round": int(r)}
          for (g, s), r in np.ndenumerate(output.diverged) if r > 0]


def _point_label(hparams: dict) -> str:
  return " ".join(f"{k}={v:g}" for k, v in hparams.items())


def _initialize_distributed(jax) -> None:
  kwargs = {}
  if FLAGS.coordinator_address:
    if FLAGS.num_processes < 1 or FLAGS.process_id < 0:
      raise UsageError("--coordinator_address needs --num_processes and --process_id")
    kwargs = dict(coordinator_address=FLAGS.coordinator_address,
                  num_processes=FLAGS.num_processes, process_id=FLAGS.process_id)
  # CPU processes need a collective implementation to exchange runs (GPUs/TPUs bring theirs).
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(**kwargs)


def _fmt(stat, spec: str = ".4f") -> str:
  if stat["mean"] is None:
    return "nan"
  return f"{stat['mean']:{spec}} ± {stat['std']:{spec}}"


def _print_progress(p) -> None:
  m = p.metrics
  shown = " ".join(f"{k} {m[k]:.4g}" for k in ("test_accuracy", "test_loss", "train_loss",
                                               "optimality_gap", "cum_time") if k in m)
  eta = datetime.timedelta(seconds=round(p.eta_seconds))
  print(f"round {p.round:>6}/{p.rounds} | {shown} | {_rate(p.rounds_per_second)} | ETA {eta}",
        flush=True)


def _rate(rounds_per_second: float) -> str:
  if rounds_per_second >= 1:
    return f"{rounds_per_second:.1f} rounds/s"
  return f"{1 / max(rounds_per_second, 1e-12):.1f} s/round"


def _divergence_status(output, grid, out) -> int:
  """1, with one line naming the runs that diverged and where, if any did."""
  bad = _diverged_list(output, grid)
  if not bad:
    return 0
  runs = output.diverged.size
  shown = ", ".join(f"{_run_label(d['hparams'], d['seed'])} at round {d['round']}"
                    for d in bad[:4]) + (", ..." if len(bad) > 4 else "")
  rest = "the others ran to the end; " if len(bad) < runs else ""
  sys.stderr.write(f"error: {len(bad)} of {runs} runs diverged (non-finite parameters or loss): "
                   f"{shown}; {rest}results up to the divergence were written to {out}\n")
  return 1
