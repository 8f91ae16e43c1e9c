"""Results are never lost or overwritten: output directories of other configurations and of
live runs are refused, interrupts and failed writes end in one line with the last checkpoint
kept, and a resume must match the data and the device layout it continues (issue 37)."""

import fcntl
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO
import fedjax_bench
from fedjax_bench import api
from fedjax_bench.engine import checkpoint, run_dir
from fedjax_bench.output import results
from fedjax_bench.errors import UsageError

RUN = str(REPO / "benchmarks" / "run.py")
TINY = dict(algo="fedavg", dataset="synthetic", num_clients=8, clients_per_round=2,
            rounds=2, eval_every=1, seeds=[0], progress=False, host_devices=1)
TINY_FLAGS = ["--dataset=synthetic", "--num_clients=8", "--clients_per_round=2",
              "--eval_every=1", "--seeds=1", "--host_devices=1"]


def _env(cache):
  env = dict(os.environ, FEDJAX_BENCH_CACHE=str(cache))
  env.pop("XLA_FLAGS", None)
  return env


def _cli(args, cwd, cache, timeout=300):
  return subprocess.run([sys.executable, RUN, *args], capture_output=True, text=True,
                        env=_env(cache), timeout=timeout, cwd=cwd)


def _one_line(stderr, message):
  lines = [l for l in stderr.splitlines() if l.strip()]
  assert len(lines) == 1 and "Traceback" not in stderr, stderr[-2000:]
  assert message in lines[0], lines[0]
  return lines[0]


def _interrupt_after_save(monkeypatch, at_round):
  """A KeyboardInterrupt right after the checkpoint of `at_round` is written (the CLI's
  metrics.csv is rewritten after every save)."""
  real = results.write_metrics_csv

  def write(path, history):
    real(path, history)
    if int(history.rounds[-1]) >= at_round:
      raise KeyboardInterrupt
  monkeypatch.setattr(results, "write_metrics_csv", write)


def _rewrite_meta(path, **changes):
  with np.load(path) as z:
    arrays = {k: z[k] for k in z.files}
  meta = json.loads(arrays["meta"].tobytes().decode())
  meta.update(changes)
  arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
  with open(path, "wb") as f:
    np.savez(f, **arrays)
  return meta


# 1. Another configuration's results, a finished run, a live run.

def test_another_configurations_results_are_refused_and_overwrite_replaces_them(tmp_path):
  out = str(tmp_path / "out")
  fedjax_bench.run(**TINY, output_dir=out)
  stamp = os.stat(os.path.join(out, "summary.json")).st_mtime_ns
  with pytest.raises(UsageError, match=r"holds the results of another configuration "
                     r"\(client_lr: 0.1 there, 0.3 now\).*--overwrite") as e:
    fedjax_bench.run(**TINY, output_dir=out, client_lr=0.3)
  assert "\n" not in str(e.value)
  assert os.stat(os.path.join(out, "summary.json")).st_mtime_ns == stamp
  r = fedjax_bench.run(**TINY, output_dir=out, client_lr=0.3, overwrite=True)
  assert results.read_summary(out)["config"]["flags"]["client_lr"] == 0.3
  assert r.history is not None


def test_the_same_finished_configuration_is_not_run_again(tmp_path, capsys):
  out = str(tmp_path / "out")
  fedjax_bench.run(**TINY, output_dir=out)
  stamp = os.stat(os.path.join(out, "summary.json")).st_mtime_ns
  r = fedjax_bench.run(**{**TINY, "progress": True}, output_dir=out)
  assert capsys.readouterr().out.strip() == (
      f"{out} already holds this run's results; nothing to do (--overwrite runs it again)")
  assert r.status == 0 and r.summary["config"]["fingerprint"] == run_dir.run_fingerprint(
      r.config, r.seeds, r.grid)
  assert os.stat(os.path.join(out, "summary.json")).st_mtime_ns == stamp


def test_a_directory_in_use_is_refused_at_once(tmp_path):
  out = tmp_path / "out"
  out.mkdir()
  fd = os.open(out / ".lock", os.O_RDWR | os.O_CREAT)
  try:
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a live run holds it
    with pytest.raises(UsageError, match=f"{out} is in use by another run"):
      fedjax_bench.run(**TINY, output_dir=str(out))
  finally:
    os.close(fd)
  assert sorted(os.listdir(out)) == [".lock"]


