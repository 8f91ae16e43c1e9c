"""Writes and reads a run's results: config.json, metrics.csv, summary.json, curves.png.

The layout of summary.json is the contract that scripts and tests read:

  {"config": {...},
   "final": {metric: {"mean", "std", "per_seed"}             # without a grid
             metric: [{"hparams", "mean", "std", "per_seed"}, ...]},  # one per grid point
   "rounds_per_second", "wall_seconds", "compile_seconds", **extra}

`std` is the population std over seeds (ddof=0). Non-finite per-seed values are written as
null and left out of `mean` and `std`.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import platform
import re
import shutil
import socket
import sys
import tempfile
import warnings
from typing import Any, Iterable, Sequence

import numpy as np

from fedjax_bench.errors import UsageError

CONFIG_FILE = 'config.json'
METRICS_FILE = 'metrics.csv'
SUMMARY_FILE = 'summary.json'
CURVES_FILE = 'curves.png'
LEADING_METRICS = ('test_accuracy', 'test_loss', 'train_loss')
# Names a metric's count (core/types.py's, repeated here: this module imports no JAX).
COUNT_SUFFIX = '.count'


# ---------------------------------------------------------------------------
# Atomic writes.


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
  """Writes `data` to `path` so that readers see either the old or the new file."""
  atomic_write_with(path, lambda f: f.write(data))


def atomic_write_with(path: str | os.PathLike, write) -> None:
  """Calls ``write(binary file)`` on a temporary file beside `path`, then puts it in
  place: readers see either the old or the complete new file, never part of one."""
  path = os.fspath(path)
  directory = os.path.dirname(os.path.abspath(path))
  try:
    fd, tmp = tempfile.mkstemp(
        dir=directory, prefix='.' + os.path.basename(path) + '.', suffix='.tmp')
  except OSError as e:
    raise WriteError(e.errno, e.strerror or str(e), path) from e
  try:
    with os.fdopen(fd, 'wb') as f:
      write(f)
      f.flush()
      os.fsync(f.fileno())
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give what open() would
    os.replace(tmp, path)
  except OSError as e:
    _remove_quietly(tmp)
    raise WriteError(e.errno, e.strerror or str(e), path) from e
  except BaseException:
    _remove_quietly(tmp)
    raise
  _fsync_dir(directory)


class WriteError(OSError):
  """A file could not be written (disk full, read-only, its directory gone); `filename`
  is the file, and the old one, if any, is intact."""


# The temporary files of `atomic_write_with` (mkstemp: 8 characters of [a-z0-9_]) and of
# `tensorboard.write` (mkdtemp).
_TEMPORARY = re.compile(r'^\.(?:.+\.[a-z0-9_]{8}\.tmp|tensorboard\.[a-z0-9_]{8})$')
# Those of the data and optimum caches: .NAME.PID.tmp.
_PID_TEMPORARY = re.compile(r'^\..+\.(\d+)\.tmp$')


def remove_temporaries(directory: str | os.PathLike) -> list[str]:
  """Removes the temporary files (and directories) of our writers from `directory`, left by
  writes that were killed; call it only while holding the directory (its run lock)."""
  removed = []
  for entry in os.scandir(directory):
    if _TEMPORARY.match(entry.name):
      if entry.is_dir(follow_symlinks=False):
        shutil.rmtree(entry.path, ignore_errors=True)
      else:
        _remove_quietly(entry.path)
      removed.append(entry.path)
  return removed


def remove_orphaned_temporaries(cache_dir: str | os.PathLike) -> list[str]:
  """Removes the cache writers' temporary files (``.NAME.PID.tmp``, in `cache_dir` and its
  subdirectories but the compilation cache) whose process is gone; a live one's are kept."""
  removed = []
  try:
    entries = list(os.scandir(cache_dir))
  except OSError:
    return removed
  dirs = [os.fspath(cache_dir)] + [e.path for e in entries
                                   if e.is_dir(follow_symlinks=False) and e.name != 'xla']
  for d in dirs:
    try:
      names = os.listdir(d)
    except OSError:
      continue
    for name in names:
      m = _PID_TEMPORARY.match(name)
      path = os.path.join(d, name)
      if (m and not _process_alive(int(m.group(1))) and os.path.isfile(path)
          and not os.path.islink(path)):
        _remove_quietly(path)
        removed.append(path)
  return removed


