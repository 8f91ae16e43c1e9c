"""The evaluation, run and output settings (`fedjax_bench.settings`)."""

from fedjax_bench.settings import (NON_NEGATIVE, POSITIVE, PROBABILITY, at_least, section,
                                   setting)


@section("evaluation")
class EvalSettings:
  rounds: int = setting(300, "Communication rounds (asynchronous algorithms: server events).",
                        check=POSITIVE)
  eval_every: int = setting(10, "Rounds between evaluations.", check=POSITIVE)
  final_window: int = setting(0, "`final` in summary.json averages the evaluations of the "
                              "last this many rounds (0: the last evaluation).",
                              check=NON_NEGATIVE)
  train_eval_examples: int = setting(10000, "train_loss is scored on a fixed random subset of "
                                     "this many training examples (0: all).",
                                     check=NON_NEGATIVE)
  eval_grad_norm: bool = setting(False, "Evaluations also report grad_norm_sq, the squared "
                                 "norm of the full-batch training gradient.")
  optimality_gap: bool = setting(False, "Solve for f* once (cached) and report optimality_gap "
                                 "= train_loss - f*, and dist_sq/rel_dist_sq to theta*; "
                                 "train_loss is then over all training examples.")
  finetune_steps: int = setting(0, "Personalization evaluation of the global model (FL-bench's "
                                "and TFF's): at each evaluation every client fine-tunes it with "
                                "this many local SGD steps on its own training data (batches as "
                                "--batch_size and --sampling draw them, from a key of their "
                                "own: the training is unchanged) and is scored on its own test "
                                "data (--holdout_fraction): finetuned_test_accuracy, its std, "
                                "worst and best 10%. 0: off.", check=NON_NEGATIVE)
  finetune_lr: float = setting(0.0, "The fine-tuning SGD step size of --finetune_steps (0: "
                               "the run's --client_lr).", check=NON_NEGATIVE,
                               used_if=lambda ev: ev.finetune_steps > 0)


@section("run and output")
class RunSettings:
  output_dir: str = setting(None, "Where the run's files go (default results/runs/NAME).")
  name: str = setting(None, "Run name (default ALGO_DATASET_MODEL).")
  tensorboard: bool = setting(False, "Also write TensorBoard event files of every metric, one "
                              "run per seed and grid point, under OUTPUT_DIR/tensorboard.")
  compile_cache: bool = setting(True, "Keep compiled programs in JAX's persistent compilation "
                                "cache (CACHE_DIR/xla, or $FEDJAX_BENCH_COMPILE_CACHE): a second "
                                "identical run loads them instead of compiling. Changes no "
                                "number.")
  checkpoint_every: int = setting(1, "Save the whole simulation to OUTPUT_DIR/checkpoint.npz "
                                  "after every this many evaluations (0: never); it is removed "
                                  "when the run's results are written.", check=NON_NEGATIVE)
  checkpoint_max_share: float = setting(
      0.05, "Saves take at most about this share of a run's time: a due save is skipped "
      "until the time since the last one is that save's cost / this share (0: every due "
      "save). A killed run loses the rounds since its last save: one block, or more when a "
      "save is slow next to a block. Changes no number.", check=PROBABILITY)
  resume: bool = setting(False, "Continue from OUTPUT_DIR/checkpoint.npz, bit-identically to "
                         "a run never stopped (--rounds may grow, but a finished run keeps "
                         "no state to extend); a finished run in OUTPUT_DIR is skipped.")
  overwrite: bool = setting(False, "Replace what OUTPUT_DIR holds (the results or checkpoint "
                            "of another configuration, or this one's finished results) "
                            "instead of refusing the run.")
  check_only: bool = setting(False, "Check the settings as a run would (load the data, build "
                             "the algorithm), then exit without training or writing anything.")
  distributed: bool = setting(False, "Run as one process of a multi-host job: calls "
                              "jax.distributed.initialize() (on TPU pods and SLURM/Open MPI it "
                              "finds its peers itself; elsewhere give --coordinator_address, "
                              "--num_processes and --process_id). Runs are sharded over every "
                              "process's devices; process 0 writes the results.")
  coordinator_address: str = setting(None, "--distributed: host:port of process 0.")
  num_processes: int = setting(0, "--distributed: how many processes (0: detect).",
                               check=NON_NEGATIVE)
  process_id: int = setting(-1, "--distributed: this process's index (-1: detect).",
                            check=at_least(-1))
  host_devices: int = setting(
      2, "CPU devices a run is split over (its runs, then each cohort's clients). The "
      "split changes the last digits, and chaotic runs amplify them, so the layout is the "
      "same on every machine whatever its cores, and recorded with the run; 0: one per core "
      "(fastest on many cores, but the numbers then depend on the machine). GPU and TPU runs "
      "use every accelerator; --distributed runs use every process's devices.",
      check=NON_NEGATIVE, used_if=lambda run: not run.distributed)
