"""benchmarks/run.py end to end: bad input, the results contract, FedAvg on real MNIST."""

import csv
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import REPO, shared_tfds_dir
from fedjax_bench.algorithms import ALGORITHMS  # the enums follow the registries
from fedjax_bench.core.server_opt import SERVER_OPTS
from fedjax_bench.data import DATASETS, PARTITIONS
from fedjax_bench.models import MODELS

RUN = str(REPO / "benchmarks" / "run.py")


def _run(args, tmp_path, env=None, timeout=600):
  env = dict(os.environ, FEDJAX_BENCH_CACHE=str(tmp_path / "cache"), **(env or {}))
  return subprocess.run([sys.executable, RUN, *args], capture_output=True, text=True,
                        env=env, timeout=timeout, cwd=tmp_path)


@pytest.mark.parametrize("args,message", [
    (["--algo=fedbogus"], "--algo=fedbogus: value should be one of <" + "|".join(sorted(ALGORITHMS)) + ">"),
    (["--dataset=imagenet"], "value should be one of <" + "|".join(DATASETS) + ">"),
    (["--model=resnet9000"], "value should be one of <" + "|".join(MODELS) + ">"),
    (["--partition=random"], "value should be one of <natural|" + "|".join(PARTITIONS) + ">"),
    (["--server_opt=lion"], "|".join(SERVER_OPTS)),
    (["--no_such_flag=1"], "Unknown command line flag 'no_such_flag'"),
    (["--clients_per_round=11", "--num_clients=10"], "must not exceed --num_clients"),
    (["--rounds=0"], "--rounds must be positive"),
    (["--batch_size=-4"], "--batch_size must be positive"),
    (["--client_lr=0"], "--client_lr must be positive"),
    (["--alpha=-1"], "--alpha must be positive"),
    (["--seeds=two"], "--seeds='two' must be a count"),
    (["--model=cnn"], "--model=fedavg_cnn needs image data"),
    (["--dataset=synthetic", "--partition=dirichlet"], "natural per-user split"),
    (["stray"], "unexpected arguments"),
    (["--sweep=client_lr"], "must look like NAME:V1,V2"),
    (["--sweep=num_clients:10,20"], "'num_clients' is not a hyperparameter"),
    (["--sweep=local_steps:1,2"], "cannot be swept in one program"),
    (["--sweep=batch_size:10,32"], "cannot be swept in one program"),
    (["--sweep=client_lr:0.1,x"], "values must be numbers"),
    (["--sweep=client_lr:0.1", "--client_lr=0.2"], "given and swept"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
  r = _run([*args, f"--output_dir={tmp_path / 'out'}", "--rounds=2"
            if "--rounds=0" not in args else "--eval_every=1"], tmp_path)
  assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
  lines = [l for l in r.stderr.splitlines() if l.strip()]
  assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
  assert message in lines[0]
  assert "Traceback" not in r.stderr


def test_unwritable_output_dir_and_missing_data(tmp_path):
  blocker = tmp_path / "file"
  blocker.write_text("")
  r = _run([f"--output_dir={blocker / 'sub'}", "--rounds=1"], tmp_path)
  assert r.returncode == 2 and "is not writable" in r.stderr
  t = time.perf_counter()
  r = _run(["--dataset=mnist", f"--output_dir={tmp_path / 'o'}"], tmp_path,
           env={"TFDS_DATA_DIR": str(tmp_path / "empty"), "FEDJAX_BENCH_OFFLINE": "1"})
  assert time.perf_counter() - t < 15
  assert r.returncode == 2 and "TFDS_DATA_DIR" in r.stderr and "Traceback" not in r.stderr


def test_a_data_dir_that_does_not_exist_is_an_error_even_with_a_cache(tmp_path):
  """The cache holds MNIST (all-zero arrays of the right shapes), so nothing needs the data
  dir; a --data_dir the user typed that does not exist must still be refused."""
  import numpy as np
  from fedjax_bench.data import tfds_data
  spec = tfds_data.SPECS["mnist"]
  paths = tfds_data._cache_paths(tmp_path / "cache", "mnist", spec)
  for split, n in (("train", spec.num_train), ("test", spec.num_test)):
    paths[f"{split}_x"].parent.mkdir(parents=True, exist_ok=True)
    np.save(paths[f"{split}_x"], np.zeros((n,) + spec.image_shape, np.uint8))
    np.save(paths[f"{split}_y"], np.arange(n) % 10)
  cached = tfds_data.load_arrays("mnist", cache_dir=str(tmp_path / "cache"))  # the cache is good
  assert cached["train_x"].shape[0] == spec.num_train
  missing = tmp_path / "no" / "such" / "dir"
  r = _run(["--dataset=mnist", f"--data_dir={missing}", "--rounds=1",
            f"--output_dir={tmp_path / 'o'}"], tmp_path, env={"FEDJAX_BENCH_OFFLINE": "1"})
  assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
  lines = [l for l in r.stderr.splitlines() if l.strip()]
  assert lines == [f"error: --data_dir={missing} is not a directory; give an existing TFDS "
                   "data dir, or leave it out to use $TFDS_DATA_DIR, then TFDS's default"]


def test_default_job_writes_the_results_contract(tmp_path):
  out = tmp_path / "run"
  r = _run([f"--output_dir={out}", "--rounds=6", "--eval_every=3", "--seeds=2",
            "--final_window=3"], tmp_path)
  assert r.returncode == 0, r.stderr
  progress = [l for l in r.stdout.splitlines() if l.startswith("round ")]
  assert len(progress) == 2 and "rounds/s" in progress[0] and "ETA" in progress[0]
  from fedjax_bench.output.console import rate
  assert rate(12.34) == "12.3 rounds/s" and rate(0.25) == "4.0 s/round"
  assert {p.name for p in out.iterdir()} >= {"config.json", "metrics.csv", "summary.json",
                                             "curves.png", "partition.json"}
  summary = json.loads((out / "summary.json").read_text())
  for metric in ("test_accuracy", "test_loss", "train_loss", "client_loss"):
    final = summary["final"][metric]
    assert set(final) == {"mean", "std", "per_seed"} and len(final["per_seed"]) == 2
  assert summary["config"]["flags"]["algo"] == "fedavg"
  assert summary["config"]["seeds"] == [0, 1]
  assert all(summary[k] > 0 for k in ("rounds_per_second", "wall_seconds", "compile_seconds"))
  rows = list(csv.DictReader((out / "metrics.csv").open()))
  assert len(rows) == 3 * 2 and rows[0]["round"] == "0" and rows[-1]["seed"] == "1"
  # final_window=3 averages the evaluations at rounds 3 and 6 (round > 6 - 3 excludes 3).
  last = [float(r["test_accuracy"]) for r in rows if r["round"] == "6"]
  assert summary["final"]["test_accuracy"]["per_seed"] == pytest.approx(last)
  partition = json.loads((out / "partition.json").read_text())
  assert len(partition["client_sizes"]) == 100 and len(partition["label_histograms"]) == 100


def test_the_default_job_converges_with_a_seed_band(tmp_path):
  """`python benchmarks/run.py` as a new user runs it: several seeds (a band in the plot),
  its last evaluation within 0.02 accuracy of its best, a minute at most on 2 cores."""
  t = time.perf_counter()
  r = _run([f"--output_dir={tmp_path / 'job'}"], tmp_path)
  assert r.returncode == 0, r.stderr[-2000:]
  assert time.perf_counter() - t < 60
  summary = json.loads((tmp_path / "job" / "summary.json").read_text())
  assert len(summary["config"]["seeds"]) >= 3
  rows = list(csv.DictReader((tmp_path / "job" / "metrics.csv").open()))
  by_round = {}
  for row in rows:
    by_round.setdefault(int(row["round"]), []).append(float(row["test_accuracy"]))
  means = [np.mean(v) for _, v in sorted(by_round.items())]
  assert means[-1] >= max(means) - 0.02 and means[-1] > 0.6, means


@pytest.mark.skipif(shared_tfds_dir() is None, reason="real MNIST (../shared/tfds) not found")
def test_fedavg_mlp_reaches_95_percent_on_real_mnist(tmp_path):
  out = tmp_path / "mnist"
  r = _run(["--dataset=mnist", "--model=mlp", "--partition=dirichlet", "--alpha=0.5",
            "--num_clients=100", "--clients_per_round=10", "--local_steps=20",
            "--client_lr=0.1", "--rounds=150", "--eval_every=50", "--seeds=1",
            f"--output_dir={out}"],
           tmp_path, env={"TFDS_DATA_DIR": str(shared_tfds_dir())})
  assert r.returncode == 0, r.stderr[-3000:]
  summary = json.loads((out / "summary.json").read_text())
  assert summary["final"]["test_accuracy"]["mean"] >= 0.95, r.stdout


def test_toyfl_flagfile_runs_and_paper_flagfile_fails_fast_without_svhn(tmp_path):
  cfg = REPO / "benchmarks" / "configs" / "fedawe"
  r = _run([f"--flagfile={cfg / 'toyfl_stress_sine.flags'}", "--algo=fedawe",
            "--rounds=4", "--eval_every=2", f"--output_dir={tmp_path / 'toy'}"], tmp_path)
  assert r.returncode == 0, r.stderr[-2000:]
  r = _run([f"--flagfile={cfg / 'paper_svhn_sine.flags'}",
            f"--flagfile={cfg / 'algo_fedawe.flags'}", f"--data_dir={tmp_path}",
            f"--output_dir={tmp_path / 'svhn'}"], tmp_path, env={"FEDJAX_BENCH_OFFLINE": "1"})
  assert r.returncode == 2 and "svhn" in r.stderr.lower(), r.stderr[-2000:]


def test_algorithm_chosen_optimizer_gets_the_server_flags():
  """--algo=fedams is AMSGrad with --server_opt left at sgd; the Table 1 flagfile's
  beta2 = 0.999 and eps = 1e-8 must still reach it (they once fell back to 0.99 / 1e-3)."""
  code = """
from fedjax_bench import cli
cli.parse_argv(['x', '--flagfile=benchmarks/configs/fedef/table1_mnist_ams.flags',
                '--algo=fedams'])
hp = cli.resolve_flags()[0].hparams
assert hp.optimizer_name() == 'amsgrad', hp
assert (hp.server_beta1, hp.server_beta2, hp.server_eps) == (0.9, 0.999, 1e-8), hp
print('ok')
"""
  r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                     timeout=120)
  assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]


@pytest.mark.parametrize("algo", ["area", "sfedavg"])
def test_async_algorithm_on_the_quadratic_uses_its_paper_defaults(algo, tmp_path):
  """--algo=area --dataset=quadratic needs no other flag: n = 50, the tuned stepsize, the
  event count from --sim_time, the optimality gap against the closed-form optimum."""
  r = _run([f"--algo={algo}", "--dataset=quadratic", "--sim_time=2",
            f"--output_dir={tmp_path / 'out'}"], tmp_path)
  assert r.returncode == 0, r.stderr[-2000:]
  assert "(50 clients" in r.stdout and "optimality_gap" in r.stdout, r.stdout
  config = json.load(open(tmp_path / "out" / "config.json"))["flags"]
  assert config["model"] == "linear" and config["sim_time"] == 2.0
  assert config["async_delta"] == (50 if algo == "sfedavg" else 4)
  with open(tmp_path / "out" / "metrics.csv") as f:
    rows = list(csv.DictReader(f))
  last = float(rows[-1]["cum_time"])  # the end of the last applied event or round
  assert last <= 2.0 and (algo == "sfedavg" or last > 1.9), last
  # The run covers the horizon: its last steps fell past it and were not applied.
  done = float(rows[-1]["cum_aggregations" if algo == "sfedavg" else "cum_messages"])
  assert done < config["rounds"], (done, config["rounds"])
  gap = [float(r["optimality_gap"]) for r in rows]
  assert gap[-1] < 0.5 * gap[0], gap


# --- loss-aware aggregation -------------------------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (["--algo=fedmax_k", "--fedmax_k=0"], "--fedmax_k must be positive"),
    (["--algo=fedmax_k", "--fedmax_k=11", "--num_clients=10", "--participation=full"],
     "--fedmax_k=11 must be between 1 and --num_clients=10"),
    (["--algo=fedsoftmax", "--softmax_beta=-1"], "--softmax_beta must be >= 0"),
    (["--algo=fedsoftmax", "--softmax_beta=2", "--softmax_temperature=5"],
     "give --softmax_beta or --softmax_temperature, not both"),
    (["--algo=fedmax", "--alpha_floor=1.5"], "--alpha_floor must be in [0, 1]"),
])
def test_hetero_agg_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
  r = _run([*args, f"--output_dir={tmp_path / 'out'}", "--rounds=1"], tmp_path)
  assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
  lines = [l for l in r.stderr.splitlines() if l.strip()]
  assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], r.stderr


