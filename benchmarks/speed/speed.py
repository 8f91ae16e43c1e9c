"""Speed of vectorized FedAvg against a per-client Python loop (the FedJAX way).

  python -m benchmarks.speed.speed [--workloads=w1,w2,w3,logreg32] [--rounds=0] [--repeats=5]
                                   [--output_dir=results/speed]
  python -m benchmarks.speed.speed --workloads=w1,w2,w3,logreg32,w7   (W7 is not in the default)

Workloads (logreg32: the foundation's batch-32 target): FedAvg on MNIST-shaped generated data, 100
clients x 600 examples, full participation (100 clients per round), 10 local SGD steps,
client_lr 0.1, softmax cross entropy.
  w1: logistic regression, batch 10     w2: the 784-200-200-10 MLP, batch 32
  w3: the CNN (--model=cnn), batch 32,  logreg32: logistic regression, batch 32
      10 clients (CPU scale)
W7 is FedAvg with the char LSTM (--model=char_lstm: embedding 8, two LSTM layers of
LSTM_HIDDEN = 64, CPU scale, dense to the vocabulary at the last position) on
Shakespeare-shaped generated data (workloads.shakespeare_shaped: int8 windows of 80 ids,
vocabulary 82, 10 clients of Shakespeare-like sizes), batch 10 (LEAF's), 10 local SGD
steps at lr 0.1, all 10 clients every round; its evaluation reads LSTM_EVAL_EXAMPLES test
and as many train examples (one batch each: evaluating 1,000 + 1,000 sequences costs
about as much as a round of 10 clients, which would weigh on W7's timings as no
evaluation weighs on W1-W3's). Its FLOPs are the LSTM's matmuls counted by hand
(`lstm_step_flops`): XLA's cost analysis counts the body of a scan once, not once per
time step.
Both sides train the same model for the same number of rounds per repeat.

* vectorized: engine.run with fedavg.build (one lax.scan over a block of rounds, the
  cohort vmapped), eval_every = rounds, so each timed block ends with one evaluation
  (1000 test + 1000 train examples; W3 one batch of each, `eval_examples`). Repeats are consecutive blocks of one engine.run
  after one warm-up block, so the program compiles once; compile time is reported apart.
* loop: for each client, for each step, B indices drawn with NumPy, x/y gathered on
  the host and passed to a jitted step(params, x, y) -> params; the deltas of the
  cohort are averaged by a jitted function; one block_until_ready per round. Its
  repeats run between the vectorized (replacement) blocks, so both sides share the
  machine's load at the time; the load average is recorded.

Throughput is client-steps per second (clients x local steps x rounds / seconds), the
median over repeats (the best is recorded too). Also reported: rounds/s, compile seconds,
the process's peak resident memory after the workload, the FLOPs of one client step
(XLA's cost analysis of the jitted gradient step) and the achieved fraction of this
machine's matmul throughput, measured in the same run (float32 1024 x 1024 products on
every device at once).
"""

import os
import time
from typing import Callable, Optional

from fedjax_bench.engine import host_devices

host_devices.use_all_cores()

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from benchmarks.speed import harness, workloads  # noqa: E402
from fedjax_bench.algorithms import fedavg  # noqa: E402
from fedjax_bench.core import client_map  # noqa: E402
from fedjax_bench.task import task as task_lib  # noqa: E402
from fedjax_bench.data import text  # noqa: E402
from fedjax_bench.data.federated import Dataset, FederatedData  # noqa: E402
from fedjax_bench.models import char_lstm, winograd  # noqa: E402
from fedjax_bench.sim import participation, world as world_lib  # noqa: E402

