"""Reliability: checkpoints and resume after SIGKILL, divergence of some runs, bad input."""

import json
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO, shared_tfds_dir

RUN = str(REPO / "benchmarks" / "run.py")
# Long enough (about 20 rounds a second here) that a kill lands inside a block.
LONG = ["--rounds=240", "--eval_every=20", "--seeds=2", "--num_clients=30",
        "--clients_per_round=6"]


def _env(tmp_path, **extra):
  env = dict(os.environ, FEDJAX_BENCH_CACHE=str(tmp_path / "cache"), **extra)
  env.pop("XLA_FLAGS", None)
  return env


def _run(args, tmp_path, **env):
  return subprocess.run([sys.executable, RUN, *args], capture_output=True, text=True,
                        env=_env(tmp_path, **env), timeout=600, cwd=tmp_path)


def _one_line_error(r, message):
  lines = [l for l in r.stderr.splitlines() if l.strip()]
  assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr[-2000:]
  assert message in lines[0], lines[0]
  assert "Traceback" not in r.stderr


def _kill_after(args, tmp_path, round_seen: int) -> str:
  """Starts a run, SIGKILLs it once it has printed progress for `round_seen`; its stdout."""
  p = subprocess.Popen([sys.executable, RUN, *args], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True, env=_env(tmp_path), cwd=tmp_path)
  seen = []
  for line in p.stdout:
    seen.append(line)
    if line.startswith("round ") and int(line.split()[1].split("/")[0]) >= round_seen:
      p.send_signal(signal.SIGKILL)
      break
  p.wait(timeout=60)
  assert p.returncode == -signal.SIGKILL, "".join(seen)
  return "".join(seen)


def test_sigkill_mid_block_then_resume_equals_an_uninterrupted_run(tmp_path):
  whole, cut = tmp_path / "whole", tmp_path / "cut"
  r = _run([*LONG, f"--output_dir={whole}"], tmp_path)
  assert r.returncode == 0, r.stderr[-2000:]
  assert not (whole / "checkpoint.npz").exists()  # removed once the results are written

  # Every due save written (no time budget), so the kill loses at most its block.
  _kill_after([*LONG, "--checkpoint_max_share=0", f"--output_dir={cut}"], tmp_path,
              round_seen=60)
  assert (cut / "checkpoint.npz").exists() and not (cut / "summary.json").exists()
  partial = (cut / "metrics.csv").read_text().splitlines()  # curves so far, kept
  assert len(partial) >= 1 + 2 * 4 and partial[1:] == (whole / "metrics.csv").read_text(
  ).splitlines()[1:len(partial)]

  r = _run([*LONG, f"--output_dir={cut}"], tmp_path)  # no --resume: refused, nothing lost
  assert r.returncode == 2
  _one_line_error(r, "holds the checkpoint of an unfinished run; add --resume")
  assert (cut / "checkpoint.npz").exists()

  r = _run([*LONG, "--client_lr=0.2", "--resume", f"--output_dir={cut}"], tmp_path)
  assert r.returncode == 2
  _one_line_error(r, "was written by another configuration (client_lr: 0.1 there, 0.2 now")

  r = _run([*LONG, "--resume", f"--output_dir={cut}"], tmp_path)
  assert r.returncode == 0, r.stderr[-2000:]
  assert "resuming from" in r.stdout
  first = int(r.stdout.split("round ")[1].split("/")[0])
  assert first > 60, r.stdout  # it went on from the checkpoint, not from round 0
  # Bit-identical: every metric of every evaluation and seed, as written (9 digits).
  assert (cut / "metrics.csv").read_text() == (whole / "metrics.csv").read_text()
  a = json.loads((whole / "summary.json").read_text())["final"]
  b = json.loads((cut / "summary.json").read_text())["final"]
  assert a == b
  assert not (cut / "checkpoint.npz").exists()

  stamp = (cut / "summary.json").stat().st_mtime_ns
  r = _run([*LONG, "--resume", f"--output_dir={cut}"], tmp_path)  # a finished run: skipped
  assert r.returncode == 0 and "nothing to do" in r.stdout, r.stderr[-2000:]
  assert (cut / "summary.json").stat().st_mtime_ns == stamp


def test_resume_can_extend_a_run_and_equals_the_longer_run(tmp_path):
  extended, direct = tmp_path / "e", tmp_path / "d"
  common = ["--eval_every=3", "--num_clients=12", "--clients_per_round=4"]
  # A run that reached its --rounds keeps no checkpoint; one killed on the way does.
  _kill_after([*common, "--rounds=3000", f"--output_dir={extended}"], tmp_path, round_seen=6)
  r = _run([*common, "--rounds=60", "--resume", f"--output_dir={extended}"], tmp_path)
  assert r.returncode == 0, r.stderr[-2000:]
  r = _run([*common, "--rounds=60", f"--output_dir={direct}"], tmp_path)
  assert r.returncode == 0, r.stderr[-2000:]
  assert (extended / "metrics.csv").read_text() == (direct / "metrics.csv").read_text()


def test_corrupt_checkpoint_is_one_line_and_kept(tmp_path):
  out = tmp_path / "out"
  out.mkdir()
  (out / "checkpoint.npz").write_bytes(b"PK\x03\x04 not really a zip file")
  r = _run(["--rounds=4", "--resume", f"--output_dir={out}"], tmp_path)
  assert r.returncode == 2
  _one_line_error(r, "checkpoint.npz is corrupt")
  assert (out / "checkpoint.npz").read_bytes().startswith(b"PK\x03\x04 not")


