"""One plot of several runs' seed-mean curves, read from their metrics.csv.

  python -m benchmarks.tools.plot_runs --runs=DIR1,DIR2 --labels=A,B --metric=test_accuracy \
      [--x=round|cum_uplink_bits] --output=FILE.png [--title=...]

A sweep's directory (its config.json or summary.json names the grid) gives one curve per
grid point, each the mean over that point's seeds with a ±1 std band; grid points are
never averaged together.
"""

import csv
import json
import os
import sys

from absl import app, flags
import numpy as np

from fedjax_bench.output import results

flags.DEFINE_list("runs", None, "Run directories (each with metrics.csv).", required=True)
flags.DEFINE_list("labels", None, "Legend labels, one per run (default: directory names).")
flags.DEFINE_string("metric", "test_accuracy", "Metric on the y axis.")
flags.DEFINE_string("x", "round", "round, or a cumulative metric such as cum_uplink_bits.")
flags.DEFINE_string("output", None, "PNG to write.", required=True)
flags.DEFINE_string("title", "", "Plot title.")
FLAGS = flags.FLAGS


def read_grid(path: str) -> list[dict]:
  """The run's grid points from its config.json (written when it starts) or summary.json;
  [{}] without a grid."""
  for name, key in ((results.CONFIG_FILE, ()), (results.SUMMARY_FILE, ("config",))):
    try:
      with open(os.path.join(path, name)) as f:
        config = json.load(f)
    except (OSError, ValueError):
      continue
    for k in key:
      config = config.get(k, {}) if isinstance(config, dict) else {}
    if isinstance(config, dict) and "grid" in config:
      return [dict(p) for p in config["grid"]] or [{}]
  return [{}]


def _same(cell: str, value) -> bool:
  # metrics.csv writes floats with 9 significant digits (results.metrics_csv_text).
  try:
    return "%.9g" % float(cell) == "%.9g" % float(value)
  except (TypeError, ValueError):
    return False


def seed_curves(path: str, column: str) -> list[tuple[dict, np.ndarray, np.ndarray, np.ndarray]]:
  """[(grid point, rounds, mean over seeds, std over seeds)] of `column` in a run's
  metrics.csv, one per grid point ({} without a grid); NaN values are skipped."""
  with open(os.path.join(path, results.METRICS_FILE)) as f:
    rows = list(csv.DictReader(f))
  if not rows or column not in rows[0]:
    raise SystemExit(f"error: {path}/metrics.csv has no column {column!r}")
  grid = read_grid(path)
  keys = list(dict.fromkeys(k for p in grid for k in p))
  missing = [k for k in keys if k not in rows[0]]
  if missing:
    raise SystemExit(f"error: {path}/metrics.csv has no column for the grid's {missing[0]!r}")
  if keys == [] and len({(r["round"], r["seed"]) for r in rows}) < len(rows):
    raise SystemExit(f"error: {path}/metrics.csv has several rows per round and seed (a "
                     "sweep) but no config.json or summary.json naming its grid points; "
                     "grid points are not averaged together")
  curves = []
  for point in grid:
    by_round: dict[int, list[float]] = {}
    for r in rows:
      if all(_same(r[k], point[k]) for k in point) and r[column] not in ("", "nan", None):
        by_round.setdefault(int(r["round"]), []).append(float(r[column]))
    rounds = np.array(sorted(by_round), np.int64)
    values = [np.array(by_round[t]) for t in rounds]
    curves.append((point, rounds, np.array([np.mean(v) for v in values]),
                   np.array([np.std(v) for v in values])))
  return curves


def seed_mean(path: str, column: str) -> tuple[np.ndarray, np.ndarray]:
  """(rounds, mean over seeds of `column`) from the metrics.csv of a run without a grid;
  a sweep is refused (its points are not averaged together: see `seed_curves`)."""
  curves = seed_curves(path, column)
  if len(curves) > 1:
    raise SystemExit(f"error: {path} is a sweep of {len(curves)} grid points; a seed mean "
                     "over all of them would average the points together (use seed_curves)")
  return curves[0][1], curves[0][2]


def figure(runs: list[str], labels: list[str], metric: str, x: str = "round",
           title: str = ""):
  """The matplotlib figure: one curve per run, or per grid point of a sweep's run."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  if len(labels) != len(runs):
    raise SystemExit("error: --labels needs one label per --runs entry")
  curves = []  # (label, x, mean, std)
  for run, label in zip(runs, labels):
    xs = seed_curves(run, x) if x != "round" else None
    for i, (point, rounds, y, std) in enumerate(seed_curves(run, metric)):
      at = rounds if xs is None else np.interp(rounds, xs[i][1], xs[i][2])
      name = results.grid_label(point)
      if name and len(runs) > 1:
        name = f"{label}: {name}"
      curves.append((name or label, at, y, std))
  several = len(curves) > 4
  fig, ax = plt.subplots(figsize=(6.5, 4.2 + (0.22 * -(-len(curves) // 2) if several else 0)),
                         layout="constrained")
  for label, at, y, std in curves:
    (line,) = ax.plot(at, y, label=label)
    ax.fill_between(at, y - std, y + std, color=line.get_color(),
                    alpha=0.08 if several else 0.15, linewidth=0)
  ax.set_xlabel(x)
  ax.set_ylabel(f"{metric} (mean over seeds, ±1 std)")
  ax.set_title(title)
  ax.grid(alpha=0.3)
  if several:  # below the panel, in columns, not over the curves
    fig.legend(loc="outside lower center", ncol=2, fontsize=8)
  else:
    ax.legend(fontsize=8)
  return fig


def main(argv) -> int:
  del argv
  labels = FLAGS.labels or [os.path.basename(os.path.normpath(r)) for r in FLAGS.runs]
  fig = figure(FLAGS.runs, labels, FLAGS.metric, FLAGS.x, FLAGS.title)
  results.save_figure(FLAGS.output, fig)
  print(f"wrote {FLAGS.output}")
  return 0


if __name__ == "__main__":
  app.run(lambda argv: sys.exit(main(argv)))
