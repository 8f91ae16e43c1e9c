"""Does a round cost what its clients' work costs? Padding rows and unequal local steps.

  python -m benchmarks.speed.cost_follows_work [--repeats=5] [--output_dir=results/speed]

FedAvg (server SGD at lr 1, uniform weights), logistic regression on MNIST-shaped data
(benchmarks/speed/workloads.py), per-round time of pairs of worlds, each ratio against its
baseline measured in the same invocation:

  bernoulli   Bernoulli p = 0.1 over 1,000 clients (a cohort slab of cap = 168 rows, about
              100 of them valid) vs uniform 100 of 1,000; 10 local steps, batch 10,
              minibatches with replacement (as speed.py's ratio). Target 1.3x.
  sine        sine availability over 100 clients (base p = 0.5, gamma 0.3, period 20: about
              35 active of a cap of 86) vs uniform 35 of 100; same training.
  epochs      2 local epochs of batch 64 over 100 clients whose sizes give tau_i =
              2 ceil(n_i / 64) in {2, 4, ..., 20} (mean 11), as the loss-aware aggregation
              runs (--local_epochs=2), vs the same data with every client running 11 steps;
              shuffled epochs. Target 1.3x.

Each side is one engine.run in its own thread (`harness.interleaved`): the threads pass a
baton at every evaluation, so their timed blocks (a block of rounds and one evaluation)
alternate and share the machine's load. One untimed warm-up block per side.
"""

import argparse

from fedjax_bench.engine import host_devices

host_devices.use_all_cores()

import numpy as np  # noqa: E402

from benchmarks.speed import harness, workloads  # noqa: E402
from fedjax_bench.algorithms import fedavg  # noqa: E402
from fedjax_bench.core import client_map  # noqa: E402
from fedjax_bench.data.federated import Dataset, FederatedData  # noqa: E402
from fedjax_bench.sim import availability, participation, world as world_lib  # noqa: E402

TARGET = 1.3
TEST_EXAMPLES = 1000


def parse(argv):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--repeats", type=int, default=5, help="timed blocks per side (median)")
  p.add_argument("--pairs", default="bernoulli,sine,epochs",
                 help="comma list of: bernoulli, sine, epochs")
  p.add_argument("--examples_per_client", type=int, default=60,
                 help="bernoulli and sine: examples per client of the generated data")
  p.add_argument("--client_width", type=int, default=-1,
                 help="clients vmapped at once (0: whole cohort, -1: backend default)")
  p.add_argument("--output_dir", default="results/speed")
  args = p.parse_args(argv)
  harness.comma_list(p, "pairs", args.pairs, ("bernoulli", "sine", "epochs"))
  return args


def unequal_dataset(seed: int, num_clients: int = 100, batch: int = 64) -> Dataset:
  """MNIST-shaped data whose client i has ceil(n_i / batch) = 1 + i % 10 batches."""
  sizes = [batch * (1 + i % 10) - 10 for i in range(num_clients)]
  rng = np.random.default_rng(seed)
  n = sum(sizes)
  parts = np.split(np.arange(n), np.cumsum(sizes)[:-1])
  x = rng.integers(0, 256, (n, 28, 28, 1), dtype=np.uint8)
  y = rng.integers(0, 10, n).astype(np.int32)
  return Dataset(
      name="mnist_shaped_unequal", train=FederatedData.from_partition(x, y, parts),
      test_x=rng.integers(0, 256, (TEST_EXAMPLES, 28, 28, 1), dtype=np.uint8),
      test_y=rng.integers(0, 10, TEST_EXAMPLES).astype(np.int32),
      num_classes=10, feature_shape=(28, 28, 1), is_image=True)


def pairs(args):
  """name -> (rounds per block, hp, task, {side: world}, baseline side)."""
  out = {}
  names = args.pairs.split(",")
  hp = {"client_lr": 0.1, "server_lr": 1.0, "weighting": "uniform", "server_opt": "sgd",
        "client_width": args.client_width}
  if "bernoulli" in names:
    task = workloads.task(workloads.mnist_shaped(0, 1000, args.examples_per_client,
                                                 TEST_EXAMPLES), "logreg")
    steps = np.full(1000, 10, np.int32)
    out["bernoulli"] = (30, {**hp, "batch_size": 10, "sampling": "replacement"}, task, {
        "bernoulli p=0.1 of 1000": world_lib.make(
            participation.bernoulli(np.full(1000, 0.1)), steps),
        "uniform 100 of 1000": world_lib.make(participation.uniform(1000, 100), steps)},
        "uniform 100 of 1000")
  if "sine" in names:
    task = workloads.task(workloads.mnist_shaped(1, 100, args.examples_per_client,
                                                 TEST_EXAMPLES), "logreg")
    steps = np.full(100, 10, np.int32)
    out["sine"] = (40, {**hp, "batch_size": 10, "sampling": "replacement"}, task, {
        "sine over 100": world_lib.make(
            availability.make("sine", availability.homogeneous(100, 0.5)), steps),
        "uniform 35 of 100": world_lib.make(participation.uniform(100, 35), steps)},
        "uniform 35 of 100")
  if "epochs" in names:
    task = workloads.task(unequal_dataset(2), "logreg")
    counts = np.asarray(task.counts)
    tau = world_lib.client_steps(counts, local_steps=10, local_epochs=2.0, batch_size=64)
    mean = int(round(tau.mean()))
    full = participation.full(100)
    out["epochs"] = (6, {**hp, "batch_size": 64, "sampling": "shuffle"}, task, {
        f"2 epochs, tau {tau.min()}..{tau.max()}": world_lib.make(full, tau),
        f"every client {mean} steps": world_lib.make(full, np.full(100, mean, np.int32))},
        f"every client {mean} steps")
  return out