def test_a_diverging_grid_point_stops_and_the_others_go_on(tmp_path):
  out = tmp_path / "div"
  # 3e38: the parameters overflow in round 1 (seen on the device, every round); 1e36: they
  # stay finite but the losses are infinite at the evaluation of round 2 (seen on the host).
  r = _run(["--rounds=8", "--eval_every=2", "--seeds=2", "--num_clients=12",
            "--clients_per_round=4", "--sweep=client_lr:0.05,1e36,3e38", f"--output_dir={out}"],
           tmp_path)
  assert r.returncode == 1, r.stderr[-2000:]
  _one_line_error(r, "4 of 6 runs diverged (non-finite parameters or loss): client_lr=1e+36 "
                  "seed 0 at round 2, client_lr=1e+36 seed 1 at round 2, client_lr=3e+38 seed 0 "
                  "at round 1, client_lr=3e+38 seed 1 at round 1; the others ran to the end")
  summary = json.loads((out / "summary.json").read_text())
  assert summary["diverged"] == [{"hparams": {"client_lr": lr}, "seed": s, "round": t}
                                 for lr, t in ((1e36, 2), (3e38, 1)) for s in (0, 1)]
  good, bad, worse = summary["final"]["train_loss"]
  assert all(np.isfinite(good["per_seed"])) and bad["per_seed"] == worse["per_seed"] == [
      None, None]
  import csv
  rows = list(csv.DictReader((out / "metrics.csv").open()))
  assert max(int(r["round"]) for r in rows) == 8  # the good runs went on to the end
  for lr in (1e36, 3e38):
    diverged = [r for r in rows if float(r["client_lr"]) == lr]
    assert all(r["train_loss"] != "nan" for r in diverged if r["round"] == "0")
    assert all(r["train_loss"] == "nan" for r in diverged if r["round"] != "0")


def test_every_run_diverging_ends_the_loop_early(tmp_path):
  out = tmp_path / "all"
  r = _run(["--rounds=400", "--eval_every=2", "--client_lr=3e38", "--seeds=1",
            f"--output_dir={out}"], tmp_path)
  assert r.returncode == 1
  _one_line_error(r, "1 of 1 runs diverged (non-finite parameters or loss): seed 0 at round 1; "
                  "results up to the divergence were written")
  rounds = {int(l.split(",")[0]) for l in (out / "metrics.csv").read_text().splitlines()[1:]}
  assert rounds == {0, 2}


@pytest.mark.parametrize("args,message", [
    (["--dataset=toyfl", "--num_clients=30000"],
     "cannot split 20000 examples over 30000 clients: more clients than examples"),
    (["--algo=fedavg", "--fedau_k=3"], "--fedau_k has no effect on --algo=fedavg"),
    (["--algo=fedavg", "--server_beta1=0.5"], "--server_beta1 has no effect on --algo=fedavg"),
    (["--algo=area", "--dataset=quadratic", "--lr_decay_per_round=0.9"],
     "--lr_decay_per_round has no effect on --algo=area"),
    (["--algo=fedavg", "--compressor=topk", "--compress_k=0.1"],
     "--compress_k, --compressor have no effect on --algo=fedavg"),
    (["--algo=fedams", "--server_momentum=0.5"], "--server_momentum has no effect"),
    (["--server_opt=adagrad", "--server_beta2=0.9"],
     "--server_beta2 has no effect on --algo=fedavg"),
    (["--checkpoint_every=-1"], "--checkpoint_every must be >= 0"),
])
def test_more_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
  out = tmp_path / "out"
  out.mkdir()
  (out / "keep.txt").write_text("earlier work")
  r = _run([*args, "--rounds=2", f"--output_dir={out}"], tmp_path)
  assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
  _one_line_error(r, message)
  assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]  # nothing written or lost


@pytest.mark.parametrize("args", [
    ["--algo=fedavg", "--server_opt=adam", "--server_beta1=0.5"],
    ["--algo=fedavg", "--server_opt=adagrad", "--server_beta1=0.5", "--server_eps=0.01"],
    ["--algo=fedsgd", "--compressor=topk", "--compress_k=0.1", "--server_lr=0.5"],
    ["--algo=fedams", "--server_beta2=0.999"],
])
def test_flags_the_algorithm_reads_are_accepted(args, tmp_path):
  r = _run([*args, "--rounds=1", f"--output_dir={tmp_path / 'out'}"], tmp_path)
  assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.skipif(shared_tfds_dir() is None, reason="real MNIST (../shared/tfds) not found")
def test_corrupt_data_cache_without_a_source_is_one_line(tmp_path):
  """A corrupt cache is removed and rebuilt from TFDS (tests/data/test_data.py); with no TFDS
  data to rebuild from, the run stops with one line that says so."""
  cache = tmp_path / "cache"
  r = _run(["--dataset=mnist", "--rounds=1", f"--output_dir={tmp_path / 'a'}"], tmp_path,
           TFDS_DATA_DIR=str(shared_tfds_dir()))
  assert r.returncode == 0, r.stderr[-2000:]
  (victim,) = [p for p in cache.rglob("train_x.npy")]
  victim.write_bytes(victim.read_bytes()[:1000])
  r = _run(["--dataset=mnist", "--rounds=1", f"--output_dir={tmp_path / 'b'}"], tmp_path,
           TFDS_DATA_DIR=str(tmp_path / "empty"), FEDJAX_BENCH_OFFLINE="1")
  assert r.returncode == 2
  _one_line_error(r, "a corrupt cache there was removed")
  shutil.rmtree(cache)
