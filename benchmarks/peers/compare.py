"""Our FedAvg against the peers researchers use, side by side in one invocation: a PyTorch
per-client loop, Flower's simulation engine and FedJAX 0.0.17.

  python benchmarks/peers/compare.py [--workloads=w1,w2,w3,w7] [--cohorts=1,10,100,1000]
                                     [--peers=torch,flower,fedjax] [--repeats=5]
                                     [--seconds=1] [--output_dir=results/speed]
  python -m benchmarks.peers.compare --quick      (a smoke test: W1 and W3 at 1 and 10
                                                    clients a round, 2 short repeats)

The sides, each in its own process and, for the peers, its own virtual environment (made
on first use under --peers_venvs, FedJAX's at --venv; `--help` and the argument checks
need none of them):
  ours     benchmarks/speed/speed.py's workloads and timing (`speed.time_vectorized`: one
           engine run, a warm-up block, then timed blocks with one evaluation each),
           shuffled epochs, --participation=uniform (full when m = N);
  torch    a per-client loop as FL-bench's and Flower's clients are written
           (`torch_workloads.py --side=loop`): copy the global weights into the client
           model, torch.optim.SGD on shuffled minibatches of its data for the local steps,
           collect its weights, average; torch.set_num_threads(the cores);
  flower   Flower's simulation engine (`flwr.simulation.start_simulation` with FedAvg,
           Ray underneath, one client per core) running the same PyTorch model and client
           (`torch_workloads.py --side=flower`);
  fedjax   FedJAX 0.0.17's `fed_avg.federated_averaging` with its default client loop
           (`benchmarks/speed/fedjax_workloads.py`, as `benchmarks.speed.peers` runs it).

The workloads are benchmarks/speed/speed.py's (10 local SGD steps at lr 0.1): W1 logistic
regression batch 10, W2 the 784-200-200-10 MLP batch 32, W3 the FedAvg paper's CNN batch 32,
each on MNIST-shaped generated data (600 examples a client) at m = --cohorts clients a round
drawn uniformly from N = 100 (N = 1,000 for m = 1,000); W7 the char LSTM of width
speed.LSTM_HIDDEN on 10 Shakespeare-sized clients, all every round. The PyTorch sides read
our data (the same arrays, written to a temporary folder) and build the same models
(`architectures.py`: parameter counts checked against ours before anything is timed);
FedJAX generates data of the same shapes and trains its own equal haiku models (W7: its own
Shakespeare LSTM, see fedjax_workloads.py).

For each cell (workload, m) every side first runs its untimed warm-up (compilation, Ray's
start), then the sides' repeats alternate: one block of ours, one repeat of each peer, ...
so all see the same machine load. A repeat lasts about --seconds on each side (its rounds
are set from the rates in ESTIMATES). Cells where a side would need more than
--max_round_seconds for one round are left out and named under the table (W3 at 1,000
clients: several minutes a round on 2 cores). Client-steps per second, the median over the
repeats; the table ends with the machine (CPU model, cores), its float32 matmul peak
measured at the start of the run, and the load average before and after.

Writes OUTPUT_DIR/peers.json and peers.md after every cell (--quick: peers_quick.*; fewer
workloads, cohorts or peers than the whole comparison: peers_subset.*).
"""

import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile

if __package__ in (None, ""):  # run as a file: python benchmarks/peers/compare.py
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__)))))

# speed first: it sets the CPU devices before JAX starts and defines the flags shared here
# (--workloads, --repeats, --seed, --output_dir, --client_width); speed.peers defines
# --venv (FedJAX's environment) and sets it up.
from benchmarks.speed import speed  # noqa: E402
from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.peers import architectures  # noqa: E402
from benchmarks.speed import harness  # noqa: E402
from benchmarks.speed import peers as fedjax_peers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SPEED = os.path.join(os.path.dirname(HERE), "speed")
FLAGS = flags.FLAGS

