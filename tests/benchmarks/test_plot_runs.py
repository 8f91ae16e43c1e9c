"""benchmarks/tools/plot_runs.py: seed means from metrics.csv, one curve per run or grid point."""

import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO
from fedjax_bench.output import results


PLOT_RUNS = [sys.executable, "-m", "benchmarks.tools.plot_runs"]


def _module():
  from benchmarks.tools import plot_runs  # at first use: it defines absl flags
  return plot_runs


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
  r = subprocess.run([*PLOT_RUNS,
                      f"--runs={tmp_path / 'a'},{tmp_path / 'b'}", "--labels=A,B",
                      f"--output={out}"], capture_output=True, text=True, timeout=120, cwd=REPO)
  assert r.returncode == 0, r.stderr[-2000:]
  assert out.stat().st_size > 1000
  r = subprocess.run([*PLOT_RUNS,
                      f"--runs={tmp_path / 'a'}", "--metric=nope", f"--output={out}"],
                     capture_output=True, text=True, timeout=120, cwd=REPO)
  assert r.returncode != 0 and "no column 'nope'" in r.stderr


GRID = [{"client_lr": 0.01}, {"client_lr": 0.1}]


def _sweep(run):
  """A sweep's directory written by results' own writers: 2 grid points x 2 seeds, 2
  evaluations; point g, seed s has test_accuracy 0.5 + 0.4 * g + 0.1 * s at round 10."""
  acc = np.zeros((2, 2, 2))
  for g in range(2):
    for s in range(2):
      acc[:, g, s] = [0.1, 0.5 + 0.4 * g + 0.1 * s]
  history = results.History(rounds=[0, 10], metrics={"test_accuracy": acc,
                                                     "train_loss": 1 - acc},
                             seeds=[0, 1], grid=GRID)
  results.write_run(run, config={"name": "sweep", "grid": GRID}, history=history,
                    final_window=None, timing={})
  return run


def test_a_sweep_gives_one_curve_per_grid_point_not_their_mean(tmp_path):
  run = str(_sweep(tmp_path / "sweep"))
  curves = _module().seed_curves(run, "test_accuracy")
  assert [c[0] for c in curves] == GRID
  np.testing.assert_allclose([c[2] for c in curves], [[0.1, 0.55], [0.1, 0.95]])
  assert [c[3][-1] for c in curves] == pytest.approx([0.05, 0.05])  # seed std, the band
  fig = _module().figure([run], ["sweep"], "test_accuracy")
  ax = fig.axes[0]
  assert [line.get_label() for line in ax.get_lines()] == ["client_lr=0.01", "client_lr=0.1"]
  assert [line.get_ydata()[-1] for line in ax.get_lines()] == pytest.approx([0.55, 0.95])
  assert len(ax.collections) == 2  # a band per point
  fig = _module().figure([run, run], ["A", "B"], "test_accuracy")
  assert [line.get_label() for line in fig.axes[0].get_lines()][1:3] == [
      "A: client_lr=0.1", "B: client_lr=0.01"]


def test_a_sweep_read_from_its_summary_and_refused_when_its_grid_is_unknown(tmp_path):
  run = _sweep(tmp_path / "sweep")
  (run / "config.json").unlink()
  assert [c[0] for c in _module().seed_curves(str(run), "test_accuracy")] == GRID
  with pytest.raises(SystemExit, match="sweep of 2 grid points"):
    _module().seed_mean(str(run), "test_accuracy")
  (run / "summary.json").unlink()
  with pytest.raises(SystemExit, match="several rows per round and seed") as info:
    _module().seed_curves(str(run), "test_accuracy")
  assert "\n" not in str(info.value)
  out = tmp_path / "p.png"
  r = subprocess.run([*PLOT_RUNS,
                      f"--runs={run}", f"--output={out}"],
                     capture_output=True, text=True, timeout=120, cwd=REPO)
  assert r.returncode != 0 and "several rows per round and seed" in r.stderr
  assert not out.exists()