def main(argv=None):
  args = parse(argv)
  env = harness.environment(client_width=client_map.resolve_width(args.client_width))
  rows = []
  for name, (rounds, hp, task, worlds, base) in pairs(args).items():
    print(f"[{name}] {' vs '.join(worlds)}: {args.repeats} interleaved blocks of {rounds} "
          "rounds ...", flush=True)
    seconds = harness.interleaved(
        {w: (lambda h, w=w: fedavg.build(task, worlds[w], h), task, hp) for w in worlds},
        rounds, args.repeats)
    per_round = {s: {k: harness.median(v) / rounds for k, v in t.items()}
                 for s, t in seconds.items()}
    for side in worlds:
      if side == base:
        continue
      row = {"pair": name, "side": side, "baseline": base, "rounds_per_block": rounds,
             "seconds_per_round": per_round[side]["wall"],
             "baseline_seconds_per_round": per_round[base]["wall"],
             "ratio": per_round[side]["wall"] / per_round[base]["wall"],
             "cpu_seconds_per_round": per_round[side]["cpu"],
             "baseline_cpu_seconds_per_round": per_round[base]["cpu"],
             "cpu_ratio": per_round[side]["cpu"] / per_round[base]["cpu"],
             "target": TARGET if name != "sine" else None,
             "block_seconds": seconds[side], "baseline_block_seconds": seconds[base],
             "cap": worlds[side].participation.cap,
             "max_steps": worlds[side].max_steps}
      row["met"] = None if row["target"] is None else bool(row["ratio"] <= row["target"])
      rows.append(row)
      print(f"  {side}: {row['seconds_per_round'] * 1e3:.1f} ms/round, {base}: "
            f"{row['baseline_seconds_per_round'] * 1e3:.1f} ms/round, ratio "
            f"{row['ratio']:.2f}x (CPU time: {row['cpu_ratio']:.2f}x)", flush=True)
  config = {"repeats": args.repeats, "statistic": "median",
            "examples_per_client": args.examples_per_client, "model": "logreg",
            "algorithm": "fedavg"}
  record = {"config": config, "environment": harness.finish(env), "results": rows}
  paths = harness.write(args.output_dir, "cost_follows_work", record, markdown(record))
  print(f"wrote {' and '.join(paths)}")


def markdown(record) -> str:
  rows, env = record["results"], record["environment"]
  lines = ["# Cost follows work: padding rows and unequal local steps", "",
           "FedAvg, logistic regression on MNIST-shaped data; seconds per round (a block of "
           "rounds and one evaluation, divided by the rounds), median of "
           f"{record['config']['repeats']} blocks per side, the two sides' blocks interleaved "
           "(`python -m benchmarks.speed.cost_follows_work`). The target is on the wall-clock "
           "ratio; the CPU-time ratio (the process's CPU seconds over the same blocks) is "
           "less disturbed by other jobs on the machine.", "",
           "| pair | side | ms/round | baseline | ms/round | ratio | CPU-time ratio | target "
           "| met? |",
           "|---|---|---:|---|---:|---:|---:|---:|:---:|"]
  for r in rows:
    target, met = harness.target_cells(r["target"], r["met"])
    lines.append(f"| {r['pair']} | {r['side']} (cap {r['cap']}, max steps {r['max_steps']}) "
                 f"| {r['seconds_per_round'] * 1e3:.1f} | {r['baseline']} "
                 f"| {r['baseline_seconds_per_round'] * 1e3:.1f} | {r['ratio']:.2f}x "
                 f"| {r['cpu_ratio']:.2f}x "
                 f"| {target} | {met} |")
  lines += ["", f"Clients trained {env['client_width']} at a time (0 = the whole cohort "
            "vmapped).", "", harness.machine(env), ""]
  return "\n".join(lines)


if __name__ == "__main__":
  main()
