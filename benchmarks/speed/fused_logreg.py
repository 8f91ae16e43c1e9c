"""The fused logistic-regression kernel against XLA's loop, both in the engine, one process.

  python -m benchmarks.speed.fused_logreg [--repeats=5] [--output_dir=results/speed]

FedAvg (10 local SGD steps at lr 0.1, minibatches with replacement, uniform weights,
server SGD at lr 1), logistic regression, each workload run twice in the same invocation:
with the kernel (`--fused_logreg`, the default on a CPU) and with XLA's loop
(`--fused_logreg=false`). The two sides are engine runs in threads whose timed blocks
alternate (`harness.interleaved`), so both see the same load; the ratio is of the median
seconds per block, wall clock and the process's CPU time.

  w1        MNIST-shaped data (uint8 pixels, D = 784, 10 classes), batch 10, 100 of 100
            clients a round (speed.py's W1)
  w1_m10    the same, 10 of 100 clients a round
  logreg32  the same data, batch 32, 100 clients (speed.py's logreg32)
  synthetic LEAF Synthetic(1, 1)-shaped float features (D = 60, 10 classes), batch 10,
            30 of 100 clients a round (the claims' convex runs)
"""

import argparse

from fedjax_bench.engine import host_devices

host_devices.use_all_cores()

import numpy as np  # noqa: E402

from benchmarks.speed import harness, speed  # noqa: E402
from fedjax_bench import models  # noqa: E402
from fedjax_bench.algorithms import fedavg  # noqa: E402
from fedjax_bench.core.kernels import logreg_sgd  # noqa: E402
from fedjax_bench.data import synthetic  # noqa: E402
from fedjax_bench.sim import participation, world as world_lib  # noqa: E402
from fedjax_bench.task.build import make_task as make_task_lib  # noqa: E402

# name -> (data, batch, clients a round, rounds a block)
WORKLOADS = {"w1": ("mnist", 10, 100, 30), "w1_m10": ("mnist", 10, 10, 200),
             "logreg32": ("mnist", 32, 100, 20), "synthetic": ("synthetic", 10, 30, 200)}


def parse(argv):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--repeats", type=int, default=5, help="timed blocks per side (median)")
  p.add_argument("--workloads", default=",".join(WORKLOADS),
                 help=f"comma list of: {', '.join(WORKLOADS)}")
  p.add_argument("--output_dir", default="results/speed")
  args = p.parse_args(argv)
  harness.comma_list(p, "workloads", args.workloads, list(WORKLOADS))
  if args.repeats < 1:
    p.error("--repeats must be at least 1")
  return args


def make_task(data: str, seed: int = 0):
  if data == "mnist":
    return speed.make_task(speed.make_dataset(seed, speed.NUM_CLIENTS), "logreg")
  ds = synthetic.leaf_synthetic(speed.NUM_CLIENTS, 1.0, 1.0, seed)
  return make_task_lib(ds, models.make("logreg", num_classes=10, is_image=False))


def main(argv=None):
  args = parse(argv)
  if logreg_sgd.target(np.uint8) is None:
    raise SystemExit("error: the kernel is not available here (see the line above)")
  env = harness.environment()
  peak = speed.matmul_flops_per_second()
  env["matmul_gflops"] = peak / 1e9
  rows = []
  for name in args.workloads.split(","):
    data, batch, m, rounds = WORKLOADS[name]
    task = make_task(data)
    n = task.num_clients
    scheme = participation.full(n) if m == n else participation.uniform(n, m)
    world = world_lib.make(scheme, np.full(n, speed.LOCAL_STEPS, np.int32))
    base = {"client_lr": speed.CLIENT_LR, "server_lr": 1.0, "batch_size": batch,
            "sampling": "replacement", "weighting": "uniform", "server_opt": "sgd"}
    sides = {side: (lambda h: fedavg.build(task, world, h), task,
                    {**base, "fused_logreg": side == "kernel"}) for side in ("kernel", "xla")}
    print(f"[{name}] kernel vs XLA's loop: {args.repeats} interleaved blocks of {rounds} "
          "rounds ...", flush=True)
    seconds = harness.interleaved(sides, rounds, args.repeats)
    steps = rounds * m * speed.LOCAL_STEPS
    rate = {s: steps / harness.median(t["wall"]) for s, t in seconds.items()}
    cpu = {s: harness.median(t["cpu"]) for s, t in seconds.items()}
    rows.append({"workload": name, "data": data, "batch_size": batch, "clients_per_round": m,
                 "features": int(task.x.shape[1]), "rounds_per_block": rounds,
                 "kernel_client_steps_per_second": rate["kernel"],
                 "xla_client_steps_per_second": rate["xla"],
                 "ratio": rate["kernel"] / rate["xla"],
                 "cpu_ratio": cpu["xla"] / cpu["kernel"], "seconds": seconds})
    print(f"[{name}] kernel {rate['kernel']:,.0f} client-steps/s, XLA's loop "
          f"{rate['xla']:,.0f}: {rows[-1]['ratio']:.2f}x", flush=True)
  harness.finish(env)
  lines = ["# The fused logistic-regression kernel against XLA's loop", "",
           "FedAvg, 10 local SGD steps, minibatches with replacement; the engine with "
           "`--fused_logreg` (kernel) and with `--fused_logreg=false` (XLA's loop), their "
           f"{args.repeats} timed blocks interleaved in one process "
           "(`python -m benchmarks.speed.fused_logreg`). Client-steps per second of the "
           "median block (its rounds and one evaluation); the CPU-time ratio is of the "
           "process's CPU seconds over the same blocks. The matmul peak is "
           f"{env['matmul_gflops']:.0f} GFLOP/s, measured in the same run.", "",
           "| workload | data, features | batch | clients a round | kernel | XLA's loop | ratio "
           "| CPU-time ratio |", "|---|---|---:|---:|---:|---:|---:|---:|"]
  for r in rows:
    lines.append(f"| {r['workload']} | {r['data']}, {r['features']} | {r['batch_size']} "
                 f"| {r['clients_per_round']} | {r['kernel_client_steps_per_second']:,.0f} "
                 f"| {r['xla_client_steps_per_second']:,.0f} | {r['ratio']:.2f}x "
                 f"| {r['cpu_ratio']:.2f}x |")
  lines += ["", harness.machine(env)]
  paths = harness.write(args.output_dir, "fused_logreg",
                        {"config": vars(args), "environment": env, "results": rows},
                        "\n".join(lines))
  print("\n".join(lines[6:]))
  print(f"wrote {' and '.join(paths)}")


if __name__ == "__main__":
  main()