SIDES = ("torch", "flower", "fedjax")
SIDE_NAMES = {"ours": "ours", "torch": "PyTorch loop", "flower": "Flower", "fedjax": "FedJAX"}
WORKLOADS = ("w1", "w2", "w3", "w7")
COHORTS = (1, 10, 100, 1000)
# Client-steps per second each side reaches on a 2-core CPU (benchmarks/speed/, issue
# measurements; Flower's from a first run): a repeat's rounds are sized from them, and a
# cell is left out when one round of a side would take longer than --max_round_seconds.
ESTIMATES = {"ours": {"w1": 60_000, "w2": 5_000, "w3": 40, "w7": 120},
             "torch": {"w1": 6_000, "w2": 1_500, "w3": 65, "w7": 150},
             "flower": {"w1": 1_000, "w2": 700, "w3": 50, "w7": 100},
             "fedjax": {"w1": 5_000, "w2": 1_600, "w3": 29, "w7": 9}}
# The same on a GPU (ours and PyTorch on the device; guesses until measured there).
ESTIMATES_GPU = {"ours": {"w1": 1_000_000, "w2": 500_000, "w3": 50_000, "w7": 5_000},
                 "torch": {"w1": 3_000, "w2": 3_000, "w3": 2_000, "w7": 500},
                 "flower": {"w1": 1_000, "w2": 1_000, "w3": 800, "w7": 300},
                 "fedjax": {"w1": 3_000, "w2": 3_000, "w3": 2_000, "w7": 100}}
W7_CLIENTS = 10  # speed.WORKLOADS["w7"]: all of them every round
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
QUICK = dict(workloads=["w1", "w3"], cohorts=["1", "10"], repeats=2, seconds=0.3)

flags.DEFINE_list("cohorts", [str(c) for c in COHORTS],
                  "Clients per round m of W1-W3 (N = 100 clients, 1,000 for m = 1,000).")
flags.DEFINE_list("peers", list(SIDES), f"Peers to run beside ours: {', '.join(SIDES)}.")
flags.DEFINE_float("seconds", 1.0, "About how long one repeat of each side lasts.")
flags.DEFINE_float("max_round_seconds", 60.0, "Leave out the cells where one round of a "
                   "side would take longer than this (by ESTIMATES).")
flags.DEFINE_string("peers_venvs", os.path.expanduser("~/.cache/fedjax_bench/peers"),
                    "Where the PyTorch and Flower environments live (made when missing).")
flags.DEFINE_string("torch_python", "", "A Python that has PyTorch (and Flower, for that "
                    "side) to run the PyTorch sides with, instead of the environments under "
                    "--peers_venvs (benchmarks/gpu.sh: the GPU machine's own).")
flags.DEFINE_enum("torch_device", "cpu", ["cpu", "cuda"], "Where the PyTorch sides train.")
flags.DEFINE_bool("quick", False, "A smoke test: W1 and W3 at 1 and 10 clients a round, 2 "
                  "repeats of about 0.3 s; writes peers_quick.{json,md}.")
FLAGS.set_default("workloads", list(WORKLOADS))


class PeerFailed(RuntimeError):
  """A peer's process ended or broke before it answered."""


# --- the peers' environments -----------------------------------------------------------------

def _pip(python: str, *args: str) -> subprocess.CompletedProcess:
  return subprocess.run([python, "-m", "pip", "install", "-q", *args], capture_output=True,
                        text=True)


def _tail(p: subprocess.CompletedProcess) -> str:
  lines = [l for l in (p.stderr or p.stdout or "").strip().splitlines()
           if not l.startswith("WARNING")]
  return lines[-1] if lines else f"exit {p.returncode}"


def _works(python: str, modules: str) -> bool:
  try:
    return subprocess.run([python, "-c", f"import {modules}"],
                          capture_output=True).returncode == 0
  except OSError:  # no such interpreter
    return False


def torch_version(python: str) -> str:
  p = subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                     capture_output=True, text=True)
  return p.stdout.strip() if p.returncode == 0 else ""


