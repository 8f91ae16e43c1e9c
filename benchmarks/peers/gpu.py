"""The papers' settings on a GPU, one part per process, and the table `benchmarks/gpu.sh`
prints (it runs every part, then ``--part=table``).

  python -m benchmarks.peers.gpu --part=emnist|hetero_agg|fedawe --out=DIR [--dry_run]
  python -m benchmarks.peers.gpu --part=table --out=DIR

Each setting part runs one of our configurations exactly as the command line would
(`cli.parse_argv`, `api.execute`), without writing a run directory, and writes
DIR/PART.json: the device, the rounds, the runs (seeds x grid points) and the engine's
rounds per second and compilation time. The settings (SETTINGS):

* emnist: FedJAX's EMNIST FedAvg (its examples/emnist_fed_avg.py, with the hyperparameters
  of Reddi et al., "Adaptive Federated Optimization", ICLR 2021): 1,500 rounds of 10
  clients drawn uniformly from 3,400, one local epoch of batch 20, client SGD at
  10^-1.5, server Adam at 10^-2.5 (b1 0.9, b2 0.999, eps 10^-4, bias-corrected as
  optax's: ``--server_opt=optax_adam``), its CNN (conv 3x3 32, conv 3x3 64, max pooling,
  dropout 0.25, dense 128, dense 62: our ``fedef_cnn`` layers, without FedJAX's second
  dropout). Federated EMNIST-62 comes from TFF's files when $FEDJAX_BENCH_EMNIST_DIR
  holds them (``--dataset=tff_h5``); otherwise generated data of its size stands in
  (671,585 examples of 28x28x1 over 3,400 clients of equal size, 62 classes);
* hetero_agg: the loss-aware aggregation paper's NIID cell as its flagfile gives it
  (benchmarks/configs/hetero_agg/niid_fedsoftmax.flags: FedSoftMax, 38 seeds in one
  program, 50 rounds of all 50 clients, the paper's CNN);
* fedawe: FedAWE on CIFAR-10 under interleaved-sine availability
  (benchmarks/configs/fedawe/paper_cifar10_interleaved_sine.flags with algo_fedawe.flags:
  3 seeds, cnn_cifar10, batch 128, 10 local steps), its first 100 of the paper's 2,000
  rounds (the table gives the whole run's time at that rate).

An image dataset that is not prepared on the machine (nothing can be fetched on the GPU
machines this is meant for) is replaced by generated arrays of its shapes, sizes and
classes (`stand_in`), named in the table: the time of a round depends on the shapes only.
``--dry_run`` runs each setting for 2 rounds and 1 seed, evaluated on a few examples, on
small stand-ins (checks the script on a CPU).
"""

import argparse
import json
import os
import sys
import time

from fedjax_bench.errors import UsageError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = os.path.join(REPO, "benchmarks", "configs")
EMNIST_ENV = "FEDJAX_BENCH_EMNIST_DIR"
# Federated EMNIST-62 (TFF's emnist.load_data(only_digits=False)): 3,400 writers, 671,585
# training and 77,483 test examples.
EMNIST_CLIENTS, EMNIST_TRAIN, EMNIST_TEST, EMNIST_CLASSES = 3400, 671_585, 77_483, 62
EMNIST_FLAGS = ["--algo=fedavg", "--model=fedef_cnn", "--participation=uniform",
                "--clients_per_round=10", "--rounds=1500", "--local_epochs=1",
                "--batch_size=20", "--sampling=shuffle", "--client_lr=0.0316228",
                "--server_opt=optax_adam", "--server_lr=0.00316228", "--server_beta1=0.9",
                "--server_beta2=0.999", "--server_eps=0.0001", "--eval_every=100",
                "--seeds=1"]
# part -> (title, flags, the paper's rounds when the part times fewer)
SETTINGS = {
    "emnist": ("FedJAX's EMNIST FedAvg, 1,500 rounds of 10 of 3,400 clients, its CNN",
               EMNIST_FLAGS, None),
    "hetero_agg": ("Loss-aware aggregation, NIID FedSoftMax, 38 seeds x 50 rounds x 50 "
                   "clients, the paper's CNN",
                   [f"--flagfile={CONFIGS}/hetero_agg/niid_fedsoftmax.flags"], None),
    "fedawe": ("FedAWE, CIFAR-10 interleaved sine, 3 seeds x 100 clients, cnn_cifar10",
               [f"--flagfile={CONFIGS}/fedawe/paper_cifar10_interleaved_sine.flags",
                f"--flagfile={CONFIGS}/fedawe/algo_fedawe.flags", "--rounds=100"], 2000),
}
PARTS = (*SETTINGS, "table")
DRY_RUN = ["--rounds=2", "--eval_every=1", "--seeds=1", "--train_eval_examples=256"]

_stand_ins = {}  # dataset -> why it is generated


