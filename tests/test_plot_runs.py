"""benchmarks/plot_runs.py: seed means from metrics.csv, one curve per run."""

import importlib.util
import subprocess
import sys

from conftest import REPO


def _module():
  spec = importlib.util.spec_from_file_location("plot_runs", REPO / "benchmarks" / "plot_runs.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _write(run, rows):
  run.mkdir()
  lines = ["round,seed,test_accuracy,cum_uplink_bits"] + [",".join(map(str, r)) for r in rows]
  (run / "metrics.csv").write_text("\n".join(lines) + "\n")


def test_seed_mean_and_plot(tmp_path):
  _write(tmp_path / "a", [(0, 0, 0.1, ""), (0, 1, 0.3, ""), (5, 0, 0.5, 10), (5, 1, 0.7, 10)])
  _write(tmp_path / "b", [(0, 0, 0.2, ""), (5, 0, 0.4, 20)])
  rounds, acc = _module().seed_mean(str(tmp_path / "a"), "test_accuracy")
  assert rounds.tolist() == [0, 5] and acc.tolist() == [0.2, 0.6]
  out = tmp_path / "p.png"
  r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "plot_runs.py"),
                      f"--runs={tmp_path / 'a'},{tmp_path / 'b'}", "--labels=A,B",
                      f"--output={out}"], capture_output=True, text=True, timeout=120)
  assert r.returncode == 0, r.stderr[-2000:]
  assert out.stat().st_size > 1000
  r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "plot_runs.py"),
                      f"--runs={tmp_path / 'a'}", "--metric=nope", f"--output={out}"],
                     capture_output=True, text=True, timeout=120)
  assert r.returncode != 0 and "no column 'nope'" in r.stderr
