"""Does a personalized round cost what its extra local work costs?

  python -m benchmarks.speed.personal_cost [--repeats=5] [--output_dir=results/speed]

Each personalized algorithm against FedAvg on the same task and world: the 784-200-200-10
MLP on MNIST-shaped generated data (100 clients of 600 examples, each client's own 20% held
out), 10 of 100 clients a round uniformly, 10 local SGD steps of batch 32, shuffled epochs.
Every side is one engine.run; the sides' timed blocks (ROUNDS rounds and one evaluation)
take turns (`harness.interleaved`), after one untimed warm-up block each.

"work" is the gradients of the model a client computes per local step, against FedAvg's one,
counted from each paper's algorithm: FedRep's 10 head steps before the 10 body steps (2),
Ditto's personal model trained beside the global one (2), APFL's local and global models (2),
pFedMe's K = 5 inner steps (5), Per-FedAvg's two minibatch gradients (FO: 2) and its
finite-difference Hessian-vector product (HF: 4); FedPer and FedBN train one model (1). The
table's last column is the time ratio over the work ratio: 1 means the round costs exactly its
extra local work, above 1 what the method adds beyond it (the personal evaluation of every
client, per-client state gathered and scattered).
"""

import argparse

from benchmarks.speed import harness, workloads
from fedjax_bench import experiment
from fedjax_bench.engine import host_devices

ROUNDS = 20
# algorithm -> (settings beside the common ones, gradients per local step against FedAvg's 1)
SIDES = {
    "fedavg": ({}, 1),
    "fedper": ({}, 1),
    "fedbn": ({"model": "mlp_bn"}, 1),
    "fedrep": ({"head_steps": 10}, 2),
    "ditto": ({}, 2),
    "apfl": ({}, 2),
    "pfedme": ({"pfedme_k": 5}, 5),
    "perfedavg_fo": ({}, 2),
    "perfedavg_hf": ({}, 4),
}
COMMON = dict(model="mlp", num_clients=100, participation="uniform", clients_per_round=10,
              local_steps=10, batch_size=32, client_lr=0.05, sampling="shuffle",
              holdout_fraction=0.2, rounds=ROUNDS, eval_every=ROUNDS)


def parse(argv):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--repeats", type=int, default=5, help="timed blocks per side (median)")
  p.add_argument("--algos", default=",".join(SIDES),
                 help=f"comma list of: {', '.join(SIDES)} (fedavg, the baseline, always runs)")
  p.add_argument("--output_dir", default="results/speed")
  args = p.parse_args(argv)
  algos = harness.comma_list(p, "algos", args.algos, list(SIDES))
  args.algos = ["fedavg"] + [a for a in algos if a != "fedavg"]
  return args


def side(algo: str, dataset):
  values = {**COMMON, **SIDES[algo][0], "algo": algo}
  exp = experiment.setup(values, dataset=dataset)
  return exp.build, exp.task, exp.hparams


def main(argv=None):
  args = parse(argv)
  host_devices.use_all_cores()  # here, not at import: a test process keeps its own devices
  env = harness.environment()
  dataset = workloads.mnist_shaped(0, COMMON["num_clients"], 600, 1000)
  sides = {a: side(a, dataset) for a in args.algos}
  print(f"{', '.join(sides)}: {args.repeats} interleaved blocks of {ROUNDS} rounds ...",
        flush=True)
  seconds = harness.interleaved(sides, ROUNDS, args.repeats)
  per_round = {a: {k: harness.median(v) / ROUNDS for k, v in t.items()}
               for a, t in seconds.items()}
  base = per_round["fedavg"]
  rows = []
  for a in args.algos:
    work = SIDES[a][1]
    row = {"algo": a, "settings": SIDES[a][0], "work": work,
           "seconds_per_round": per_round[a]["wall"],
           "ratio": per_round[a]["wall"] / base["wall"],
           "cpu_ratio": per_round[a]["cpu"] / base["cpu"], "block_seconds": seconds[a]}
    row["ratio_over_work"] = row["ratio"] / work
    rows.append(row)
    print(f"  {a}: {row['seconds_per_round'] * 1e3:.1f} ms/round, {row['ratio']:.2f}x FedAvg, "
          f"work {work}x, time / work {row['ratio_over_work']:.2f}", flush=True)
  record = {"config": {**COMMON, "repeats": args.repeats, "statistic": "median"},
            "environment": harness.finish(env), "results": rows}
  paths = harness.write(args.output_dir, "personal_cost", record, markdown(record))
  print(f"wrote {' and '.join(paths)}")


def markdown(record) -> str:
  lines = ["# Personalized rounds against FedAvg's", "",
           "The 784-200-200-10 MLP on MNIST-shaped data, 10 of 100 clients a round, 10 local "
           f"steps of batch 32, each client's own 20% held out; blocks of {ROUNDS} rounds and "
           "one evaluation (each method's own: the personalized ones score every client's "
           "model), the sides' blocks interleaved; the median block "
           "(`python -m benchmarks.speed.personal_cost`). work: gradients per local step "
           "against FedAvg's one.", "",
           "| algorithm | ms/round | time vs FedAvg | work vs FedAvg | time / work |",
           "|---|---:|---:|---:|---:|"]
  for r in record["results"]:
    lines.append(f"| `{r['algo']}` | {r['seconds_per_round'] * 1e3:.1f} | {r['ratio']:.2f}x | "
                 f"{r['work']}x | {r['ratio_over_work']:.2f} |")
  lines += ["", harness.machine(record["environment"])]
  return "\n".join(lines) + "\n"


if __name__ == "__main__":
  main()