def ensure_env(side: str, base: str) -> str:
  """The Python of ``side``'s environment (torch or flower) under ``base``, made the first
  time: PyTorch's CPU build from its package index (else the registry's default torch),
  NumPy, and for Flower ``flwr[simulation]`` beside the torch version of the loop's
  environment. Raises PeerFailed with pip's last line when it cannot be installed."""
  path = os.path.join(base, side)
  python = os.path.join(path, "bin", "python")
  modules = "torch, numpy" + (", flwr, ray" if side == "flower" else "")
  if _works(python, modules):
    return python
  print(f"creating the {side} environment in {path} ...", flush=True)
  p = subprocess.run([sys.executable, "-m", "venv", path], capture_output=True, text=True)
  if p.returncode != 0:
    raise PeerFailed(f"python -m venv {path}: {_tail(p)}")
  pinned = torch_version(os.path.join(base, "torch", "bin", "python")) if side == "flower" else ""
  torch_req = f"torch=={pinned}" if pinned else "torch"
  if not _works(python, "torch, numpy"):
    p = _pip(python, "--retries", "1", "--timeout", "20", "--index-url", CPU_INDEX,
             torch_req, "numpy")
    if p.returncode != 0:  # no CPU index here: the registry's own build
      p = _pip(python, torch_req, "numpy")
    if p.returncode != 0:
      raise PeerFailed(f"pip install {torch_req}: {_tail(p)}")
  if side == "flower":
    p = _pip(python, "flwr[simulation]")
    if p.returncode != 0:
      raise PeerFailed(f"pip install flwr[simulation]: {_tail(p)}")
  if not _works(python, modules):
    raise PeerFailed(f"{path} was set up but cannot import {modules}")
  return python


def environments(peers) -> tuple[dict, dict]:
  """({peer: its Python}, {peer: why it is not there})."""
  pythons, missing = {}, {}
  for side in peers:
    try:
      if side == "fedjax":
        pythons[side] = fedjax_peers.ensure_venv(FLAGS.venv)
      elif FLAGS.torch_python:
        modules = "torch, numpy" + (", flwr, ray" if side == "flower" else "")
        if not _works(FLAGS.torch_python, modules):
          raise PeerFailed(f"{FLAGS.torch_python} cannot import {modules}")
        pythons[side] = FLAGS.torch_python
      else:
        pythons[side] = ensure_env(side, FLAGS.peers_venvs)
    except (PeerFailed, SystemExit) as e:
      missing[side] = str(e).removeprefix("error: ")
      print(f"[{side}] not available: {missing[side]}", flush=True)
  return pythons, missing


# --- one cell --------------------------------------------------------------------------------

class Peer:
  """A peer's process for one cell, started with --interleave: ready after its warm-up
  round, one repeat per `once()`, its row at `finish()`. Its stderr goes to ``log``."""

  def __init__(self, side: str, cmd: list, log: str):
    self.side, self.log_path = side, log
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PYTHONPATH")}
    env.update(FLWR_TELEMETRY_ENABLED="0", RAY_USAGE_STATS_ENABLED="0",
               PYTHONUNBUFFERED="1")
    self.log = open(log, "w")
    self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=self.log, text=True, env=env)
    self.reply()  # {"ready": ...}

  def reply(self) -> dict:
    for line in self.proc.stdout:
      if line.startswith("{"):
        return json.loads(line)
    code = self.proc.wait()
    self.log.flush()
    with open(self.log_path, errors="replace") as f:
      tail = [l.strip() for l in f.read().splitlines() if l.strip()][-1:] or ["?"]
    raise PeerFailed(f"exited {code}: {tail[0][:300]} (log {self.log_path})")

  def once(self) -> None:
    self.proc.stdin.write("go\n")
    self.proc.stdin.flush()
    self.reply()

  def finish(self) -> dict:
    self.proc.stdin.close()
    row = self.reply()
    self.proc.wait()
    self.log.close()
    return row

  def kill(self) -> None:
    if self.proc.poll() is None:
      self.proc.kill()
      self.proc.wait()
    self.log.close()


def log_path(side: str, workload: str, m: int) -> str:
  """A peer's stderr for one cell, kept after the run: PEERS_VENVS/logs/."""
  folder = os.path.join(FLAGS.peers_venvs, "logs")
  os.makedirs(folder, exist_ok=True)
  return os.path.join(folder, f"{side}_{workload}_m{m}.log")


def estimates() -> dict:
  import jax  # noqa: PLC0415  (speed has set the CPU devices)
  return ESTIMATES if jax.default_backend() == "cpu" else ESTIMATES_GPU


def rounds_for(side: str, workload: str, m: int, seconds: float) -> int:
  return max(1, round(seconds * estimates()[side][workload] / (m * speed.LOCAL_STEPS)))


def round_seconds(side: str, workload: str, m: int) -> float:
  return m * speed.LOCAL_STEPS / estimates()[side][workload]


def population(m: int) -> int:
  return 1000 if m > 100 else 100