NUM_CLIENTS = 100
EXAMPLES_PER_CLIENT = 600
TEST_EXAMPLES = 1000
LOCAL_STEPS = 10
CLIENT_LR = 0.1
# name -> (model, batch, target ratio against the loop or None, rounds per repeat when
# --rounds=0: about 1-2 s per repeat on a 2-core CPU, clients per round). W3 trains 10
# clients a round, not 100: a CNN round of 100 clients takes about a minute on 2 cores.
WORKLOADS = {"w1": ("logreg", 10, None, 30, 100), "w2": ("mlp", 32, 1.5, 4, 100),
             "w3": ("cnn", 32, None, 1, 10), "logreg32": ("logreg", 32, 5.0, 20, 100),
             "w7": ("char_lstm", 10, None, 1, 10)}
# W7's LSTM width, CPU scale: at 64 a round of 10 clients takes 2-3 s on 2 cores, as
# long as W3's; 128 is 4x the matmul work a step, LEAF's and FedJAX's 256 about 16x (a
# round most of a minute). And W7's evaluation: this many test and as many train examples.
LSTM_HIDDEN = 64
LSTM_EVAL_EXAMPLES = 10

FLAGS = flags.FLAGS
flags.DEFINE_list("workloads", ["w1", "w2", "w3", "logreg32"],
                  f"Workloads to time: {', '.join(WORKLOADS)}.")
flags.DEFINE_integer("rounds", 0, "Rounds per timed repeat; 0: the workload's default.")
flags.DEFINE_integer("repeats", 5, "Timed repeats per measurement; the median is reported.")
flags.DEFINE_string("output_dir", "results/speed", "Where speed.json and speed.md go.")
flags.DEFINE_integer("client_width", -1, "Vectorized side: clients vmapped at once "
                     "(0: whole cohort; -1: the suite's default for this backend).")
flags.DEFINE_integer("seed", 0, "Seed of the generated data and of the runs.")


def eval_examples(model_name: str) -> int:
  """Test (and as many train) examples a workload's evaluation reads: TEST_EXAMPLES, or one
  batch for the CNN, whose 2,000-example evaluation would be about a third of a timed W3
  round of 10 clients (the peers' loops time training only)."""
  return WORKLOADS["w3"][1] if model_name == "cnn" else TEST_EXAMPLES


def make_dataset(seed: int, num_clients: int = NUM_CLIENTS,
                 model_name: str = "logreg") -> Dataset:
  return workloads.mnist_shaped(seed, num_clients, EXAMPLES_PER_CLIENT,
                                eval_examples(model_name))


def make_task(dataset: Dataset, model_name: str) -> task_lib.Task:
  return workloads.task(dataset, model_name, train_eval_examples=eval_examples(model_name))


def workload_task(name: str, seed: int) -> tuple[Dataset, task_lib.Task]:
  """A workload's generated data and task: MNIST-shaped for W1-W3 and logreg32, the char
  LSTM on Shakespeare-shaped data for W7."""
  model_name, _, _, _, clients = WORKLOADS[name]
  if model_name == "char_lstm":
    dataset = workloads.shakespeare_shaped(seed, clients, LSTM_EVAL_EXAMPLES)
    return dataset, workloads.lstm_task(dataset, LSTM_HIDDEN, LSTM_EVAL_EXAMPLES)
  dataset = make_dataset(seed, clients, model_name)
  return dataset, make_task(dataset, model_name)


def client_steps_per_second(rounds: int, seconds: float, clients: int = NUM_CLIENTS) -> float:
  return rounds * clients * LOCAL_STEPS / seconds


# ---------------------------------------------------------------------------
# Vectorized: the suite's own engine.


