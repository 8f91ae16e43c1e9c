"""Speed of vectorized FedAvg against a per-client Python loop (the FedJAX way).

  python benchmarks/speed.py [--models=logreg,mlp] [--rounds=0] [--repeats=5]
                             [--output_dir=results/speed]

Workload: MNIST-shaped generated data, 100 clients x 600 examples, full participation
(100 clients per round), 10 local SGD steps of batch 32, client_lr 0.1, softmax cross
entropy. Both sides train the same model for the same number of rounds per repeat.

* vectorized: engine.run with fedavg.build (one lax.scan over a block of rounds, the
  cohort vmapped), eval_every = rounds, so each timed block ends with one evaluation
  (1000 test + 1000 train examples). Repeats are consecutive blocks of one engine.run
  after one warm-up block, so the program compiles once; compile time is reported apart.
* loop: for each client, for each step, 32 indices drawn with NumPy, x/y gathered on
  the host and passed to a jitted step(params, x, y) -> params; the deltas of the
  cohort are averaged by a jitted function; one block_until_ready per round. Its
  repeats run between the vectorized (replacement) blocks, so both sides share the
  machine's load at the time; the load average is recorded.

Throughput is client-steps per second (clients x local steps x rounds / seconds), the
median over repeats (the best is recorded too).
"""

import os
import statistics
import sys
import time
from typing import Callable, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fedjax_bench import host_devices  # noqa: E402

host_devices.use_all_cores()

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from fedjax_bench import engine, results  # noqa: E402
from fedjax_bench.algorithms import fedavg  # noqa: E402
from fedjax_bench.core import cohort  # noqa: E402
from fedjax_bench.core import task as task_lib  # noqa: E402
from fedjax_bench.data.federated import Dataset, FederatedData  # noqa: E402
import workloads  # noqa: E402  (benchmarks/, on sys.path as the script's directory)
from fedjax_bench.sim import participation, world as world_lib  # noqa: E402

NUM_CLIENTS = 100
EXAMPLES_PER_CLIENT = 600
TEST_EXAMPLES = 1000
LOCAL_STEPS = 10
BATCH_SIZE = 32
CLIENT_LR = 0.1
TARGETS = {"logreg": 5.0, "mlp": 1.5}
# Rounds per repeat when --rounds=0: about 1-2 s per repeat on a 2-core CPU.
DEFAULT_ROUNDS = {"logreg": 20, "mlp": 4}

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["logreg", "mlp"], "Models to time: logreg, mlp.")
flags.DEFINE_integer("rounds", 0, "Rounds per timed repeat; 0: a per-model default "
                     f"({DEFAULT_ROUNDS}).")
flags.DEFINE_integer("repeats", 5, "Timed repeats per measurement; the median is reported.")
flags.DEFINE_string("output_dir", "results/speed", "Where speed.json and speed.md go.")
flags.DEFINE_integer("client_width", -1, "Vectorized side: clients vmapped at once "
                     "(0: whole cohort; -1: the suite's default for this backend).")
flags.DEFINE_integer("seed", 0, "Seed of the generated data and of the runs.")


def make_dataset(seed: int) -> Dataset:
  return workloads.mnist_shaped(seed, NUM_CLIENTS, EXAMPLES_PER_CLIENT, TEST_EXAMPLES)


def make_task(dataset: Dataset, model_name: str) -> task_lib.Task:
  return workloads.task(dataset, model_name, train_eval_examples=TEST_EXAMPLES)


def client_steps_per_second(rounds: int, seconds: float) -> float:
  return rounds * NUM_CLIENTS * LOCAL_STEPS / seconds


# ---------------------------------------------------------------------------
# Vectorized: the suite's own engine.