def write_data(dataset, folder: str) -> str:
  os.makedirs(folder, exist_ok=True)
  for name in ("x", "y", "offsets", "counts"):
    np.save(os.path.join(folder, f"{name}.npy"), getattr(dataset.train, name))
  return folder


def peer_command(side: str, python: str, workload: str, m: int, data: str,
                 rounds: int, repeats: int, seed: int) -> list:
  model, batch = speed.WORKLOADS[workload][:2]
  if side == "fedjax":
    name = workload if workload == "w7" else f"{workload}_c{m}"
    return [python, os.path.join(SPEED, "fedjax_workloads.py"), f"--workloads={name}",
            "--interleave", f"--rounds={rounds}", f"--seed={seed}"]
  loop = "loop" if side == "torch" else "flower"
  return [python, os.path.join(HERE, "torch_workloads.py"), f"--side={loop}",
          f"--workload={workload}", f"--model={model}", f"--batch={batch}",
          f"--hidden={speed.LSTM_HIDDEN}", f"--steps={speed.LOCAL_STEPS}",
          f"--lr={speed.CLIENT_LR}", f"--data={data}", f"--clients_per_round={m}",
          f"--rounds={rounds}", f"--repeats={repeats}", f"--seed={seed}",
          f"--device={FLAGS.torch_device}", "--interleave"]


def our_task(workload: str, m: int, seed: int):
  if workload == "w7":
    return speed.workload_task("w7", seed)
  model_name = speed.WORKLOADS[workload][0]
  dataset = speed.make_dataset(seed, population(m), model_name)
  return dataset, speed.make_task(dataset, model_name)


def cell(workload: str, m: int, pythons: dict, scratch: str, peak: float) -> dict:
  """Every side on one (workload, m), the repeats alternating."""
  seconds, repeats, seed = FLAGS.seconds, FLAGS.repeats, FLAGS.seed
  model, batch = speed.WORKLOADS[workload][:2]
  dataset, task = our_task(workload, m, seed)
  n = task.num_clients
  ours_params = fedjax_peers.num_params(task)
  theirs_params = architectures.num_params(model, speed.LSTM_HIDDEN)
  if ours_params != theirs_params:
    raise SystemExit(f"error: our {model} has {ours_params:,} parameters, the PyTorch "
                     f"peers' {theirs_params:,} (benchmarks/peers/architectures.py)")
  data = write_data(dataset, os.path.join(scratch, f"{workload}_n{n}"))
  row = {"workload": workload, "model": model, "batch_size": batch, "clients_per_round": m,
         "population": n, "params": ours_params, "sides": {}, "errors": {}}
  peers = {}
  for side, python in pythons.items():
    rounds = rounds_for(side, workload, m, seconds)
    cmd = peer_command(side, python, workload, m, data, rounds, repeats, seed)
    print(f"[{workload} m={m}] starting {SIDE_NAMES[side]} ({rounds} rounds a repeat) ...",
          flush=True)
    try:
      peers[side] = Peer(side, cmd, log_path(side, workload, m))
    except PeerFailed as e:
      row["errors"][side] = str(e)
      print(f"[{workload} m={m}] {SIDE_NAMES[side]} failed: {e}", flush=True)

  def between():
    for side in list(peers):
      try:
        peers[side].once()
      except PeerFailed as e:
        row["errors"][side] = str(e)
        peers.pop(side).kill()

  rounds = rounds_for("ours", workload, m, seconds)
  print(f"[{workload} m={m}] ours ({rounds} rounds a block) and the peers, alternating ...",
        flush=True)
  try:
    t = speed.time_vectorized(task, "shuffle", rounds, repeats, seed, batch, between=between,
                              clients_per_round=m if m < n else 0)
  finally:
    results = {}
    for side, peer in peers.items():
      try:
        results[side] = peer.finish()
      except PeerFailed as e:
        row["errors"][side] = str(e)
        peer.kill()
  ours = {**speed.summarize(t, rounds, m), "rounds_per_repeat": rounds}
  flops = (speed.lstm_step_flops(batch) if model == "char_lstm"
           else speed.step_flops(task, batch))
  ours["matmul_fraction"] = flops * ours["client_steps_per_second"] / peak
  row["sides"] = {"ours": ours, **results}
  row["loadavg"] = os.getloadavg()
  rates = {s: r["client_steps_per_second"] for s, r in row["sides"].items()}
  row["ratios"] = {s: rates["ours"] / v for s, v in rates.items() if s != "ours" and v}
  print(f"[{workload} m={m}] " + ", ".join(f"{SIDE_NAMES[s]} {v:,.0f}" for s, v in rates.items())
        + " client-steps/s", flush=True)
  return row