def time_vectorized(task: task_lib.Task, sampling: str, rounds: int, repeats: int,
                    seed: int, batch: int,
                    between: Optional[Callable[[], None]] = None,
                    clients_per_round: int = 0) -> dict:
  """Seconds of each block of `rounds` rounds (one evaluation each), and compile time.

  One untimed warm-up block runs first. `between` runs after each timed block, outside
  the engine's timed region, so the loop baseline can share the same machine load.
  `clients_per_round` m > 0: m of the population uniformly each round (the command
  line's --participation=uniform); 0: every client.
  """
  n = task.num_clients
  scheme = (participation.uniform(n, clients_per_round) if clients_per_round
            else participation.full(n))
  world = world_lib.make(scheme, np.full(n, LOCAL_STEPS, np.int32))
  hp = {"client_lr": CLIENT_LR, "server_lr": 1.0, "batch_size": batch,
        "sampling": sampling, "weighting": "uniform", "server_opt": "sgd",
        "client_width": FLAGS.client_width}
  timing = harness.blocks(lambda h: fedavg.build(task, world, h), task, hp, [seed], rounds,
                          repeats, between)
  out = timing.pop("output")
  return {**timing, "final_client_loss": float(out.history.metrics["client_loss"][-1].mean())}


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


def loop_round(params, step, server_update, data: FederatedData, rng, batch: int):
  client_params = []
  for i in range(data.num_clients):
    offset, count = int(data.offsets[i]), int(data.counts[i])
    p = params
    for _ in range(LOCAL_STEPS):
      idx = offset + rng.integers(0, count, batch)
      p = step(p, data.x[idx], data.y[idx])
    client_params.append(p)
  return jax.block_until_ready(server_update(params, client_params))


class LoopTimer:
  """Warms up (compiles) on construction; each call times `rounds` rounds."""

  def __init__(self, task: task_lib.Task, data: FederatedData, rounds: int, seed: int,
               batch: int):
    self.step, self.server_update = make_loop_fns(task)
    self.data, self.rounds, self.batch = data, rounds, batch
    self.rng = np.random.default_rng(seed)
    self.params = task.init_params(jax.random.PRNGKey(seed))
    t0 = time.perf_counter()
    self._round()
    self.warmup_round_seconds = time.perf_counter() - t0
    self.seconds = []

  def _round(self):
    self.params = loop_round(self.params, self.step, self.server_update, self.data, self.rng,
                             self.batch)

  def __call__(self):
    t0 = time.perf_counter()
    for _ in range(self.rounds):
      self._round()
    self.seconds.append(time.perf_counter() - t0)

  def timing(self) -> dict:
    return {"seconds": self.seconds, "warmup_round_seconds": self.warmup_round_seconds}


# ---------------------------------------------------------------------------
# Report.


def summarize(timing: dict, rounds: int, clients: int = NUM_CLIENTS) -> dict:
  rates = [client_steps_per_second(rounds, s, clients) for s in timing["seconds"]]
  return {**timing, "client_steps_per_second": harness.median(rates),
          "best_client_steps_per_second": max(rates),
          "rounds_per_second": rounds / harness.median(timing["seconds"])}


def matmul_flops_per_second(n: int = 1024, seconds: float = 1.0) -> float:
  """The machine's float32 matmul throughput: n x n products on every device at once,
  the best of about ``seconds`` of repeats."""
  devices = jax.devices()
  mesh = jax.sharding.Mesh(np.array(devices), ("d",))
  spec = jax.sharding.PartitionSpec("d")
  a = jax.device_put(jnp.ones((len(devices), n, n), jnp.float32),
                     jax.sharding.NamedSharding(mesh, spec))
  f = jax.jit(jax.shard_map(lambda a: (a[0] @ a[0])[None], mesh=mesh, in_specs=spec,
                            out_specs=spec))
  f(a).block_until_ready()
  best, t_end = float("inf"), time.perf_counter() + seconds
  while time.perf_counter() < t_end:
    t0 = time.perf_counter()
    f(a).block_until_ready()
    best = min(best, time.perf_counter() - t0)
  return 2 * n ** 3 * len(devices) / best


def step_flops(task: task_lib.Task, batch: int) -> float:
  """FLOPs of one client step (forward, backward, SGD update) by XLA's cost analysis, of
  the model's direct convolutions: a CNN's Winograd program does fewer
  (`models.winograd`), so a throughput read against the matmul peak counts the work
  that a direct convolution (PyTorch's, cuDNN's) does."""
  params = task.init_params(jax.random.PRNGKey(0))
  x, y, w = task.x[:batch], task.y[:batch], jnp.ones(batch)

  def step(p):
    g = jax.grad(task.loss)(p, x, y, w)
    return jax.tree.map(lambda a, b: a - CLIENT_LR * b, p, g)

  with winograd.direct():
    cost = jax.jit(step).lower(params).compile().cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return float(cost.get("flops", float("nan")))