def test_fedsoftmax_records_alpha_and_skew(tmp_path):
  out = tmp_path / "soft"
  r = _run(["--algo=fedsoftmax", "--num_clients=6", "--participation=full", "--rounds=2",
            "--eval_every=1", "--local_epochs=1", "--record_alpha", "--seeds=2",
            f"--output_dir={out}"], tmp_path)
  assert r.returncode == 0, r.stderr[-2000:]
  rows = list(csv.DictReader((out / "metrics.csv").open()))
  last = [row for row in rows if row["round"] == "2"]
  for row in last:
    alpha = [float(row[f"alpha_{i:04d}"]) for i in range(6)]
    assert abs(sum(alpha) - 1) < 1e-5 and min(alpha) > 0
    assert float(row["rho"]) >= 1 - 1e-5 and float(row["alpha_p_l1"]) > 0


def test_sweep_runs_a_product_grid_in_one_program_equal_to_separate_runs(tmp_path):
  common = ["--rounds=3", "--eval_every=3", "--num_clients=8", "--clients_per_round=4",
            "--seeds=1"]
  r = _run([*common, "--sweep=client_lr:0.05,0.2", "--sweep=server_lr:1,0.5",
            f"--output_dir={tmp_path / 'grid'}"], tmp_path)
  assert r.returncode == 0, r.stderr[-2000:]
  assert "4 grid points x 1 seed = 4 runs" in r.stdout
  with open(tmp_path / "grid" / "summary.json") as f:
    final = json.load(f)["final"]["train_loss"]
  assert [p["hparams"] for p in final] == [
      {"client_lr": a, "server_lr": b} for a in (0.05, 0.2) for b in (1.0, 0.5)]
  one = _run([*common, "--client_lr=0.2", "--server_lr=0.5", f"--output_dir={tmp_path / 'one'}"],
             tmp_path)
  assert one.returncode == 0, one.stderr[-2000:]
  with open(tmp_path / "one" / "summary.json") as f:
    alone = json.load(f)["final"]["train_loss"]["mean"]
  assert final[3]["mean"] == pytest.approx(alone, rel=1e-5)