def stand_in(real_load, dry_run: bool = False):
  """`data.load_arrays`, or generated uint8 images and labels of the dataset's shapes,
  sizes and classes when it cannot be read here (federated EMNIST-62's when --part=emnist
  stands in for it; with ``dry_run`` at most 20 training examples a client of EMNIST's
  and 1,000 test examples)."""
  import numpy as np  # noqa: PLC0415
  from fedjax_bench.data import tfds_data  # noqa: PLC0415

  def load(name, data_dir=None, cache_dir=None):
    spec = tfds_data.SPECS[name]
    n_train, n_test, classes = spec.num_train, spec.num_test, spec.num_classes
    if name == "emnist" and "emnist_62" in _stand_ins:
      n_train, n_test, classes = EMNIST_TRAIN, EMNIST_TEST, EMNIST_CLASSES
    else:
      try:
        return real_load(name, data_dir=data_dir, cache_dir=cache_dir)
      except (UsageError, ImportError) as e:
        why = str(e).splitlines()[0]
      _stand_ins[name] = why if len(why) <= 100 else why[:97] + "..."
    if dry_run:
      n_test = min(n_test, 1000)
      if name == "emnist" and "emnist_62" in _stand_ins:
        n_train = 20 * EMNIST_CLIENTS
    rng = np.random.default_rng(0)
    return {"train_x": rng.integers(0, 256, (n_train, *spec.image_shape), dtype=np.uint8),
            "train_y": rng.integers(0, classes, n_train).astype(np.int32),
            "test_x": rng.integers(0, 256, (n_test, *spec.image_shape), dtype=np.uint8),
            "test_y": rng.integers(0, classes, n_test).astype(np.int32),
            "num_classes": classes}
  return load


def run_setting(part: str, out: str, dry_run: bool) -> dict:
  from fedjax_bench import api, cli, data  # noqa: PLC0415
  import jax  # noqa: PLC0415

  title, argv, paper_rounds = SETTINGS[part]
  argv = list(argv)
  if part == "emnist":
    emnist_dir = os.environ.get(EMNIST_ENV, "")
    if emnist_dir:
      argv += ["--dataset=tff_h5", f"--data_dir={emnist_dir}"]
    else:  # EMNIST-62's size stands in: the TFDS emnist source, generated arrays
      _stand_ins["emnist_62"] = f"${EMNIST_ENV} not set"
      argv += ["--dataset=emnist", f"--num_clients={EMNIST_CLIENTS}", "--partition=iid"]
  if dry_run:
    argv += DRY_RUN
  data.load_arrays = stand_in(data.load_arrays, dry_run)
  cli.parse_argv(["gpu", *argv])
  cfg, seeds, grid = cli.resolve_flags()
  t0 = time.perf_counter()
  result = api.execute(cfg, seeds, grid, progress=True, argv=argv)
  wall = time.perf_counter() - t0
  summary = result.summary
  stood_in = {k: v for k, v in _stand_ins.items() if k != "emnist_62"}
  if part == "emnist" and "emnist_62" in _stand_ins:
    stood_in = {"federated EMNIST-62": _stand_ins["emnist_62"]}
  device = jax.devices()[0]
  row = {"part": part, "title": title, "flags": argv, "device": device.device_kind,
         "platform": device.platform, "rounds": cfg.eval.rounds, "paper_rounds": paper_rounds,
         "runs": len(seeds) * max(len(grid), 1),
         "rounds_per_second": summary["rounds_per_second"],
         "compile_seconds": summary["compile_seconds"],
         "engine_seconds": summary["wall_seconds"], "process_seconds": wall,
         "stand_ins": stood_in, "dry_run": dry_run}
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, f"{part}.json"), "w") as f:
    json.dump(row, f, indent=1)
  return row


def table(out: str) -> str:
  """The settings' rows and the workloads' table (compare.py's peers.md in OUT), with the
  device named."""
  rows = []
  for part in SETTINGS:
    path = os.path.join(out, f"{part}.json")
    if os.path.exists(path):
      with open(path) as f:
        rows.append(json.load(f))
    else:
      rows.append({"part": part, "title": SETTINGS[part][0], "missing": True})
  devices = sorted({r["device"] for r in rows if "device" in r})
  lines = [f"# Our engine at paper scale on {', '.join(devices) or 'no device (no part ran)'}",
           "", "| setting | runs | rounds timed | rounds/s | compile s | the paper's run | "
           "data |", "|---|---:|---:|---:|---:|---:|---|"]
  for r in rows:
    if r.get("missing"):
      lines.append(f"| {r['title']} | — | — | failed or timed out (see its log) | — | — "
                   "| — |")
      continue
    rate = r["rounds_per_second"]
    paper = r["paper_rounds"] or r["rounds"]
    whole = "—" if r.get("dry_run") else f"{paper / rate:,.0f} s for {paper:,} rounds"
    data = "; ".join(f"{k} generated ({v})" for k, v in r["stand_ins"].items()) or "real"
    rate_text = f"{rate:,.0f}" if rate >= 10 else f"{rate:.2f}" if rate >= 0.1 else f"{rate:.3g}"
    lines.append(f"| {r['title']} | {r['runs']} | {r['rounds']:,} | {rate_text} | "
                 f"{r['compile_seconds']:.1f} | {whole} | "
                 f"{data} |")
  if any(r.get("dry_run") for r in rows):
    lines += ["", "Dry run: 2 rounds and 1 seed each, not the papers' scale."]
  peers = os.path.join(out, "peers.md")
  if os.path.exists(peers):
    with open(peers) as f:
      lines += ["", f.read().replace("# FedAvg against", "## FedAvg against", 1).rstrip()]
  return "\n".join(lines) + "\n"


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--part", required=True, help=f"one of {', '.join(PARTS)}")
  p.add_argument("--out", default="results/speed/gpu", help="where PART.json files go")
  p.add_argument("--dry_run", action="store_true", help="2 rounds, 1 seed each")
  a = p.parse_args(argv)
  if a.part not in PARTS:
    sys.stderr.write(f"error: unknown --part={a.part!r}; valid: {', '.join(PARTS)}\n")
    return 2
  if a.part == "table":
    text = table(a.out)
    with open(os.path.join(a.out, "gpu.md"), "w") as f:
      f.write(text)
    print(text)
    return 0
  row = run_setting(a.part, a.out, a.dry_run)
  print(json.dumps(row))
  return 0


if __name__ == "__main__":
  sys.exit(main())