def lstm_step_flops(batch: int, hidden: int = LSTM_HIDDEN, seq_len: int = text.SEQ_LEN,
                    vocab: int = text.VOCAB_SIZE) -> float:
  """Matmul FLOPs of one char-LSTM client step, counted by hand. Forward: per layer, its
  input sequence times the input kernel and the recurrence h_{t-1} W_h, 2 B T (d_in + H)
  4H (d_in: the embedding's 8, then H), and the dense layer at the last position,
  2 B H V. Backward: twice the forward's (each product's two operands get a gradient;
  the first layer's input gradient feeds the embedding's). Left out: the gates'
  elementwise work, the embedding's gather, the softmax and the SGD update."""
  forward = sum(2 * batch * seq_len * (d_in + hidden) * 4 * hidden
                for d_in in [char_lstm.EMBED_DIM] + [hidden] * (char_lstm.NUM_LAYERS - 1))
  forward += 2 * batch * hidden * vocab
  return 3.0 * forward


def measure(name: str, rounds: int, repeats: int, seed: int, peak_flops: float) -> dict:
  model_name, batch, target, _, clients = WORKLOADS[name]
  dataset, task = workload_task(name, seed)
  row = {"workload": name, "model": model_name, "batch_size": batch,
         "clients_per_round": clients, "rounds_per_repeat": rounds, "repeats": repeats}
  if model_name == "char_lstm":
    row.update(lstm_hidden=LSTM_HIDDEN, client_sizes=dataset.train.counts.tolist(),
               eval_examples=LSTM_EVAL_EXAMPLES, flops_counted="matmuls, by hand")
  print(f"[{name}] vectorized (replacement) interleaved with the per-client loop ...",
        flush=True)
  loop = LoopTimer(task, dataset.train, rounds, seed, batch)
  row["vectorized_replacement"] = summarize(
      time_vectorized(task, "replacement", rounds, repeats, seed, batch, between=loop),
      rounds, clients)
  row["loop"] = summarize(loop.timing(), rounds, clients)
  print(f"[{name}] vectorized (shuffle) ...", flush=True)
  row["vectorized_shuffle"] = summarize(
      time_vectorized(task, "shuffle", rounds, repeats, seed, batch), rounds, clients)
  vec = row["vectorized_replacement"]["client_steps_per_second"]
  row["ratio"] = vec / row["loop"]["client_steps_per_second"]
  row["target"] = target
  row["met"] = None if target is None else bool(row["ratio"] >= target)
  row["flops_per_client_step"] = (lstm_step_flops(batch) if model_name == "char_lstm"
                                  else step_flops(task, batch))
  row["achieved_flops_per_second"] = row["flops_per_client_step"] * vec
  row["matmul_fraction"] = row["achieved_flops_per_second"] / peak_flops
  row["peak_rss_mib_after"] = harness.peak_rss_mib()
  return row


def table(rows: list[dict]) -> str:
  lines = ["| workload | model, batch | clients per round | vectorized client-steps/s | "
           "rounds/s | loop client-steps/s | ratio | target | met? | GFLOP/s | "
           "of matmul peak | compile s |",
           "|---|---|---:|---:|---:|---:|---:|---:|:---:|---:|---:|---:|"]
  for r in rows:
    v = r["vectorized_replacement"]
    target, met = harness.target_cells(r["target"], r["met"])
    lines.append(
        f"| {r['workload']} | {r['model']}, {r['batch_size']} | {r['clients_per_round']} | "
        f"{v['client_steps_per_second']:,.0f} | {v['rounds_per_second']:.2f} "
        f"| {r['loop']['client_steps_per_second']:,.0f} | {r['ratio']:.2f}x | {target} | {met} "
        f"| {r['achieved_flops_per_second'] / 1e9:.1f} | {r['matmul_fraction']:.0%} "
        f"| {v['compile_seconds']:.1f} |")
  return "\n".join(lines)