def test_two_runs_into_one_directory_on_the_command_line(tmp_path):
  """The default directory is refused for another configuration; a second run into a live
  run's directory fails at once, and the first one finishes."""
  cache = tmp_path / "cache"
  r = _cli([*TINY_FLAGS, "--rounds=2"], tmp_path, cache)
  assert r.returncode == 0, r.stderr[-2000:]
  default = tmp_path / "results" / "runs" / "fedavg_synthetic_logreg"
  r = _cli([*TINY_FLAGS, "--rounds=2", "--client_lr=0.3"], tmp_path, cache)
  assert r.returncode == 2
  _one_line(r.stderr, f"error: {os.path.join('results', 'runs', 'fedavg_synthetic_logreg')} "
            "holds the results of another configuration")
  assert json.loads((default / "summary.json").read_text())["config"]["flags"][
      "client_lr"] == 0.1

  out = tmp_path / "shared"
  first = subprocess.Popen([sys.executable, RUN, *TINY_FLAGS, "--rounds=100000",
                            "--eval_every=50", f"--output_dir={out}"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=_env(cache), cwd=tmp_path)
  try:
    for line in first.stdout:
      if line.startswith("round "):
        break
    second = _cli([*TINY_FLAGS, "--rounds=2", f"--output_dir={out}"], tmp_path, cache)
    assert second.returncode == 2
    _one_line(second.stderr, f"error: {out} is in use by another run")
    assert first.poll() is None  # undisturbed
  finally:
    first.send_signal(signal.SIGINT)
    first.communicate(timeout=120)  # drained: a full pipe would hold its last lines back


# 2. --resume cannot extend a finished run.

def test_resume_of_a_finished_run_with_more_rounds_says_why_not(tmp_path):
  out = str(tmp_path / "out")
  fedjax_bench.run(**TINY, output_dir=out)
  with pytest.raises(UsageError, match=r"finished run of --rounds=2 \(a finished run keeps no "
                     r"state to extend\): rerun with --rounds=3 and --overwrite"):
    fedjax_bench.run(**{**TINY, "rounds": 3}, output_dir=out, resume=True)
  with pytest.raises(UsageError, match=r"finished run of --rounds=2: rerun with --rounds=3 and "
                     r"--overwrite to replace it"):  # without --resume: not an extension
    fedjax_bench.run(**{**TINY, "rounds": 3}, output_dir=out)
  with pytest.raises(UsageError, match="contradict"):
    fedjax_bench.run(**TINY, output_dir=out, resume=True, overwrite=True)


# 3. The data a run was made from.

def _leaf_dir(path, scale):
  rng = np.random.default_rng(0)
  for split, n in (("train", 6), ("test", 3)):
    users = [f"u{i}" for i in range(4)]
    data = {u: {"x": (rng.uniform(0, 0.5, (n, 784)) * scale).round(4).tolist(),  # FEMNIST
                "y": rng.integers(0, 62, n).tolist()} for u in users}
    obj = {"users": users, "num_samples": [n] * 4, "user_data": data}
    (path / split).mkdir(parents=True)
    (path / split / f"all_data_0_{split}.json").write_text(json.dumps(obj))
  return str(path)


def test_a_resume_or_a_finished_run_on_other_data_is_refused(tmp_path, monkeypatch):
  a, b = _leaf_dir(tmp_path / "a", 1.0), _leaf_dir(tmp_path / "b", 2.0)  # same shapes
  leaf = {**TINY, "dataset": "leaf_json", "num_clients": 4, "rounds": 3}
  out = str(tmp_path / "out")
  _interrupt_after_save(monkeypatch, at_round=1)
  with pytest.raises(KeyboardInterrupt):
    fedjax_bench.run(**leaf, data_dir=a, output_dir=out)
  monkeypatch.undo()
  digest = json.load(open(os.path.join(out, "config.json")))["data_digest"]
  assert checkpoint.load(os.path.join(out, "checkpoint.npz"))[3]["data_digest"] == digest
  with pytest.raises(UsageError, match="was made from other data"):
    fedjax_bench.run(**leaf, data_dir=b, output_dir=out, resume=True)
  fedjax_bench.run(**leaf, data_dir=a, output_dir=out, resume=True)  # finishes it
  with pytest.raises(UsageError, match="holds the results of this configuration on other "
                     "data"):
    fedjax_bench.run(**leaf, data_dir=b, output_dir=out)


def test_the_data_digest_is_not_part_of_the_fingerprint(tmp_path):
  cfg, seeds, grid = api.prepare(**{k: v for k, v in TINY.items() if k != "progress"})
  assert "data_digest" not in run_dir.run_fingerprint(cfg, seeds, grid)
  assert "overwrite" not in run_dir.run_fingerprint(cfg, seeds, grid)


# 4. The device layout a checkpoint continues on.

def test_a_resume_on_another_device_layout_is_refused(tmp_path, monkeypatch):
  out = str(tmp_path / "out")
  _interrupt_after_save(monkeypatch, at_round=1)
  with pytest.raises(KeyboardInterrupt):
    fedjax_bench.run(**TINY, output_dir=out)
  monkeypatch.undo()
  path = os.path.join(out, "checkpoint.npz")
  meta = checkpoint.load(path)[3]
  n = meta["layout"]["devices"] + 1
  assert meta["layout"]["backend"] == "cpu" and n > 1
  _rewrite_meta(path, layout={**meta["layout"], "devices": n})
  with pytest.raises(UsageError, match=fr"written on {n} cpu device\(s\).*run with the same "
                     fr"--host_devices \(recorded: {n}\)") as e:
    fedjax_bench.run(**TINY, output_dir=out, resume=True)
  assert "\n" not in str(e.value)


# 5. Interrupts.

def _kill_after_first_round(args, cwd, cache, sig):
  p = subprocess.Popen([sys.executable, RUN, *args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, env=_env(cache), cwd=cwd)
  for line in p.stdout:
    if line.startswith("round ") and int(line.split()[1].split("/")[0]) > 0:
      p.send_signal(sig)
      break
  p.stdout.read()
  stderr = p.stderr.read()
  p.wait(timeout=120)
  return p.returncode, stderr


@pytest.mark.parametrize("sig,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupt_saves_and_says_how_to_continue(sig, status, tmp_path):
  cache = tmp_path / "cache"
  common = [*TINY_FLAGS, "--rounds=2000", "--eval_every=4", "--checkpoint_max_share=0.5"]
  whole, cut = tmp_path / "whole", tmp_path / "cut"
  code, stderr = _kill_after_first_round([*common, f"--output_dir={cut}"], tmp_path, cache,
                                         sig)
  assert code == status, stderr[-2000:]
  line = _one_line(stderr, "interrupted at round ")
  n = int(line.split("interrupted at round ")[1].split(";")[0])
  assert line == (f"interrupted at round {n}; rerun the same command with --resume to "
                  "continue")
  assert n > 0 and checkpoint.load(str(cut / "checkpoint.npz"))[2][-1] == n
  assert not [f for f in os.listdir(cut) if f.endswith(".tmp")]

  r = _cli([*common, "--resume", f"--output_dir={cut}"], tmp_path, cache)
  assert r.returncode == 0, r.stderr[-2000:]
  r = _cli([*common, f"--output_dir={whole}"], tmp_path, cache)
  assert r.returncode == 0, r.stderr[-2000:]
  assert (cut / "metrics.csv").read_text() == (whole / "metrics.csv").read_text()


# 6. A failed write mid-run.

_FULL_DISK = """
import errno, sys
import numpy as np
from fedjax_bench import cli
real, calls = np.savez, []
def savez(*args, **kw):
  calls.append(1)
  if len(calls) >= 2:
    raise OSError(errno.ENOSPC, "No space left on device")
  real(*args, **kw)
np.savez = savez
sys.exit(cli.main(cli.parse_argv(sys.argv)))
"""


def test_a_full_disk_mid_run_is_one_line_and_exit_1(tmp_path):
  out = tmp_path / "out"
  r = subprocess.run([sys.executable, "-c", _FULL_DISK, *TINY_FLAGS, "--rounds=4",
                      "--checkpoint_max_share=0", f"--output_dir={out}"], capture_output=True,
                     text=True, env=_env(tmp_path / "cache"), cwd=REPO, timeout=300)
  assert r.returncode == 1, r.stderr[-2000:]
  _one_line(r.stderr, f"error: could not write {out / 'checkpoint.npz'}: No space left on "
            "device; the last checkpoint (round 1) is intact")
  assert checkpoint.load(str(out / "checkpoint.npz"))[2][-1] == 1
  assert not [f for f in os.listdir(out) if f.endswith(".tmp")]


# 7. Stale temporary files.

def test_stale_temporaries_are_removed_when_a_run_starts(tmp_path):
  out, cache = tmp_path / "out", tmp_path / "cache"
  (cache / "mnist-3.0.1").mkdir(parents=True)
  dead = cache / "mnist-3.0.1" / ".train_x.npy.999999999.tmp"   # no such process
  live = cache / "mnist-3.0.1" / f".train_x.npy.{os.getpid()}.tmp"
  out.mkdir()
  stale = [out / ".checkpoint.npz.k2j_x9qa.tmp", out / ".summary.json.abcdefgh.tmp"]
  for p in [dead, live, *stale]:
    p.write_bytes(b"x" * 100)
  (out / ".tensorboard.abcd1234").mkdir()
  (out / "notes.tmp").write_text("mine")  # not of our naming
  fedjax_bench.run(**TINY, output_dir=str(out), cache_dir=str(cache))
  assert not dead.exists() and live.exists()
  assert not any(p.exists() for p in stale) and not (out / ".tensorboard.abcd1234").exists()
  assert (out / "notes.tmp").read_text() == "mine"


# 8-10. Nothing created before the checks; names; the writability probe.

def test_a_refused_run_creates_no_directory(tmp_path):
  deep = tmp_path / "new" / "deep"
  with pytest.raises(UsageError, match="is not a directory"):  # found when data loads
    fedjax_bench.run(**{**TINY, "dataset": "leaf_json", "num_clients": 4},
                     data_dir=str(tmp_path / "nowhere"), output_dir=str(deep))
  assert not (tmp_path / "new").exists()


def test_a_bad_flag_on_the_command_line_creates_no_directory(tmp_path):
  r = _cli([*TINY_FLAGS, "--dataset=leaf_json", "--num_clients=4", "--data_dir=nowhere",
            "--rounds=2", "--output_dir=tmp/new/deep"], tmp_path, tmp_path / "cache")
  assert r.returncode == 2
  _one_line(r.stderr, "--data_dir=nowhere is not a directory")
  assert not (tmp_path / "tmp").exists()


@pytest.mark.parametrize("name", ["../../x", "/abs", "a/b", ".."])
def test_a_name_with_a_path_is_refused(name, tmp_path):
  with pytest.raises(UsageError, match="--name") as e:
    api.prepare(name=name)
  assert "\n" not in str(e.value)


def test_the_writability_probe_follows_no_symlink(tmp_path):
  out = tmp_path / "out"
  out.mkdir()
  target = tmp_path / "precious.txt"
  target.write_text("keep me")
  os.symlink(target, out / ".write_probe")
  fedjax_bench.run(**TINY, output_dir=str(out))
  assert target.read_text() == "keep me"


# 11. Damaged files under --resume.

def test_a_damaged_summary_is_one_line(tmp_path):
  out = tmp_path / "out"
  out.mkdir()
  (out / "summary.json").write_text('{"config": ')
  for kw in ({"resume": True}, {}):
    with pytest.raises(UsageError, match=f"{out / 'summary.json'} is damaged .*delete it or "
                       "use --overwrite") as e:
      fedjax_bench.run(**TINY, output_dir=str(out), **kw)
    assert "\n" not in str(e.value)
  fedjax_bench.run(**TINY, output_dir=str(out), overwrite=True)
  assert results.read_summary(str(out))["final"]


def test_damaged_checkpoint_metadata_is_one_line(tmp_path, monkeypatch):
  out = str(tmp_path / "out")
  _interrupt_after_save(monkeypatch, at_round=1)
  with pytest.raises(KeyboardInterrupt):
    fedjax_bench.run(**{**TINY, "seeds": [0, 1]}, output_dir=out)
  monkeypatch.undo()
  path = os.path.join(out, "checkpoint.npz")
  _rewrite_meta(path, diverged=[0])  # two runs
  with pytest.raises(UsageError, match=r"checkpoint.npz is corrupt .*delete it or use "
                     "--overwrite"):
    fedjax_bench.run(**{**TINY, "seeds": [0, 1]}, output_dir=out, resume=True)
  _rewrite_meta(path, diverged=[0, 0], eval_rounds="x")
  with pytest.raises(UsageError, match="checkpoint.npz is corrupt"):
    fedjax_bench.run(**{**TINY, "seeds": [0, 1]}, output_dir=out, resume=True)


# 12. TensorBoard while the run goes.

def test_tensorboard_events_are_written_at_each_evaluation(tmp_path, monkeypatch):
  from tests.output.test_tensorboard import _read_runs
  out = tmp_path / "out"
  seen = {}
  real = results.write_metrics_csv

  def write(path, history):  # after each evaluation's save, the run still going
    real(path, history)
    runs = _read_runs(out / "tensorboard")
    seen[int(history.rounds[-1])] = sorted({step for tag, step, _ in runs["seed_0"]
                                            if tag == "test_accuracy"})
  monkeypatch.setattr(results, "write_metrics_csv", write)
  fedjax_bench.run(**{**TINY, "rounds": 3}, output_dir=str(out), tensorboard=True,
                   checkpoint_max_share=0)
  assert seen == {1: [0, 1], 2: [0, 1, 2], 3: [0, 1, 2, 3]}
  assert sorted(_read_runs(out / "tensorboard")) == ["seed_0"]
