"""Our FedAvg against FedJAX 0.0.17 on W1-W3 and over cohort sizes, side by side in one
invocation.

  python -m benchmarks.speed.peers [--workloads=w1,w2,w3] [--repeats=3] [--rounds=0]
                                   [--venv=~/.cache/fedjax_bench/fedjax_venv]
  python -m benchmarks.speed.peers --workloads=cohorts [--repeats=5]   (a few minutes)
  python -m benchmarks.speed.peers --workloads=w7 [--repeats=5]   (a few minutes; the
      first run also compiles FedJAX's unrolled LSTM step, 10 minutes or more on 2 cores)

`--workloads=cohorts` (or any of c1, c10, c100, c1000) times W1 (logistic regression,
batch 10, 10 local steps) with m = 1, 10, 100, 1000 clients drawn uniformly each round
from a population of N = 100 (N = 1000 for m = 1000): FedJAX's UniformGetClientSampler
against our --participation=uniform. The two sides' repeats alternate (FedJAX runs in a
subprocess that does one repeat per line it reads), so both see the same machine load;
writes results/speed/peers/cohorts.json; peers.md shows both tables.

`--workloads=w7` times W7 (benchmarks/speed/speed.py's: FedAvg with our char LSTM, width
speed.LSTM_HIDDEN, on Shakespeare-shaped data, 10 clients every round, batch 10, 10
local steps) against FedJAX's own Shakespeare LSTM of the same width, layers and embedding
on inputs of the same shapes (fedjax_workloads.py's docstring says what differs: FedJAX's
model outputs and trains on all 80 positions, ours reads the last one; FedJAX puts a tanh
after each LSTM layer), the two sides' repeats alternating as for the cohorts, the same
rounds a repeat; writes results/speed/peers/w7.json, a table of its own in peers.md.

Sets up FedJAX's own virtual environment the first time (Python 3.11 with jax 0.4.30,
jaxlib 0.4.30, dm-haiku 0.0.12, optax 0.2.2, chex 0.1.86, numpy<2.1, fedjax 0.0.17: they
do not install beside our jax), runs `fedjax_workloads.py` there, then our engine on the
same workloads (benchmarks/speed/speed.py's, shuffled epochs as FedJAX's ShuffleRepeatBatch),
and writes results/speed/peers/peers.json and peers.md with the machine they ran on.
"""

import json
import os
import subprocess

# speed first: it sets the CPU devices before JAX starts, and defines the flags shared
# here (--workloads, --rounds, --repeats, --seed, ...).
from benchmarks.speed import speed
from absl import app
from absl import flags

from benchmarks.speed import harness
from fedjax_bench.data import text as text_data

HERE = os.path.dirname(os.path.abspath(__file__))  # fedjax_workloads.py runs from here

FLAGS = flags.FLAGS
flags.DEFINE_string("venv", os.path.expanduser("~/.cache/fedjax_bench/fedjax_venv"),
                    "FedJAX's virtual environment (created when missing).")
flags.DEFINE_string("peers_dir", "results/speed/peers", "Where peers.json and peers.md go.")
PINS = ["jax==0.4.30", "jaxlib==0.4.30", "dm-haiku==0.0.12", "optax==0.2.2", "chex==0.1.86",
        "numpy<2.1", "fedjax==0.0.17"]
TARGETS = {"w1": 10.0, "w2": 2.5, "c10": 10.0}
PEER_WORKLOADS = ("w1", "w2", "w3")
# Timed with the two sides' repeats alternating, each into its own JSON file (w7.json).
SEQUENCE_WORKLOADS = ("w7",)
# name -> (clients per round m, population N, our rounds per repeat). A repeat of ours
# lasts about as long as one of FedJAX's (fedjax_workloads.COHORTS: 0.7-1.2 s on a 2-core
# CPU), so whatever a switch between the two processes costs weighs about the same on
# both (docs/performance.md, "Against FedJAX 0.0.17"; c10 9.4x with 0.25 s blocks of ours, 10.1x and
# 9.2x with
# 0.75 s blocks, each side alone 10.3x; the spread, not the block length, decides).
COHORTS = {"c1": (1, 100, 4000), "c10": (10, 100, 1000), "c100": (100, 100, 100),
           "c1000": (1000, 1000, 10)}