def markdown(rows: list[dict], env: dict) -> str:
  extra = [f"- {r['workload']}: shuffled epochs {r['vectorized_shuffle']['client_steps_per_second']:,.0f} "
           f"client-steps/s; loop warm-up round {r['loop']['warmup_round_seconds']:.2f} s; "
           f"{r['flops_per_client_step'] / 1e6:.2f} MFLOP per client step; process peak RSS "
           f"{r['peak_rss_mib_after']:,.0f} MiB after it" for r in rows]
  return "\n".join([
      "# FedAvg speed: vectorized engine vs per-client Python loop", "",
      "Full participation (every client of the generated population trains every round), "
      f"{LOCAL_STEPS} local steps, "
      f"MNIST-shaped data ({EXAMPLES_PER_CLIENT} examples per client). Client-steps per "
      f"second, median over {rows[0]['repeats']} repeats; compile time excluded. `ratio` "
      "compares both sides with minibatches drawn with replacement. Vectorized timings "
      "include one evaluation per repeat. GFLOP/s: XLA's FLOP count of one client step "
      "times the vectorized client-steps/s; the matmul peak is "
      f"{env['matmul_gflops']:.0f} GFLOP/s, measured in the same run.",
      *[w7_note(r) for r in rows if r["model"] == "char_lstm"], "",
      table(rows), "", *extra, "",
      f"Vectorized side: clients trained {env['client_width']} at a time "
      "(`--client_width`; 0 = the whole cohort vmapped).", "",
      harness.machine(env), ""])


def w7_note(row: dict) -> str:
  sizes = row["client_sizes"]
  return (f"\n`{row['workload']}` is the char LSTM (embedding {char_lstm.EMBED_DIM}, "
          f"{char_lstm.NUM_LAYERS} LSTM layers of {row['lstm_hidden']}, dense to the "
          f"{text.VOCAB_SIZE}-id vocabulary at the last position) on Shakespeare-shaped "
          f"generated data instead: int8 windows of {text.SEQ_LEN} ids, {len(sizes)} clients "
          f"of {min(sizes):,} to {max(sizes):,} examples (Shakespeare-like sizes), all of "
          f"them every round; its evaluations read {row['eval_examples']} test and "
          f"{row['eval_examples']} train examples, and its GFLOP/s count the LSTM's matmuls "
          "by hand (XLA's cost analysis counts a scan's body once).")


def main(argv):
  del argv
  if harness.unknown("workloads", FLAGS.workloads, list(WORKLOADS)):
    return 2
  env = harness.environment(xla_flags=os.environ.get("XLA_FLAGS", ""),
                            client_width=client_map.resolve_width(FLAGS.client_width))
  peak = matmul_flops_per_second()
  env["matmul_gflops"] = peak / 1e9
  print(f"matmul throughput: {peak / 1e9:.0f} GFLOP/s", flush=True)
  rows = [measure(w, FLAGS.rounds or WORKLOADS[w][3], FLAGS.repeats, FLAGS.seed, peak)
          for w in FLAGS.workloads]
  harness.finish(env)
  print(table(rows))
  config = {"clients_per_round": {w: WORKLOADS[w][4] for w in FLAGS.workloads},
            "examples_per_client": EXAMPLES_PER_CLIENT, "local_steps": LOCAL_STEPS,
            "client_lr": CLIENT_LR, "statistic": "median",
            "seed": FLAGS.seed}
  paths = harness.write(FLAGS.output_dir, "speed",
                        {"config": config, "environment": env, "results": rows},
                        markdown(rows, env))
  print(f"wrote {' and '.join(paths)}")


if __name__ == "__main__":
  app.run(main)