def time_vectorized(task: task_lib.Task, sampling: str, rounds: int, repeats: int,
                    seed: int, between: Optional[Callable[[], None]] = None) -> dict:
  """Seconds of each block of `rounds` rounds (one evaluation each), and compile time.

  One untimed warm-up block runs first. `between` runs after each timed block, outside
  the engine's timed region, so the loop baseline can share the same machine load.
  """
  world = world_lib.make(participation.full(NUM_CLIENTS),
                         np.full(NUM_CLIENTS, LOCAL_STEPS, np.int32))
  hp = {"client_lr": CLIENT_LR, "server_lr": 1.0, "batch_size": BATCH_SIZE,
        "sampling": sampling, "weighting": "uniform", "server_opt": "sgd",
        "client_width": FLAGS.client_width}
  elapsed = []  # cumulative engine-measured seconds after each block

  def on_eval(progress: engine.Progress):
    elapsed.append(progress.round / progress.rounds_per_second)
    if between is not None and len(elapsed) > 1:
      between()

  out = engine.run(lambda h: fedavg.build(task, world, h), task, hp, seeds=[seed],
                   rounds=rounds * (repeats + 1), eval_every=rounds, on_eval=on_eval)
  seconds = np.diff(elapsed).tolist()
  return {"seconds": seconds, "warmup_block_seconds": elapsed[0],
          "compile_seconds": out.timing["compile_seconds"],
          "final_client_loss": float(out.history.metrics["client_loss"][-1].mean())}


# ---------------------------------------------------------------------------
# Loop: a jitted SGD step called per client and per step from Python.