def ensure_venv(venv: str) -> str:
  python = os.path.join(venv, "bin", "python")
  if os.path.exists(python) and subprocess.run(
      [python, "-c", "import fedjax"], capture_output=True).returncode == 0:
    return python
  print(f"creating FedJAX's environment in {venv} ...", flush=True)
  base = "/usr/bin/python3.11" if os.path.exists("/usr/bin/python3.11") else "python3.11"
  for cmd in ([base, "-m", "venv", venv], [python, "-m", "pip", "install", "-q", *PINS]):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
      tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["?"]
      raise SystemExit(f"error: could not set up FedJAX ({' '.join(cmd[:3])} ...): {tail[0]}")
  return python


def run_fedjax(python: str, workloads, rounds: int, repeats: int) -> dict:
  cmd = [python, os.path.join(HERE, "fedjax_workloads.py"), f"--workloads={','.join(workloads)}",
         f"--rounds={rounds}", f"--repeats={repeats}"]
  env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PYTHONPATH")}
  p = subprocess.run(cmd, capture_output=True, text=True, env=env)
  if p.returncode != 0:
    raise SystemExit(f"error: the FedJAX side failed: {p.stderr.strip()[-2000:]}")
  rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
  return {r["workload"]: r for r in rows}


def ours(name: str, rounds: int, repeats: int, seed: int) -> dict:
  model_name, batch, _, default_rounds, clients = speed.WORKLOADS[name]
  rounds = rounds or default_rounds
  task = speed.make_task(speed.make_dataset(seed, clients, model_name), model_name)
  t = speed.time_vectorized(task, "shuffle", rounds, repeats, seed, batch)
  return {**speed.summarize(t, rounds, clients), "rounds_per_repeat": rounds,
          "clients_per_round": clients, "params": num_params(task)}


def fedjax_interleaved(python: str, name: str, *args: str):
  """Starts fedjax_workloads.py --interleave on workload `name` and waits until it is
  ready (data built, first round compiled). Returns (once, finish): once() has it run
  one repeat; finish() ends it and returns its row."""
  cmd = [python, os.path.join(HERE, "fedjax_workloads.py"), f"--workloads={name}",
         "--interleave", *args]
  env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PYTHONPATH")}
  proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                          env=env)

  def reply():
    for line in proc.stdout:
      if line.startswith("{"):
        return json.loads(line)
    raise SystemExit(f"error: the FedJAX side of {name} failed (exit {proc.wait()})")

  reply()  # {"ready": name}: data built, first round compiled

  def once():
    proc.stdin.write("go\n")
    proc.stdin.flush()
    reply()

  def finish():
    proc.stdin.close()
    row = reply()
    proc.wait()
    return row

  return once, finish


def cohort(python: str, name: str, repeats: int, seed: int) -> dict:
  """One cohort size, our timed blocks and FedJAX's repeats alternating."""
  m, n, rounds = COHORTS[name]
  theirs_once, finish = fedjax_interleaved(python, name, f"--seed={seed}")
  task = speed.make_task(speed.make_dataset(seed, n), "logreg")
  t = speed.time_vectorized(task, "shuffle", rounds, repeats, seed, speed.WORKLOADS["w1"][1],
                            between=theirs_once, clients_per_round=m)
  theirs = finish()
  mine = {**speed.summarize(t, rounds, m), "rounds_per_repeat": rounds,
          "clients_per_round": m, "population": n, "participation": "uniform"}
  ratio = mine["client_steps_per_second"] / theirs["client_steps_per_second"]
  target = TARGETS.get(name)
  return {"workload": name, "clients_per_round": m, "population": n, "ours": mine,
          "fedjax": theirs, "ratio": ratio, "target": target,
          "met": None if target is None else bool(ratio >= target),
          "loadavg": os.getloadavg()}