# --- the table -------------------------------------------------------------------------------

LABELS = {"w1": "W1 logreg, b10", "w2": "W2 MLP 784-200-200-10, b32",
          "w3": "W3 CNN (5x5 32, 5x5 64, 512), b32", "w7": "W7 char LSTM 64, b10"}


def _rate(v: float) -> str:
  return f"{v:,.0f}" if v >= 100 else f"{v:,.1f}"


def _ratio(v: float) -> str:
  return f"{v:,.0f}x" if v >= 100 else f"{v:.1f}x"


def markdown(record: dict) -> str:
  env, rows, peers = record["environment"], record["results"], record["peers"]
  sides = ["ours", *peers]
  head = (["workload", "clients a round (of N)", *[SIDE_NAMES[s] for s in sides],
           *[f"ours / {SIDE_NAMES[s]}" for s in peers], "ours, of matmul peak"])
  lines = ["# FedAvg against the peers researchers use, side by side", "",
           f"{record['date']}. FedAvg, 10 local SGD steps at lr 0.1, MNIST-shaped generated "
           "data (600 examples a client; W7: Shakespeare-shaped, 10 clients every round), "
           "m clients a round drawn uniformly from N. Client-steps per second, the median of "
           f"{record['repeats']} repeats of about {record['seconds']:g} s, the sides' repeats "
           "alternating, warm-up excluded; ours include one evaluation a repeat. Ours: "
           "`benchmarks/speed/speed.py`'s engine runs; PyTorch loop: copy the global weights, "
           "SGD on shuffled minibatches, collect, average (FL-bench's and Flower's client); "
           "Flower: `start_simulation` with FedAvg on Ray, one client a core, the same "
           "PyTorch client; FedJAX 0.0.17: `fed_avg.federated_averaging`. "
           f"The matmul peak is {env['matmul_gflops']:.0f} GFLOP/s, measured in the same "
           "run.", "",
           "| " + " | ".join(head) + " |",
           "|---|---:|" + "---:|" * (len(head) - 2)]
  for r in rows:
    cells = [LABELS[r["workload"]], f"{r['clients_per_round']:,} of {r['population']:,}"]
    for s in sides:
      got = r["sides"].get(s)
      cells.append(_rate(got["client_steps_per_second"]) if got else
                   ("failed" if s in r["errors"] else "—"))
    cells += [_ratio(r["ratios"][s]) if s in r["ratios"] else "—" for s in peers]
    cells.append(f"{r['sides']['ours']['matmul_fraction']:.0%}")
    lines.append("| " + " | ".join(cells) + " |")
  notes = []
  for key, why in record["left_out"].items():
    notes.append(f"- Left out: {key} ({why}).")
  for side, why in record["missing"].items():
    notes.append(f"- {SIDE_NAMES[side]}: not installed here ({why}).")
  for r in rows:
    for side, why in r["errors"].items():
      why = why if len(why) <= 240 else why[:120] + " ... " + why[-115:]
      notes.append(f"- {r['workload']} at m = {r['clients_per_round']}: {SIDE_NAMES[side]} "
                   f"failed: {why}")
  if "w7" in {r["workload"] for r in rows}:
    notes.append("- W7: the PyTorch sides train nn.LSTM layers of our shapes" + (
        "; FedJAX its own Shakespeare LSTM (its dense layer at all 80 positions, a tanh "
        "after each LSTM layer; benchmarks/speed/fedjax_workloads.py)."
        if "fedjax" in peers else "."))
  software = "; ".join([f"ours jax {env['jax']} on {env['devices']}",
                        *[f"{k} {v}" for k, v in record["versions"].items()]])
  lines += ["", *notes, "" if notes else None,
            harness.machine(env, software,
                            f"; matmul peak {env['matmul_gflops']:.0f} GFLOP/s"), ""]
  return "\n".join(l for l in lines if l is not None)


