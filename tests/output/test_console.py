"""fedjax_bench.output.console: the progress line and the final lines of a run, on constructed
progress and summaries (no training)."""

import numpy as np

from fedjax_bench import engine
from fedjax_bench.output import console, results


def _progress(metrics, grid=None):
  return engine.Progress(round=40, rounds=100, metrics=metrics, rounds_per_second=12.34,
                         eta_seconds=5.0, **({"grid": grid} if grid else {}))


def test_without_a_grid_the_line_shows_the_seed_means():
  line = console.progress_line(_progress({"test_accuracy": np.array([0.96141]),
                                          "train_loss": np.array([0.1234]),
                                          "client_loss": np.array([0.2])}))
  assert line == ("round     40/100 | test_accuracy 0.9614 train_loss 0.1234 | "
                  "12.3 rounds/s | ETA 0:00:05")


def test_with_a_grid_the_line_shows_the_best_point_and_the_range_not_the_mean():
  grid = [{"client_lr": 0.01}, {"client_lr": 0.1}]
  line = console.progress_line(_progress({"test_accuracy": np.array([0.9499, 0.9729]),
                                          "train_loss": np.array([0.2, 0.1])}, grid))
  assert line == ("round     40/100 | test_accuracy best 0.9729 (client_lr=0.1), range "
                  "0.9499..0.9729 over 2 points | 12.3 rounds/s | ETA 0:00:05")
  assert "0.9614" not in line


def test_a_loss_ranks_lowest_first_and_points_without_a_value_are_counted():
  grid = [{"lr": 0.1, "m": 0.9}, {"lr": 1.0, "m": 0.9}, {"lr": 10.0, "m": 0.9}]
  line = console.progress_line(_progress({"test_accuracy": np.full(3, np.nan),
                                          "optimality_gap": np.array([3e-3, 1e-3, np.nan])},
                                         grid))
  assert "| optimality_gap best 0.001 (lr=1 m=0.9), range 0.001..0.003 over 2 of 3 points |" \
      in line
  line = console.progress_line(_progress({"test_accuracy": np.full(3, np.nan)}, grid))
  assert "| test_accuracy nan at all 3 points |" in line


def test_progress_holds_each_grid_points_seed_mean():
  # The engine's run axis is grid-major: each point's seeds are adjacent.
  runs = np.array(engine._grid_arrays([{"a": 1.0}, {"a": 2.0}], 3)["a"])
  runs[4] = np.nan  # a diverged run is skipped
  np.testing.assert_array_equal(engine._point_means(runs, 2), [1.0, 2.0])
  np.testing.assert_array_equal(engine._point_means([np.nan, np.nan, 5.0, 7.0], 2),
                                [np.nan, 6.0])


def _summary(grid, metrics):
  """summary.json of 2 seeds at one evaluation; metrics: {name: [G] values}."""
  history = results.History(
      rounds=[10], seeds=[0, 1], grid=grid,
      metrics={k: np.repeat(np.asarray(v, float)[None, :, None], 2, axis=2)
               for k, v in metrics.items()})
  return results.make_summary({}, history, None, {})


TIMING = {"rounds_per_second": 2.0, "compile_seconds": 1.25}


def test_final_lines_name_the_best_point():
  grid = [{"client_lr": 0.01}, {"client_lr": 0.1}, {"client_lr": 1.0}]
  summary = _summary(grid, {"test_accuracy": [0.9, 0.95, 0.1], "train_loss": [0.3, 0.2, 9.0]})
  assert console.final_lines(summary, grid, TIMING, "out") == [
      "client_lr=0.01: test_accuracy 0.9000 ± 0.0000, train_loss 0.3000 ± 0.0000",
      "client_lr=0.1: test_accuracy 0.9500 ± 0.0000, train_loss 0.2000 ± 0.0000",
      "client_lr=1: test_accuracy 0.1000 ± 0.0000, train_loss 9.0000 ± 0.0000",
      "best point (highest final test_accuracy): client_lr=0.1",
      "done: 2.0 rounds/s, compile 1.2s; results in out"]


def test_final_lines_rank_by_the_gap_without_an_accuracy():
  grid = [{"lr": 0.5}, {"lr": 1.0}]
  summary = _summary(grid, {"test_accuracy": [np.nan, np.nan], "train_loss": [0.3, 0.2],
                            "optimality_gap": [1e-3, 2e-3]})
  lines = console.final_lines(summary, grid, TIMING)
  assert lines[0] == "lr=0.5: test_accuracy nan, train_loss 0.3000 ± 0.0000, " \
      "optimality_gap 1.000e-03 ± 0.000e+00"
  assert lines[2] == "best point (lowest final optimality_gap): lr=0.5"
  every_nan = _summary(grid, {"test_accuracy": [np.nan] * 2, "train_loss": [np.nan] * 2})
  assert console.final_lines(every_nan, grid, TIMING)[2] == \
      "best point: none (no point has a finite final value)"


def test_final_lines_without_a_grid_name_no_point():
  summary = _summary([{}], {"test_accuracy": [0.7], "train_loss": [0.4]})
  assert console.final_lines(summary, [], TIMING) == [
      "test_accuracy 0.7000 ± 0.0000, train_loss 0.4000 ± 0.0000",
      "done: 2.0 rounds/s, compile 1.2s"]


def test_divergence_is_one_line_naming_the_runs(capsys):
  bad = [{"hparams": {"client_lr": 10.0}, "seed": s, "round": 3} for s in range(5)]
  console.report_divergence(bad, 6, None)
  err = capsys.readouterr().err
  assert err == ("error: 5 of 6 runs diverged (non-finite parameters or loss): client_lr=10 "
                 "seed 0 at round 3, client_lr=10 seed 1 at round 3, client_lr=10 seed 2 at "
                 "round 3, client_lr=10 seed 3 at round 3, ...; the others ran to the end; "
                 "results up to the divergence are in the result\n")
