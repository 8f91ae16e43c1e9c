"""Writes and reads a run's results: config.json, metrics.csv, summary.json, curves.png.

The layout of summary.json is the contract that scripts and tests read (see DESIGN.md,
"The command line" and "Results"):

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
  fd, tmp = tempfile.mkstemp(
      dir=directory, prefix='.' + os.path.basename(path) + '.', suffix='.tmp')
  try:
    with os.fdopen(fd, 'wb') as f:
      write(f)
      f.flush()
      os.fsync(f.fileno())
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give what open() would
    os.replace(tmp, path)
  except BaseException:
    _remove_quietly(tmp)
    raise
  _fsync_dir(directory)


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


def plot_curves(path: str | os.PathLike,
                history: History,
                metrics: Sequence[str] = ('test_accuracy', 'train_loss'),
                title: str = '',
                x: np.ndarray | None = None,
                xlabel: str = 'round') -> None:
  """One PNG, one panel per metric present: mean over seeds with a ±1 std band."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  names = [m for m in metrics if m in history.metrics] or history.metric_names()[:1]
  xs = history.rounds if x is None else np.asarray(x).reshape(-1)
  fig, axes = plt.subplots(1, max(len(names), 1), figsize=(5 * max(len(names), 1), 3.8),
                           squeeze=False)
  for ax, name in zip(axes[0], names):
    _plot_panel(ax, xs, history, name, xlabel)
  if title:
    fig.suptitle(title)
  fig.tight_layout()
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


def _plot_panel(ax: Any, xs: np.ndarray, history: History, name: str, xlabel: str) -> None:
  values = history.metrics[name]  # [E, G, S]
  finite = np.where(np.isfinite(values), values, np.nan)
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', RuntimeWarning)  # all-NaN slices
    mean = np.nanmean(finite, axis=2)
    std = np.nanstd(finite, axis=2)
  n = len(history.seeds)
  several = n > 1
  for g, point in enumerate(history.grid):
    label = _grid_label(point) or (f'seed {history.seeds[0]}' if n == 1 else 'mean')
    if several:
      label += ' (±1 std over seeds)'
    (line,) = ax.plot(xs, mean[:, g], label=label)
    if several:
      ax.fill_between(xs, mean[:, g] - std[:, g], mean[:, g] + std[:, g],
                      color=line.get_color(), alpha=0.2, linewidth=0)
  ax.set_xlabel(xlabel)
  ax.set_ylabel(name)
  ax.set_title(f'{name} ({n} seed{"" if n == 1 else "s"})')
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize='small')


def _grid_label(point: dict) -> str:
  return ', '.join(f'{k}={v}' for k, v in point.items())


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
  try:
    atomic_write_json(os.path.join(output_dir, CONFIG_FILE), config)
    write_metrics_csv(os.path.join(output_dir, METRICS_FILE), history)
    atomic_write_json(os.path.join(output_dir, SUMMARY_FILE), summary)
    plot_curves(os.path.join(output_dir, CURVES_FILE), history,
                title=str(config.get('name') or ''))
  except OSError as e:
    raise UsageError(f'cannot write results to {output_dir}: {e.strerror or e}') from e
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


def select_curve(candidates, full_precision: float, tol: float = 0.1):
  """The paper's curve-selection rule (spec 001 §4.8) over (bits, accuracy, label) triples:
  the most compressed (fewest bits per message) whose accuracy is within `tol` points of
  full precision, else the most accurate one. Returns its label."""
  candidates = list(candidates)
  if not candidates:
    raise ValueError("select_curve: no candidates")
  good = [c for c in candidates if c[1] >= full_precision - tol]
  if good:
    return min(good, key=lambda c: (c[0], -c[1]))[2]
  return max(candidates, key=lambda c: (c[1], -c[0]))[2]
