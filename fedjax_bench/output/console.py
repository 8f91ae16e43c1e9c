"""A run's terminal output: the progress line per evaluation, the final lines, the
divergence error. Formatting is in functions that return strings (`progress_line`,
`final_lines`), so that tests read them without running anything."""

import datetime
import sys

import numpy as np

from fedjax_bench.output import results

# The metrics of the progress line, in order (those present).
PROGRESS_METRICS = ("test_accuracy", "test_loss", "train_loss", "optimality_gap", "cum_time")


def count(n: int, noun: str) -> str:
  return f"{n} {noun}{'' if n == 1 else 's'}"


def point_label(hparams: dict) -> str:
  return " ".join(f"{k}={v:g}" for k, v in hparams.items())


def run_label(hparams: dict, seed: int) -> str:
  return f"{point_label(hparams)} seed {seed}" if hparams else f"seed {seed}"


def fmt(stat, spec: str = ".4f") -> str:
  if stat["mean"] is None:
    return "nan"
  return f"{stat['mean']:{spec}} ± {stat['std']:{spec}}"


def rate(rounds_per_second: float) -> str:
  if rounds_per_second >= 1:
    return f"{rounds_per_second:.1f} rounds/s"
  return f"{1 / max(rounds_per_second, 1e-12):.1f} s/round"


def progress_line(p) -> str:
  """One line for an `engine.Progress`: without a grid, the seed mean of each metric;
  with one, only the ranking metric (`results.best_point`): its best grid point's value
  and label and its range over the points."""
  m = {k: np.asarray(v, np.float64).reshape(-1) for k, v in p.metrics.items()}
  if len(p.grid) > 1:
    shown = _sweep_summary(m, p.grid)
  else:
    shown = " ".join(f"{k} {m[k][0]:.4g}" for k in PROGRESS_METRICS if k in m)
  eta = datetime.timedelta(seconds=round(p.eta_seconds))
  return f"round {p.round:>6}/{p.rounds} | {shown} | {rate(p.rounds_per_second)} | ETA {eta}"


def _sweep_summary(metrics: dict, grid: list) -> str:
  best = results.best_point({k: metrics[k] for k in results.RANKING_METRICS if k in metrics})
  if best is None:
    name = next((k for k in results.RANKING_METRICS if k in metrics), None)
    return f"{name} nan at all {len(grid)} points" if name else f"{len(grid)} points"
  name, g = best
  values = metrics[name]
  finite = values[np.isfinite(values)]
  points = (f"{len(finite)} points" if len(finite) == len(grid)
            else f"{len(finite)} of {len(grid)} points")
  return (f"{name} best {values[g]:.4g} ({point_label(grid[g])}), "
          f"range {finite.min():.4g}..{finite.max():.4g} over {points}")


def print_progress(p) -> None:
  print(progress_line(p), flush=True)


def final_lines(summary: dict, grid: list, timing: dict, output_dir=None) -> list:
  """The lines printed at the end of a run: the final values (per grid point, then the
  best point by `results.best_point`), the speed and where the results are."""
  final = summary["final"]
  points = ([(f"{point_label(p['hparams'])}: ", i)
             for i, p in enumerate(final["test_accuracy"])] if grid else [("", None)])
  lines = []
  for label, i in points:
    pick = lambda stat: stat if i is None else stat[i]
    gap = (f", optimality_gap {fmt(pick(final['optimality_gap']), '.3e')}"
           if "optimality_gap" in final else "")
    lines.append(f"{label}test_accuracy {fmt(pick(final['test_accuracy']))}, train_loss "
                 f"{fmt(pick(final['train_loss']))}{gap}")
  if grid and len(grid) > 1:
    best = results.best_point({k: [p["mean"] for p in final[k]]
                               for k in results.RANKING_METRICS if k in final})
    if best is None:
      lines.append("best point: none (no point has a finite final value)")
    else:
      name, g = best
      side = "highest" if results.higher_is_better(name) else "lowest"
      lines.append(f"best point ({side} final {name}): {point_label(grid[g])}")
  where = f"; results in {output_dir}" if output_dir else ""
  lines.append(f"done: {rate(timing['rounds_per_second'])}, "
               f"compile {timing['compile_seconds']:.1f}s{where}")
  return lines


def print_final(result, timing: dict) -> None:
  """`final_lines` of an `api.Result`."""
  for line in final_lines(result.summary, result.grid, timing, result.output_dir):
    print(line)


def report_divergence(bad: list, runs: int, out) -> None:
  """One line on stderr naming the runs that diverged (``bad``: summary.json's
  `diverged` entries, of ``runs`` runs) and where."""
  shown = ", ".join(f"{run_label(d['hparams'], d['seed'])} at round {d['round']}"
                    for d in bad[:4]) + (", ..." if len(bad) > 4 else "")
  rest = "the others ran to the end; " if len(bad) < runs else ""
  where = f"results up to the divergence were written to {out}" if out else \
      "results up to the divergence are in the result"
  sys.stderr.write(f"error: {len(bad)} of {runs} runs diverged (non-finite parameters or loss): "
                   f"{shown}; {rest}{where}\n")


def preset_line(name: str | None, preset) -> str:
  """The line that says which paper setting a run takes and what it sets: a flag given
  overrides any of them."""
  values = " ".join(f"--{n}={v}" for n, v in preset)
  return f"{name or 'the paper setting'} sets {values} (a flag given overrides it)"
