"""One plot of several runs' seed-mean curves, read from their metrics.csv.

  python benchmarks/plot_runs.py --runs=DIR1,DIR2 --labels=A,B --metric=test_accuracy \
      [--x=round|cum_uplink_bits] --output=FILE.png [--title=...]
"""

import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402
import numpy as np  # noqa: E402

from fedjax_bench import results  # noqa: E402

flags.DEFINE_list("runs", None, "Run directories (each with metrics.csv).", required=True)
flags.DEFINE_list("labels", None, "Legend labels, one per run (default: directory names).")
flags.DEFINE_string("metric", "test_accuracy", "Metric on the y axis.")
flags.DEFINE_string("x", "round", "round, or a cumulative metric such as cum_uplink_bits.")
flags.DEFINE_string("output", None, "PNG to write.", required=True)
flags.DEFINE_string("title", "", "Plot title.")
FLAGS = flags.FLAGS


def seed_mean(path: str, column: str) -> tuple[np.ndarray, np.ndarray]:
  """(rounds, mean over seeds of `column`) from a run's metrics.csv."""
  with open(os.path.join(path, "metrics.csv")) as f:
    rows = list(csv.DictReader(f))
  if not rows or column not in rows[0]:
    raise SystemExit(f"error: {path}/metrics.csv has no column {column!r}")
  by_round: dict[int, list[float]] = {}
  for r in rows:
    if r[column] not in ("", "nan", None):
      by_round.setdefault(int(r["round"]), []).append(float(r[column]))
  rounds = np.array(sorted(by_round))
  return rounds, np.array([np.mean(by_round[t]) for t in rounds])


def main(argv) -> int:
  del argv
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  labels = FLAGS.labels or [os.path.basename(os.path.normpath(r)) for r in FLAGS.runs]
  if len(labels) != len(FLAGS.runs):
    raise SystemExit("error: --labels needs one label per --runs entry")
  fig, ax = plt.subplots(figsize=(6.5, 4.2))
  for run, label in zip(FLAGS.runs, labels):
    rounds, y = seed_mean(run, FLAGS.metric)
    x = rounds
    if FLAGS.x != "round":
      xr, xv = seed_mean(run, FLAGS.x)
      x = np.interp(rounds, xr, xv)
    ax.plot(x, y, label=label)
  ax.set_xlabel(FLAGS.x)
  ax.set_ylabel(f"{FLAGS.metric} (mean over seeds)")
  ax.set_title(FLAGS.title)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  results.save_figure(FLAGS.output, fig)
  print(f"wrote {FLAGS.output}")
  return 0


if __name__ == "__main__":
  app.run(lambda argv: sys.exit(main(argv)))