def make_loop_fns(task: task_lib.Task):
  def loss(params, x, y):
    logits = task.logits(params, x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

  @jax.jit
  def step(params, x, y):
    grads = jax.grad(loss)(params, x, y)
    return jax.tree.map(lambda p, g: p - CLIENT_LR * g, params, grads)

  @jax.jit
  def server_update(params, client_params):
    """x + mean_i (x_i - x), FedAvg with server SGD at lr 1 and uniform weights."""
    deltas = [jax.tree.map(jnp.subtract, c, params) for c in client_params]
    mean = jax.tree.map(lambda *d: sum(d) / len(d), *deltas)
    return jax.tree.map(jnp.add, params, mean)

  return step, server_update


def loop_round(params, step, server_update, data: FederatedData, rng):
  client_params = []
  for i in range(data.num_clients):
    offset, count = int(data.offsets[i]), int(data.counts[i])
    p = params
    for _ in range(LOCAL_STEPS):
      idx = offset + rng.integers(0, count, BATCH_SIZE)
      p = step(p, data.x[idx], data.y[idx])
    client_params.append(p)
  return jax.block_until_ready(server_update(params, client_params))


class LoopTimer:
  """Warms up (compiles) on construction; each call times `rounds` rounds."""

  def __init__(self, task: task_lib.Task, data: FederatedData, rounds: int, seed: int):
    self.step, self.server_update = make_loop_fns(task)
    self.data, self.rounds = data, rounds
    self.rng = np.random.default_rng(seed)
    self.params = task.init_params(jax.random.PRNGKey(seed))
    t0 = time.perf_counter()
    self._round()
    self.warmup_round_seconds = time.perf_counter() - t0
    self.seconds = []

  def _round(self):
    self.params = loop_round(self.params, self.step, self.server_update, self.data, self.rng)

  def __call__(self):
    t0 = time.perf_counter()
    for _ in range(self.rounds):
      self._round()
    self.seconds.append(time.perf_counter() - t0)

  def timing(self) -> dict:
    return {"seconds": self.seconds, "warmup_round_seconds": self.warmup_round_seconds}


# ---------------------------------------------------------------------------
# Report.


def summarize(timing: dict, rounds: int) -> dict:
  rates = [client_steps_per_second(rounds, s) for s in timing["seconds"]]
  return {**timing, "client_steps_per_second": statistics.median(rates),
          "best_client_steps_per_second": max(rates)}


def measure(model_name: str, dataset: Dataset, rounds: int, repeats: int, seed: int) -> dict:
  task = make_task(dataset, model_name)
  row = {"model": model_name, "rounds_per_repeat": rounds, "repeats": repeats}
  print(f"[{model_name}] vectorized (replacement) interleaved with the per-client loop ...",
        flush=True)
  loop = LoopTimer(task, dataset.train, rounds, seed)
  row["vectorized_replacement"] = summarize(
      time_vectorized(task, "replacement", rounds, repeats, seed, between=loop), rounds)
  row["loop"] = summarize(loop.timing(), rounds)
  print(f"[{model_name}] vectorized (shuffle) ...", flush=True)
  row["vectorized_shuffle"] = summarize(
      time_vectorized(task, "shuffle", rounds, repeats, seed), rounds)
  vec = row["vectorized_replacement"]["client_steps_per_second"]
  row["ratio"] = vec / row["loop"]["client_steps_per_second"]
  row["target"] = TARGETS[model_name]
  row["met"] = bool(row["ratio"] >= row["target"])
  return row


def table(rows: list[dict]) -> str:
  lines = ["| model | vectorized client-steps/s | loop client-steps/s | ratio | target "
           "| met? | vectorized (shuffle) client-steps/s |",
           "|---|---:|---:|---:|---:|:---:|---:|"]
  for r in rows:
    lines.append(
        f"| {r['model']} | {r['vectorized_replacement']['client_steps_per_second']:,.0f} "
        f"| {r['loop']['client_steps_per_second']:,.0f} | {r['ratio']:.2f}x "
        f"| {r['target']:g}x | {'yes' if r['met'] else 'no'} "
        f"| {r['vectorized_shuffle']['client_steps_per_second']:,.0f} |")
  return "\n".join(lines)


def markdown(rows: list[dict], env: dict) -> str:
  compile_lines = [
      f"- {r['model']}: vectorized compile {r['vectorized_replacement']['compile_seconds']:.2f} s "
      f"(replacement), {r['vectorized_shuffle']['compile_seconds']:.2f} s (shuffle); "
      f"loop warm-up round {r['loop']['warmup_round_seconds']:.2f} s" for r in rows]
  return "\n".join([
      "# FedAvg speed: vectorized engine vs per-client Python loop", "",
      f"{NUM_CLIENTS} clients per round (full participation), {LOCAL_STEPS} local steps, "
      f"batch {BATCH_SIZE}, MNIST-shaped data ({EXAMPLES_PER_CLIENT} examples per client). "
      "Client-steps per second, median over "
      f"{rows[0]['repeats']} repeats; compile time excluded. `ratio` compares both sides "
      "with minibatches drawn with replacement; the last column is the vectorized side "
      "with shuffled epochs. Vectorized timings include one evaluation per repeat.", "",
      table(rows), "",
      "Compile time (not in the rates):", *compile_lines, "",
      f"Vectorized side: clients trained {env['client_width']} at a time "
      "(`--client_width`; 0 = the whole cohort vmapped).", "",
      f"Machine: {env['cpu_count']} CPUs, devices {env['devices']}, jax {env['jax']}, "
      f"{env['platform']}; 1-minute load average {env['loadavg_before'][0]:.2f} before, "
      f"{env['loadavg_after'][0]:.2f} after.", ""])


def main(argv):
  del argv
  unknown = [m for m in FLAGS.models if m not in TARGETS]
  if unknown:
    raise app.UsageError(f"unknown --models {unknown}; valid: {', '.join(TARGETS)}")
  env = {**results.environment_info(), "cpu_count": os.cpu_count(),
         "xla_flags": os.environ.get("XLA_FLAGS", ""), "loadavg_before": os.getloadavg(),
         "client_width": cohort.resolve_width(FLAGS.client_width)}
  dataset = make_dataset(FLAGS.seed)
  rows = [measure(m, dataset, FLAGS.rounds or DEFAULT_ROUNDS[m], FLAGS.repeats, FLAGS.seed)
          for m in FLAGS.models]
  env["loadavg_after"] = os.getloadavg()
  print(table(rows))
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  config = {"num_clients": NUM_CLIENTS, "clients_per_round": NUM_CLIENTS,
            "examples_per_client": EXAMPLES_PER_CLIENT, "local_steps": LOCAL_STEPS,
            "batch_size": BATCH_SIZE, "client_lr": CLIENT_LR, "statistic": "median",
            "seed": FLAGS.seed}
  results.atomic_write_json(os.path.join(FLAGS.output_dir, "speed.json"),
                            {"config": config, "environment": env, "results": rows})
  results.atomic_write_text(os.path.join(FLAGS.output_dir, "speed.md"), markdown(rows, env))
  print(f"wrote {FLAGS.output_dir}/speed.json and speed.md")


if __name__ == "__main__":
  app.run(main)
