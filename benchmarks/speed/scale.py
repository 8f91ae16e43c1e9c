"""Scale workloads: populations, seeds in one program, clients generated on demand.

  python -m benchmarks.speed.scale [--workloads=w4,w5,w6] [--repeats=5] [--output_dir=results/speed]

Each workload compares two runs measured in the same invocation, each in its own
subprocess (a clean peak-memory reading and compile cache):
* W4: FedAWE, logistic regression, 10,000 clients each available with probability 0.1
  (about 1,000 active per round), against 1,000 clients always available: the same active
  count. Target: at most 2x the cost per round.
* W5: W1 (FedAvg, logistic regression on MNIST-shaped data, 100 clients per round, 10 local
  steps of batch 10) with 8 seeds in one program, against 1 seed. Target: at most 3x.
* W6: FedAvg over 10,000,000 clients whose LEAF Synthetic(1, 1) data is generated on demand
  from each client's key (data/stream.py), 1,000 drawn per round in O(1,000)
  (--participation=uniform_sparse), against a population of 1,000 with the same 1,000 active.
  Target: at most 2x.
Reported per run: seconds per round (median block), client-steps/s, compile seconds, peak
resident memory of the process (on GPU/TPU also the device's peak bytes).
"""

import json
import os
import subprocess
import sys
import time

from fedjax_bench.engine import host_devices

host_devices.use_all_cores()

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

from benchmarks.speed import harness  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("workloads", ["w4", "w5", "w6"], "Workloads: w4, w5, w6.")
flags.DEFINE_integer("repeats", 5, "Timed blocks per run; the median is reported.")
flags.DEFINE_integer("rounds", 5, "Rounds per timed block.")
flags.DEFINE_string("output_dir", "results/speed", "Where scale.json and scale.md go.")
flags.DEFINE_string("run_one", None, "Internal: run one side of a workload and print JSON.")

LOCAL_STEPS = 10
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# workload -> (target ratio, (label, run name) of the measured side, of the reference side)
WORKLOADS = {
    "w4": (2.0, ("10,000 clients, p = 0.1", "w4_10k"), ("1,000 clients, p = 1", "w4_1k")),
    "w5": (3.0, ("8 seeds in one program", "w5_8"), ("1 seed", "w5_1")),
    "w6": (2.0, ("10,000,000 clients on demand", "w6_10m"), ("1,000 clients on demand", "w6_1k")),
}


def setup(name: str):
  """(build, task, hparams, seeds, clients per round) of one side."""
  import numpy as np
  from fedjax_bench import models
  from fedjax_bench.algorithms import fedavg, fedawe
  from fedjax_bench.task.build import make_stream_task
  from fedjax_bench.data import stream
  from fedjax_bench.sim import availability, participation, world as world_lib

  hp = {"client_lr": 0.05, "batch_size": 10, "sampling": "replacement", "weighting": "uniform",
        "server_opt": "sgd", "client_width": -1, "server_lr": 1.0}
  logreg = models.make("logreg", num_classes=10, is_image=False)
  if name.startswith("w4"):
    n, p = (10_000, 0.1) if name == "w4_10k" else (1_000, 1.0)
    task = make_stream_task(stream.leaf_stream(n, seed=0), logreg)
    part = availability.make("stationary", availability.homogeneous(n, p))
    world = world_lib.make(part, np.full(n, LOCAL_STEPS, np.int32))
    hp.update(fedawe_clip=0.0, fedawe_eval="server")
    return (lambda h: fedawe.build(task, world, h)), task, hp, [0], int(n * p)
  if name.startswith("w5"):
    from benchmarks.speed import workloads
    n = 100
    task = workloads.task(workloads.mnist_shaped(0, n), "logreg")
    world = world_lib.make(participation.full(n), np.full(n, LOCAL_STEPS, np.int32))
    seeds = list(range(8)) if name == "w5_8" else [0]
    return (lambda h: fedavg.build(task, world, h)), task, hp, seeds, n
  n = 10_000_000 if name == "w6_10m" else 1_000
  task = make_stream_task(stream.leaf_stream(n, seed=0), logreg)
  world = world_lib.make(participation.uniform_sparse(n, 1000),
                         np.full(n, LOCAL_STEPS, np.int32))
  return (lambda h: fedavg.build(task, world, h)), task, hp, [0], 1000


