"""TensorBoard event files for a run's History, an extra view next to metrics.csv.

`write(out_dir, history)` replaces `out_dir/tensorboard/` with one run directory per
(grid point, seed): `seed_<s>` without a grid, `<k>=<v>,<k>=<v>/seed_<s>` with one. Every
metric is a scalar (float32 `simple_value`) tagged with its name, at step = round; one event
per evaluation holds all metrics (Summary protos built here rather than `add_scalar`, which
logs a warning for every NaN). Non-finite values are written as they are, like metrics.csv's
`nan`: dropping them would make a diverged run look as if it had stopped.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time

import numpy as np

from fedjax_bench.errors import UsageError
from fedjax_bench.output.results import History, WriteError

TENSORBOARD_DIR = 'tensorboard'
INSTALL_HINT = 'pip install tensorboardX'
_UNSAFE = re.compile(r'[^A-Za-z0-9._=,+-]')


def run_names(history: History) -> list[list[str]]:
  """[G][S] run directory names, relative to `tensorboard/`, unique and filesystem-safe."""
  keys = history.grid_keys()
  points = [','.join(f'{k}={_value_text(p[k])}' for k in keys if k in p)
            for p in history.grid]
  points = [_UNSAFE.sub('_', p) for p in points]
  if history.has_grid and len(set(points)) < len(points):  # distinct values made alike
    points = [f'{g}_{p}' for g, p in enumerate(points)]
  return [[os.path.join(p, f'seed_{s}') if history.has_grid else f'seed_{s}'
           for s in history.seeds] for p in points]


def check_installed():
  """(FileWriter, Summary) of tensorboardX; a UsageError saying how to install it."""
  try:
    from tensorboardX import FileWriter  # pylint: disable=g-import-not-at-top
    from tensorboardX.proto.summary_pb2 import Summary  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise UsageError(f'TensorBoard event files need tensorboardX: {INSTALL_HINT}') from e
  return FileWriter, Summary


class LiveWriter:
  """Event files written while a run goes, so that TensorBoard can watch it: `update`
  (after every evaluation) appends the evaluations of a history not yet written, one file
  per run, kept open and written through (tensorboardX's synchronous EventsWriter: its
  FileWriter queues events for a thread). The first update replaces
  `out_dir/tensorboard/` (a resumed run's restored evaluations included); `write`
  replaces it again when the run ends."""

  def __init__(self, out_dir: str | os.PathLike):
    self._root = os.path.join(os.fspath(out_dir), TENSORBOARD_DIR)
    self._writers = None  # [G][S] EventsWriter
    self._written = 0

  def update(self, history: History) -> None:
    _, summary = check_installed()
    from tensorboardX.event_file_writer import EventsWriter  # pylint: disable=g-import-not-at-top
    from tensorboardX.proto.event_pb2 import Event  # pylint: disable=g-import-not-at-top
    try:
      if self._writers is None:
        shutil.rmtree(self._root, ignore_errors=True)
        self._writers = []
        for row in run_names(history):
          self._writers.append([])
          for run in row:
            os.makedirs(os.path.join(self._root, run), exist_ok=True)
            self._writers[-1].append(EventsWriter(os.path.join(self._root, run, 'events')))
      names = history.metric_names()
      for g, row in enumerate(self._writers):
        for s, writer in enumerate(row):
          for e in range(self._written, len(history.rounds)):
            values = [summary.Value(tag=m, simple_value=float(history.metrics[m][e, g, s]))
                      for m in names]
            writer.write_event(Event(wall_time=time.time(), step=int(history.rounds[e]),
                                     summary=summary(value=values)))
          writer.flush()
    except OSError as e:
      raise WriteError(e.errno, e.strerror or str(e), e.filename or self._root) from e
    self._written = len(history.rounds)

  def close(self) -> None:
    for row in self._writers or []:
      for writer in row:
        writer.close()
    self._writers = None


def write(out_dir: str | os.PathLike, history: History) -> list[str]:
  """Writes the event files under `out_dir/tensorboard/`; returns the run directories."""
  FileWriter, Summary = check_installed()  # pylint: disable=invalid-name
  out_dir = os.fspath(out_dir)
  final = os.path.join(out_dir, TENSORBOARD_DIR)
  names = history.metric_names()
  try:
    os.makedirs(out_dir, exist_ok=True)
    # Written aside and moved in, so that no stale run of an earlier write lingers and a
    # failed write leaves the previous tensorboard/ as it was.
    tmp = tempfile.mkdtemp(dir=out_dir, prefix='.' + TENSORBOARD_DIR + '.')
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; give what makedirs would
    try:
      runs = run_names(history)
      for g, row in enumerate(runs):
        for s, run in enumerate(row):
          writer = FileWriter(os.path.join(tmp, run))
          try:
            for e, rnd in enumerate(history.rounds):
              values = [Summary.Value(tag=m, simple_value=float(history.metrics[m][e, g, s]))
                        for m in names]
              writer.add_summary(Summary(value=values), int(rnd))
          finally:
            writer.close()
      shutil.rmtree(final, ignore_errors=True)
      os.replace(tmp, final)
    except BaseException:
      shutil.rmtree(tmp, ignore_errors=True)
      raise
  except OSError as e:  # a fault, like any failed write of a run's files
    raise WriteError(e.errno, e.strerror or str(e), e.filename or final) from e
  return [os.path.join(final, run) for row in runs for run in row]


def _value_text(value) -> str:
  if isinstance(value, np.generic):
    value = value.item()
  return repr(value) if isinstance(value, float) else str(value)