def versions(rows) -> dict:
  out = {}
  for r in rows:
    for side, got in r["sides"].items():
      if side == "torch":
        out["torch"] = got.get("torch")
      elif side == "flower":
        out["flwr"] = got.get("flwr")
      elif side == "fedjax":
        out["fedjax"] = f"{got.get('fedjax')} on jax {got.get('jax')}"
  return out


# --- main ------------------------------------------------------------------------------------

def check_args() -> str | None:
  """The problem with the flags, or None."""
  if FLAGS.quick:
    for name, value in QUICK.items():
      if not FLAGS[name].present:
        FLAGS[name].value = value
  bad = [w for w in FLAGS.workloads if w not in WORKLOADS]
  if bad:
    return f"unknown --workloads {bad}; valid: {', '.join(WORKLOADS)}"
  bad = [p for p in FLAGS.peers if p not in SIDES]
  if bad:
    return f"unknown --peers {bad}; valid: {', '.join(SIDES)}"
  bad = [c for c in FLAGS.cohorts if not c.isdigit() or int(c) not in COHORTS]
  if bad:
    return f"bad --cohorts {bad}; valid: {', '.join(map(str, COHORTS))}"
  if FLAGS.repeats < 1 or FLAGS.seconds <= 0 or FLAGS.max_round_seconds <= 0:
    return "--repeats must be at least 1, --seconds and --max_round_seconds positive"
  return None


def output_name() -> str:
  """What the run's files are called: peers_quick for --quick, peers for the whole
  comparison (every workload, cohort and peer), peers_subset for less, so that a partial
  run never replaces the whole table."""
  if FLAGS.quick:
    return "peers_quick"
  whole = all(set(FLAGS[f].value) >= set(FLAGS[f].default)
              for f in ("workloads", "cohorts", "peers"))
  return "peers" if whole else "peers_subset"


def cells(peers) -> tuple[list, dict]:
  """The (workload, m) cells to run and {cell: why left out}."""
  todo, left_out = [], {}
  for w in FLAGS.workloads:
    for m in ([W7_CLIENTS] if w == "w7" else sorted({int(c) for c in FLAGS.cohorts})):
      slow = [s for s in ("ours", *peers)
              if round_seconds(s, w, m) > FLAGS.max_round_seconds]
      if slow:
        left_out[f"{w} at m = {m:,}"] = (
            f"one round would take about {max(round_seconds(s, w, m) for s in slow):.0f} s "
            f"on {', '.join(SIDE_NAMES[s] for s in slow)}, over --max_round_seconds")
      else:
        todo.append((w, m))
  return todo, left_out


def main(argv):
  del argv
  problem = check_args()
  if problem:
    sys.stderr.write(f"error: {problem}\n")
    return 2
  name = output_name()
  todo, left_out = cells(FLAGS.peers)
  pythons, missing = environments(FLAGS.peers)
  env = harness.environment()
  import jax  # noqa: PLC0415
  # On a GPU, products large enough to fill it (1024 x 1024 is launch-bound there).
  peak = speed.matmul_flops_per_second(1024 if jax.default_backend() == "cpu" else 8192)
  env["matmul_gflops"] = peak / 1e9
  print(f"matmul peak: {peak / 1e9:.0f} GFLOP/s; {len(todo)} cells, sides: ours, "
        f"{', '.join(pythons) or 'no peer'}", flush=True)
  record = {"date": datetime.date.today().isoformat(), "repeats": FLAGS.repeats,
            "seconds": FLAGS.seconds, "peers": [p for p in FLAGS.peers], "missing": missing,
            "left_out": left_out, "local_steps": speed.LOCAL_STEPS,
            "client_lr": speed.CLIENT_LR, "seed": FLAGS.seed, "results": []}
  scratch = tempfile.mkdtemp(prefix="fedjax_bench_peers_")
  try:
    for w, m in todo:
      record["results"].append(cell(w, m, pythons, scratch, peak))
      record["environment"] = harness.finish(dict(env))
      record["versions"] = versions(record["results"])
      text = markdown(record)
      paths = harness.write(FLAGS.output_dir, name, record, text)
  finally:
    shutil.rmtree(scratch, ignore_errors=True)
  if not todo:
    sys.stderr.write("error: no cell left to run (see --max_round_seconds)\n")
    return 2
  print(text)
  print(f"wrote {' and '.join(paths)}")


if __name__ == "__main__":
  app.run(main)