def main_cohorts(python: str, names: list[str]):
  print(side_by_side(names, lambda name: cohort(python, name, FLAGS.repeats, FLAGS.seed),
                     "cohorts", ",.0f", ".1f"))


def cohorts_markdown(rows, env) -> str:
  lines = ["## Over cohort sizes (`--workloads=cohorts`)", "",
           "W1 (logistic regression, batch 10, 10 local SGD steps at lr 0.1, MNIST-shaped "
           "random data, 600 examples per client), m clients drawn uniformly without "
           "replacement from N each round: FedJAX's `UniformGetClientSampler` and "
           "`fed_avg.federated_averaging` (its default client loop), ours with "
           "`--participation=uniform` and shuffled epochs. The two sides' repeats "
           "alternate; client-steps per second, median over repeats, compilation "
           "excluded. Our repeats include one evaluation each (1,000 test + 1,000 train "
           "examples); FedJAX's none.", "",
           "| m of N | ours | FedJAX | ratio | target | met? | load |",
           "|---|---:|---:|---:|---:|:---:|---:|"]
  for r in rows:
    target, met = harness.target_cells(r["target"], r["met"], ">= {:g}x")
    lines.append(f"| {r['clients_per_round']:,} of {r['population']:,} | "
                 f"{r['ours']['client_steps_per_second']:,.0f} | "
                 f"{r['fedjax']['client_steps_per_second']:,.0f} | {r['ratio']:.1f}x | "
                 f"{target} | {met} | {r['loadavg'][0]:.2f} |")
  lines += ["", _machine(env, " (the load column: after each row)"), ""]
  return "\n".join(lines)


def sequence(python: str, name: str, rounds: int, repeats: int, seed: int) -> dict:
  """W7: our timed blocks and FedJAX's repeats alternating, the same rounds in each."""
  _, batch, _, default_rounds, clients = speed.WORKLOADS[name]
  rounds = rounds or default_rounds
  theirs_once, finish = fedjax_interleaved(python, name, f"--seed={seed}",
                                           f"--rounds={rounds}")
  dataset, task = speed.workload_task(name, seed)
  t = speed.time_vectorized(task, "shuffle", rounds, repeats, seed, batch,
                            between=theirs_once)
  theirs = finish()
  sizes = dataset.train.counts.tolist()
  if theirs["client_sizes"] != sizes:
    raise SystemExit(f"error: {name}'s clients differ in size: ours {sizes}, FedJAX's "
                     f"{theirs['client_sizes']}")
  mine = {**speed.summarize(t, rounds, clients), "rounds_per_repeat": rounds,
          "clients_per_round": clients, "lstm_hidden": speed.LSTM_HIDDEN,
          "client_sizes": sizes, "eval_examples": speed.LSTM_EVAL_EXAMPLES,
          "params": num_params(task)}
  ratio = mine["client_steps_per_second"] / theirs["client_steps_per_second"]
  return {"workload": name, "ours": mine, "fedjax": theirs, "ratio": ratio, "target": None,
          "met": None, "fedjax_matmul_work": fedjax_matmul_work(batch, theirs),
          "loadavg": os.getloadavg()}


def num_params(task) -> int:
  import jax  # noqa: PLC0415  (imported by speed, after host_devices)
  return int(sum(a.size for a in jax.tree.leaves(task.init_params(jax.random.PRNGKey(0)))))


def fedjax_matmul_work(batch: int, theirs: dict) -> float:
  """FedJAX's matmul FLOPs a W7 step over ours (speed.lstm_step_flops): the same LSTM,
  its dense layer at every position of the sequence to its vocabulary instead of ours at
  the last one."""
  ours = speed.lstm_step_flops(batch)
  hidden, seq_len = theirs["lstm_hidden"], theirs["seq_len"]
  dense_ours = 3 * 2 * batch * hidden * text_data.VOCAB_SIZE
  dense_theirs = 3 * 2 * batch * seq_len * hidden * theirs["vocab"]
  return (ours - dense_ours + dense_theirs) / ours