def _process_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except (ProcessLookupError, OverflowError):
    return False
  except PermissionError:
    return True  # another user's process
  return True


def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
  atomic_write_bytes(path, text.encode('utf-8'))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
  # Serialize fully before touching the file: a failure leaves the old file intact.
  text = json.dumps(to_jsonable(obj), indent=2, sort_keys=False, allow_nan=False)
  atomic_write_text(path, text + '\n')


def to_jsonable(obj: Any) -> Any:
  """Converts numpy scalars/arrays (and tuples) to plain Python; NaN/inf become None."""
  if isinstance(obj, dict):
    return {str(k): to_jsonable(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [to_jsonable(v) for v in obj]
  if isinstance(obj, np.ndarray):
    return to_jsonable(obj.tolist())
  if isinstance(obj, np.generic):
    return to_jsonable(obj.item())
  if isinstance(obj, float) and not math.isfinite(obj):
    return None
  if hasattr(obj, '__array__') and not isinstance(obj, (str, bytes)):
    return to_jsonable(np.asarray(obj))  # jax arrays
  return obj


def _remove_quietly(path: str) -> None:
  try:
    os.remove(path)
  except OSError:
    pass


def _fsync_dir(directory: str) -> None:
  # Makes the rename durable; not supported everywhere (e.g. Windows), hence best effort.
  try:
    fd = os.open(directory, os.O_RDONLY)
  except OSError:
    return
  try:
    os.fsync(fd)
  except OSError:
    pass
  finally:
    os.close(fd)


# ---------------------------------------------------------------------------
# History.


@dataclasses.dataclass
class History:
  """Evaluations of a run.

  Attributes:
    rounds: [E] int, the round of each evaluation, increasing.
    metrics: name -> [E, G, S] float, E evaluations, G grid points, S seeds.
    seeds: the S seeds, in the order of the last axis.
    grid: G dicts of hyperparameters; [{}] without a grid.
  """
  rounds: np.ndarray
  metrics: dict[str, np.ndarray]
  seeds: list[int]
  grid: list[dict] = dataclasses.field(default_factory=lambda: [{}])

  def __post_init__(self) -> None:
    self.rounds = np.asarray(self.rounds, dtype=np.int64).reshape(-1)
    self.metrics = {k: np.asarray(v, dtype=np.float64) for k, v in self.metrics.items()}
    self.seeds = [int(s) for s in self.seeds]
    self.grid = [dict(g) for g in self.grid] or [{}]
    shape = (len(self.rounds), len(self.grid), len(self.seeds))
    for name, values in self.metrics.items():
      if values.shape != shape:
        raise ValueError(f'metric {name!r} has shape {values.shape}, expected '
                         f'[evaluations, grid points, seeds] = {shape}')

  @property
  def has_grid(self) -> bool:
    return not (len(self.grid) == 1 and not self.grid[0])

  def metric_names(self) -> list[str]:
    return sort_metric_names(self.metrics)

  def grid_keys(self) -> list[str]:
    keys: list[str] = []
    for point in self.grid:
      keys.extend(k for k in point if k not in keys)
    return keys

  def to_rows(self) -> list[dict[str, Any]]:
    """One dict per (evaluation, grid point, seed), in the column order of metrics.csv."""
    names, keys = self.metric_names(), self.grid_keys()
    rows = []
    for e, rnd in enumerate(self.rounds):
      for g, point in enumerate(self.grid):
        for s, seed in enumerate(self.seeds):
          row: dict[str, Any] = {'round': int(rnd), 'seed': seed}
          row.update({k: point.get(k) for k in keys})
          row.update({m: float(self.metrics[m][e, g, s]) for m in names})
          rows.append(row)
    return rows


def sort_metric_names(names: Iterable[str]) -> list[str]:
  """test_accuracy, test_loss, train_loss first (those present), then the rest sorted."""
  names = set(names)
  leading = [m for m in LEADING_METRICS if m in names]
  return leading + sorted(names - set(leading))


# ---------------------------------------------------------------------------
# Summary.


def final_indices(rounds: np.ndarray, final_window: int | None) -> np.ndarray:
  """Indices of the evaluations that make up the final value."""
  rounds = np.asarray(rounds)
  if rounds.size == 0:
    return np.zeros((0,), dtype=np.int64)
  if not final_window:
    return np.array([rounds.size - 1])
  return np.nonzero(rounds > rounds[-1] - final_window)[0]


def summarize(history: History, final_window: int | None) -> dict[str, Any]:
  """The `final` object of summary.json.

  Per seed, final is the mean of the evaluations in the window (a non-finite evaluation makes
  the seed non-finite: a diverged run stays diverged). A metric that comes with a count
  (`core.types.count_name`: its blocks are means over that many items) is the mean over
  the window's items, sum(m * count) / sum(count), skipping blocks with none, and NaN when
  the window has none. Across seeds, mean and std (ddof=0) skip non-finite seeds; per_seed
  keeps them as None.
  """
  idx = final_indices(history.rounds, final_window)
  final: dict[str, Any] = {}
  for name in history.metric_names():
    values = history.metrics[name][idx]  # [W, G, S]
    counts = history.metrics.get(name + COUNT_SUFFIX)
    if idx.size and counts is not None:
      per_point = _count_weighted(values, counts[idx])
    elif idx.size:
      per_point = values.mean(axis=0)  # [G, S]
    else:
      per_point = np.full(values.shape[1:], np.nan)
    stats = [_seed_stats(per_point[g]) for g in range(len(history.grid))]
    if history.has_grid:
      final[name] = [{'hparams': dict(p), **st} for p, st in zip(history.grid, stats)]
    else:
      final[name] = stats[0]
  return final


def _count_weighted(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
  """sum(values * counts) / sum(counts) over axis 0; a block with count 0 adds nothing
  (its value is NaN), a NaN count (a diverged run) makes the result NaN."""
  with np.errstate(invalid='ignore'):
    total = counts.sum(axis=0)
    weighted = np.where(counts == 0, 0.0, values * counts).sum(axis=0)
    return np.where(total > 0, weighted / np.where(total > 0, total, 1.0), np.nan)


def _seed_stats(per_seed: np.ndarray) -> dict[str, Any]:
  per_seed = np.where(np.isfinite(per_seed), per_seed, np.nan)
  finite = per_seed[~np.isnan(per_seed)]
  mean = float(finite.mean()) if finite.size else None
  std = float(finite.std(ddof=0)) if finite.size else None
  return {
      'mean': mean,
      'std': std,
      'per_seed': [None if math.isnan(v) else float(v) for v in per_seed],
  }


# ---------------------------------------------------------------------------
# metrics.csv.


def _csv_cell(value: Any) -> Any:
  if isinstance(value, (float, np.floating)):
    return '%.9g' % value
  return value


def metrics_csv_text(history: History) -> str:
  header = ['round', 'seed', *history.grid_keys(), *history.metric_names()]
  buf = io.StringIO()
  writer = csv.writer(buf, lineterminator='\n')
  writer.writerow(header)
  for row in history.to_rows():
    writer.writerow([_csv_cell(row[c]) for c in header])
  return buf.getvalue()


def write_metrics_csv(path: str | os.PathLike, history: History) -> None:
  atomic_write_text(path, metrics_csv_text(history))


# ---------------------------------------------------------------------------
# Plots.

# The metric that ranks a sweep's grid points: the first of these with a finite value.
RANKING_METRICS = ('test_accuracy', 'optimality_gap', 'test_loss', 'train_loss')


def higher_is_better(metric: str) -> bool:
  """Whether a larger value of `metric` is better (accuracies); else smaller is (losses,
  gaps)."""
  return 'accuracy' in metric


def best_index(values: Sequence[float | None], metric: str) -> int | None:
  """The index of the best finite value by `metric`'s direction (the first of equals),
  None if there is none."""
  v = np.array([np.nan if x is None else x for x in values], np.float64)
  v = np.where(np.isfinite(v), v, np.nan)
  if np.all(np.isnan(v)):
    return None
  return int(np.nanargmax(v) if higher_is_better(metric) else np.nanargmin(v))


def best_point(values: dict[str, Sequence[float | None]]) -> tuple[str, int] | None:
  """(metric, index) of the best grid point: by the first of RANKING_METRICS in
  ``values`` ({metric: one value per point}) with a finite value; None if none has."""
  for metric in RANKING_METRICS:
    if metric in values:
      g = best_index(values[metric], metric)
      if g is not None:
        return metric, g
  return None


def plot_curves(path: str | os.PathLike,
                history: History,
                metrics: Sequence[str] = ('test_accuracy', 'train_loss'),
                title: str = '',
                x: np.ndarray | None = None,
                xlabel: str = 'round',
                final_window: int | None = None) -> None:
  """One PNG, one panel per metric present: mean over seeds with a ±1 std band.

  A sweep (several grid points) has one curve per point, the best one (`best_point` of
  the final values over `final_window`, as summary.json's) drawn thicker and named in one
  legend below the panels, and a last panel of the final value against the swept
  hyperparameter (`_plot_sweep_panel`).
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  names = [m for m in metrics if m in history.metrics] or history.metric_names()[:1]
  xs = history.rounds if x is None else np.asarray(x).reshape(-1)
  sweep = len(history.grid) > 1
  final = summarize(history, final_window) if sweep else {}
  best = best_point({m: [p['mean'] for p in final[m]] for m in final}) if sweep else None
  panels = max(len(names), 1) + sweep
  rows = -(-len(history.grid) // 3) if sweep else 0  # about the legend's rows
  fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 3.8 + 0.2 * rows), squeeze=False,
                           layout='constrained')
  for ax, name in zip(axes[0], names):
    _plot_panel(ax, xs, history, name, xlabel, best=best and best[1], legend=not sweep)
  if sweep:
    _plot_sweep_panel(axes[0][-1], history, final, best, final_window)
    handles, labels = axes[0][0].get_legend_handles_labels()
    width = max(len(l) for l in labels) * 0.075 + 0.8  # inches per legend column
    seeds = len(history.seeds)
    fig.legend(handles, labels, loc='outside lower center', fontsize='small',
               ncol=max(1, min(len(labels), int(5 * panels / width))),
               title=f'grid point (mean over {seeds} seed{"s" * (seeds > 1)}'
                     + (', ±1 std band)' if seeds > 1 else ')'))
  if title:
    fig.suptitle(title)
  save_figure(path, fig, dpi=120)


def save_figure(path: str | os.PathLike, fig: Any, dpi: int = 110) -> None:
  """Writes a matplotlib figure as PNG, atomically, and closes it."""
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  buf = io.BytesIO()
  try:
    fig.savefig(buf, format='png', dpi=dpi)
  finally:
    plt.close(fig)
  atomic_write_bytes(path, buf.getvalue())


def _plot_panel(ax: Any, xs: np.ndarray, history: History, name: str, xlabel: str,
                best: int | None = None, legend: bool = True) -> None:
  values = history.metrics[name]  # [E, G, S]
  finite = np.where(np.isfinite(values), values, np.nan)
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', RuntimeWarning)  # all-NaN slices
    mean = np.nanmean(finite, axis=2)
    std = np.nanstd(finite, axis=2)
  n = len(history.seeds)
  several = n > 1
  colors = _point_colors(len(history.grid))
  for g, point in enumerate(history.grid):
    label = grid_label(point) or (f'seed {history.seeds[0]}' if n == 1 else 'mean')
    if g == best:
      label += ' (best)'
    elif several and legend:
      label += ' (±1 std over seeds)'
    (line,) = ax.plot(xs, mean[:, g], label=label, color=colors[g],
                      linewidth=2.6 if g == best else 1.3, zorder=3 if g == best else 2)
    if several:
      ax.fill_between(xs, mean[:, g] - std[:, g], mean[:, g] + std[:, g],
                      color=line.get_color(), alpha=0.2 if len(history.grid) < 4 else 0.1,
                      linewidth=0)
  ax.set_xlabel(xlabel)
  ax.set_ylabel(name)
  ax.set_title(f'{name} ({n} seed{"" if n == 1 else "s"})')
  ax.grid(True, alpha=0.3)
  if legend:
    ax.legend(fontsize='small')


def _point_colors(n: int) -> list:
  import matplotlib  # pylint: disable=g-import-not-at-top
  if n <= 10:
    return [matplotlib.colormaps['tab10'](i) for i in range(n)]
  return [matplotlib.colormaps['viridis'](i / (n - 1)) for i in range(n)]


def _plot_sweep_panel(ax: Any, history: History, final: dict,
                      best: tuple[str, int] | None, final_window: int | None) -> None:
  """The ranking metric's final value (seed mean, ±1 std error bars) against the swept
  hyperparameter with the most values, one line per value of the other swept ones; a
  log axis when the values span more than a decade; the best point starred."""
  metric = best[0] if best else next(
      (m for m in RANKING_METRICS if m in final), history.metric_names()[0])
  grid = history.grid
  keys = history.grid_keys()
  distinct = {k: sorted({p[k] for p in grid if k in p}) for k in keys}
  swept = [k for k in keys if len(distinct[k]) > 1] or keys[:1]
  x_key = max(swept, key=lambda k: len(distinct[k]))
  others = [k for k in swept if k != x_key]
  lines: dict[tuple, list[int]] = {}
  for g, point in enumerate(grid):
    lines.setdefault(tuple(point.get(k) for k in others), []).append(g)
  stats = final[metric]
  value = lambda g, field: np.nan if stats[g][field] is None else stats[g][field]
  for combo, members in sorted(lines.items(), key=lambda kv: [(v is None, v) for v in kv[0]]):
    members.sort(key=lambda g: grid[g][x_key])
    label = grid_label(dict(zip(others, combo))) or None
    ax.errorbar([grid[g][x_key] for g in members], [value(g, 'mean') for g in members],
                yerr=[value(g, 'std') for g in members], marker='o', markersize=4,
                capsize=3, label=label)
  if best is not None:
    g = best[1]
    ax.plot([grid[g][x_key]], [value(g, 'mean')], marker='*', markersize=15, color='gold',
            markeredgecolor='black', linestyle='none', zorder=5,
            label=f'best: {grid_label(grid[g])}'.replace(', ', ',\n'))
  xs = np.asarray(distinct[x_key], np.float64)
  if np.all(xs > 0) and xs.max() > 10 * xs.min():
    ax.set_xscale('log')
  if len(xs) <= 12:
    ax.set_xticks(xs, [f'{v:g}' for v in xs], minor=False)
    ax.minorticks_off()
  ax.set_xlabel(x_key)
  window = f'last {final_window} rounds' if final_window else 'last evaluation'
  ax.set_ylabel(f'final {metric} ({window})')
  ax.set_title(f'final {metric} by {x_key}')
  ax.grid(True, alpha=0.3)
  handles, labels = ax.get_legend_handles_labels()
  if handles:
    order = sorted(range(len(labels)), key=lambda i: labels[i].startswith('best: '))
    ax.legend([handles[i] for i in order], [labels[i] for i in order], fontsize='small', title=', '.join(others) or None, title_fontsize='small',
              loc='center left', bbox_to_anchor=(1.02, 0.5))


def grid_label(point: dict) -> str:
  """'name=value, ...' of a grid point (a figure's legend)."""
  return ', '.join(f'{k}={v:g}' if isinstance(v, float) else f'{k}={v}'
                   for k, v in point.items())


# ---------------------------------------------------------------------------
# A whole run.


def make_summary(config: dict, history: History, final_window: int | None, timing: dict,
                 extra: dict | None = None) -> dict:
  """The summary.json contract (JSON-able): the config, the final window's statistics per
  metric, the timing, and ``extra``."""
  return to_jsonable({
      'config': config,
      'final': summarize(history, final_window),
      'rounds_per_second': timing.get('rounds_per_second'),
      'wall_seconds': timing.get('wall_seconds'),
      'compile_seconds': timing.get('compile_seconds'),
      **(extra or {}),
  })


def write_run(output_dir: str | os.PathLike,
              *,
              config: dict,
              history: History,
              final_window: int | None,
              timing: dict,
              extra: dict | None = None) -> dict:
  """Writes config.json, metrics.csv, summary.json and curves.png; returns the summary."""
  output_dir = os.fspath(output_dir)
  _ensure_writable_dir(output_dir)
  summary = make_summary(config, history, final_window, timing, extra)
  # A failure here is a fault (WriteError, an OSError naming the file), not bad input.
  atomic_write_json(os.path.join(output_dir, CONFIG_FILE), config)
  write_metrics_csv(os.path.join(output_dir, METRICS_FILE), history)
  atomic_write_json(os.path.join(output_dir, SUMMARY_FILE), summary)
  curves = os.path.join(output_dir, CURVES_FILE)
  try:
    plot_curves(curves, history, title=str(config.get('name') or ''),
                final_window=final_window)
  except WriteError:
    raise
  except OSError as e:
    raise WriteError(e.errno, e.strerror or str(e), curves) from e
  return summary


def _ensure_writable_dir(output_dir: str) -> None:
  try:
    os.makedirs(output_dir, exist_ok=True)
  except OSError as e:
    raise UsageError(
        f'cannot create output directory {output_dir}: {e.strerror or e}') from e
  if not os.access(output_dir, os.W_OK | os.X_OK):
    raise UsageError(f'output directory {output_dir} is not writable')


def read_summary(output_dir: str | os.PathLike) -> dict:
  with open(os.path.join(os.fspath(output_dir), SUMMARY_FILE), encoding='utf-8') as f:
    return json.load(f)


# ---------------------------------------------------------------------------
# Environment.


def environment_info() -> dict[str, Any]:
  """Versions, platform and devices, for config.json."""
  info: dict[str, Any] = {
      'python': sys.version.split()[0],
      'platform': platform.platform(),
      'host': socket.gethostname(),
      'cores': (len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity')
                else os.cpu_count()),
  }
  for module in ('jax', 'jaxlib', 'flax', 'optax', 'numpy'):
    info[module] = _version(module)
  try:
    import jax  # pylint: disable=g-import-not-at-top
    devices = jax.devices()
    info['devices'] = [str(d) for d in devices]
    info['device_count'] = len(devices)
  except Exception as e:  # pylint: disable=broad-except
    info['devices'] = [f'unavailable: {e}']
    info['device_count'] = 0
  return info


def _version(module: str) -> str | None:
  try:
    from importlib import metadata  # pylint: disable=g-import-not-at-top
    return metadata.version(module)
  except Exception:  # pylint: disable=broad-except
    try:
      return getattr(__import__(module), '__version__', None)
    except Exception:  # pylint: disable=broad-except
      return None