def run_one(name: str) -> dict:
  import jax
  import numpy as np
  t0 = time.perf_counter()
  build, task, hp, seeds, active = setup(name)
  setup_seconds = time.perf_counter() - t0
  timing = harness.blocks(build, task, hp, seeds, FLAGS.rounds, FLAGS.repeats)
  out = timing["output"]
  per_round = harness.median(timing["seconds"]) / FLAGS.rounds
  row = {"name": name, "seconds_per_round": per_round, "seeds": len(seeds),
         "active_per_round": active, "num_clients": task.num_clients,
         "client_steps_per_second": len(seeds) * active * LOCAL_STEPS / per_round,
         "compile_seconds": timing["compile_seconds"], "setup_seconds": setup_seconds,
         "peak_rss_mib": harness.peak_rss_mib(),
         "final_num_active": float(np.nanmean(out.history.metrics["num_active"][-1]))}
  stats = jax.devices()[0].memory_stats() if hasattr(jax.devices()[0], "memory_stats") else None
  if stats and "peak_bytes_in_use" in stats:
    row["device_peak_mib"] = stats["peak_bytes_in_use"] / 2**20
  return row


def spawn(name: str) -> dict:
  cmd = [sys.executable, "-m", "benchmarks.speed.scale", f"--run_one={name}",
         f"--repeats={FLAGS.repeats}", f"--rounds={FLAGS.rounds}"]
  p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
  if p.returncode != 0:
    raise RuntimeError(f"{name} failed:\n{p.stderr[-3000:]}")
  return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv):
  del argv
  if FLAGS.run_one:
    print(json.dumps(run_one(FLAGS.run_one)))
    return 0
  if harness.unknown("workloads", FLAGS.workloads, list(WORKLOADS)):
    return 2
  env = harness.environment()
  rows = []
  for w in FLAGS.workloads:
    target, (label, name), (ref_label, ref_name) = WORKLOADS[w]
    print(f"[{w}] {label} ...", flush=True)
    measured = spawn(name)
    print(f"[{w}] {ref_label} ...", flush=True)
    ref = spawn(ref_name)
    ratio = measured["seconds_per_round"] / ref["seconds_per_round"]
    rows.append({"workload": w, "label": label, "reference_label": ref_label,
                 "measured": measured, "reference": ref, "cost_ratio": ratio,
                 "target": target, "met": bool(ratio <= target)})
    print(f"[{w}] {ratio:.2f}x the cost per round of {ref_label} (target <= {target:g}x)")
  record = {"environment": harness.finish(env), "repeats": FLAGS.repeats,
            "rounds_per_block": FLAGS.rounds, "results": rows}
  harness.write(FLAGS.output_dir, "scale", record, markdown(record))
  print(markdown(record))
  return 0


def markdown(record) -> str:
  rows, env = record["results"], record["environment"]
  lines = ["# Scale: cost per round against a reference measured in the same invocation", "",
           "| workload | measured | s/round | reference | s/round | cost ratio | target | met? "
           "| compile s (measured / ref) | peak RSS MiB (measured / ref) |",
           "|---|---|---:|---|---:|---:|---:|:---:|---:|---:|"]
  for r in rows:
    m, f = r["measured"], r["reference"]
    lines.append(f"| {r['workload']} | {r['label']} | {m['seconds_per_round']:.4f} | "
                 f"{r['reference_label']} | {f['seconds_per_round']:.4f} | "
                 f"{r['cost_ratio']:.2f}x | <= {r['target']:g}x | "
                 f"{'yes' if r['met'] else 'no'} | {m['compile_seconds']:.1f} / "
                 f"{f['compile_seconds']:.1f} | {m['peak_rss_mib']:.0f} / "
                 f"{f['peak_rss_mib']:.0f} |")
  lines += ["", f"Median of {record['repeats']} blocks of {record['rounds_per_block']} "
            "rounds per run, each run in its own process; one evaluation per block is "
            "included. Client-steps/s: " + ", ".join(
                f"{r['workload']} {r['measured']['client_steps_per_second']:,.0f} vs "
                f"{r['reference']['client_steps_per_second']:,.0f}" for r in rows) + ".", "",
            harness.machine(env), ""]
  return "\n".join(lines)


if __name__ == "__main__":
  app.run(main)