def main_sequences(python: str, names: list[str]):
  return side_by_side(names, lambda name: sequence(python, name, FLAGS.rounds, FLAGS.repeats,
                                                   FLAGS.seed), "w7", ",.1f", ".2f")


def side_by_side(names, measure, record: str, rate: str, ratio: str) -> str:
  """Measures each workload (ours and FedJAX, repeats alternating) and writes the rows so
  far to PEERS_DIR/RECORD.json after each, with peers.md; returns peers.md's text."""
  env = harness.environment()
  rows = []
  for name in names:
    print(f"[{name}] ours and FedJAX, repeats alternating ...", flush=True)
    rows.append(measure(name))
    r = rows[-1]
    print(f"[{name}] ours {r['ours']['client_steps_per_second']:{rate}} vs FedJAX "
          f"{r['fedjax']['client_steps_per_second']:{rate}} client-steps/s: "
          f"{r['ratio']:{ratio}}x (load {r['loadavg'][0]:.2f})", flush=True)
    env = {**harness.finish(env), "fedjax_jax": r["fedjax"]["jax"]}
    harness.write(FLAGS.peers_dir, record, {"environment": env, "results": rows})
    text = write_markdown()
  return text


def sequences_markdown(rows, env) -> str:
  r0 = rows[0]
  o, f = r0["ours"], r0["fedjax"]
  sizes = o["client_sizes"]
  lines = ["## W7: the char LSTM on Shakespeare shapes (`--workloads=w7`)", "",
           f"FedAvg, {o['clients_per_round']} clients every round (Shakespeare-like sizes, "
           f"{min(sizes):,} to {max(sizes):,} examples), batch {f['batch_size']} of "
           f"{f['seq_len']}-id sequences, {speed.LOCAL_STEPS} local SGD steps at lr "
           f"{speed.CLIENT_LR:g}, an embedding of 8 "
           f"and two LSTM layers of {o['lstm_hidden']} on both sides, random ids. Ours: "
           "`--model=char_lstm`, the next character read at the last position (LEAF's), "
           "a vocabulary of 82, shuffled epochs. FedJAX: "
           "`fedjax.models.shakespeare.create_lstm_model` with "
           "`fed_avg.federated_averaging` (its default client loop, "
           "`ShuffleRepeatBatchHParams`), whose model outputs and trains on all "
           f"{f['seq_len']} positions (TFF's Shakespeare), a vocabulary of {f['vocab']}, "
           "a tanh after each LSTM layer, the time steps unrolled in its program: "
           f"{r0['fedjax_matmul_work']:.2f}x our matmul FLOPs a step. The two sides' "
           "repeats alternate, the same rounds each; client-steps per second, median over "
           "repeats, compilation excluded. Our repeats include one evaluation each "
           f"({o['eval_examples']} test + {o['eval_examples']} train examples); "
           "FedJAX's none.", "",
           "| workload | LSTM width, batch | parameters | ours | FedJAX | ratio | load |",
           "|---|---|---:|---:|---:|---:|---:|"]
  for r in rows:
    o, f = r["ours"], r["fedjax"]
    lines.append(f"| {r['workload']} | {o['lstm_hidden']}, {f['batch_size']} | "
                 f"{o['params']:,} (FedJAX {f['params']:,}) | "
                 f"{o['client_steps_per_second']:,.1f} | "
                 f"{f['client_steps_per_second']:,.1f} | {r['ratio']:.2f}x | "
                 f"{r['loadavg'][0]:.2f} |")
  lines += ["", _machine(env, " (the load column: after each row)"), ""]
  return "\n".join(lines)


def main(argv):
  del argv
  if harness.unknown("workloads", FLAGS.workloads, [*speed.WORKLOADS, "cohorts", *COHORTS]):
    return 2  # (logreg32, in speed's default list, is accepted and not compared)
  names = [c for w in FLAGS.workloads for c in (COHORTS if w == "cohorts" else [w])
           if c in COHORTS]
  sequences = [w for w in FLAGS.workloads if w in SEQUENCE_WORKLOADS]
  if sequences:  # then the cohorts or W1-W3, when asked for too
    text = main_sequences(ensure_venv(FLAGS.venv), sequences)
    if not names and not any(w in PEER_WORKLOADS for w in FLAGS.workloads):
      print(text)
      return
  if names:
    return main_cohorts(ensure_venv(FLAGS.venv), names)
  workloads = [w for w in FLAGS.workloads if w in PEER_WORKLOADS] or list(PEER_WORKLOADS)
  env = harness.environment()
  python = ensure_venv(FLAGS.venv)
  print("FedJAX side ...", flush=True)
  theirs = run_fedjax(python, workloads, FLAGS.rounds, FLAGS.repeats)
  rows = []
  for w in workloads:
    print(f"[{w}] ours ...", flush=True)
    mine = ours(w, FLAGS.rounds, FLAGS.repeats, FLAGS.seed)
    ratio = mine["client_steps_per_second"] / theirs[w]["client_steps_per_second"]
    target = TARGETS.get(w)
    rows.append({"workload": w, "ours": mine, "fedjax": theirs[w], "ratio": ratio,
                 "target": target, "met": None if target is None else bool(ratio >= target)})
    print(f"[{w}] ours {mine['client_steps_per_second']:,.0f} vs FedJAX "
          f"{theirs[w]['client_steps_per_second']:,.0f} client-steps/s: {ratio:.1f}x", flush=True)
    text = write(rows, env, theirs)  # after each workload: a slow W3 cannot lose W1 and W2
  print(text)


def write(rows, env, theirs) -> str:
  env = {**harness.finish(env), "fedjax_jax": next(iter(theirs.values()))["jax"]}
  harness.write(FLAGS.peers_dir, "peers", {"environment": env, "results": rows})
  return write_markdown()


def write_markdown() -> str:
  """peers.md from peers.json (W1-W3), cohorts.json (cohort sizes) and w7.json (W7),
  whichever exist, so rerunning one part keeps the others' tables."""
  parts = []
  for name, render in (("peers", markdown), ("cohorts", cohorts_markdown),
                       ("w7", sequences_markdown)):
    path = os.path.join(FLAGS.peers_dir, f"{name}.json")
    if os.path.exists(path):
      with open(path) as f:
        saved = json.load(f)
      parts.append(render(saved["results"], saved["environment"]))
  text = "\n".join(parts)
  harness.write(FLAGS.peers_dir, "peers", markdown=text)
  return text


def markdown(rows, env) -> str:
  lines = ["# FedAvg against FedJAX 0.0.17, side by side", "",
           "100 clients per round (W3: 10, CPU scale), 10 local steps, MNIST-shaped random "
           "data (600 examples per client), the same models and batch sizes on both sides; "
           "FedJAX's "
           "`fed_avg.federated_averaging` with its default client loop, ours with shuffled "
           "epochs. Client-steps per second, median over repeats, first (compiling) round "
           "excluded.", "",
           "| workload | model, batch | parameters | ours | FedJAX | ratio | target | met? |",
           "|---|---|---:|---:|---:|---:|---:|:---:|"]
  for r in rows:
    o, f = r["ours"], r["fedjax"]
    target, met = harness.target_cells(r["target"], r["met"], ">= {:g}x")
    lines.append(f"| {r['workload']} | {f['model']}, {f['batch_size']} | {o['params']:,} "
                 f"(FedJAX {f['params']:,}) | {o['client_steps_per_second']:,.0f} | "
                 f"{f['client_steps_per_second']:,.0f} | {r['ratio']:.1f}x | {target} | {met} |")
  lines += ["", _machine(env), ""]
  return "\n".join(lines)


def _machine(env, load_note: str = "") -> str:
  # The platform string names the VM (…-fc-v782-…): VMs of one CPU model ran W1 2.5x apart.
  return harness.machine(env, f"ours jax {env['jax']} on {env['devices']}; FedJAX on jax "
                         f"{env['fedjax_jax']} (one CPU device)", load_note)


if __name__ == "__main__":
  app.run(main)
