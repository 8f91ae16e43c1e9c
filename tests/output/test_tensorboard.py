"""TensorBoard event files, read back with a TFRecord reader written here."""

import math
import os
import struct
import sys

import numpy as np
import pytest

from fedjax_bench.output import tensorboard
from fedjax_bench.errors import UsageError
from fedjax_bench.output.results import History


def _crc32c_table():
  table = []
  for n in range(256):
    c = n
    for _ in range(8):
      c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    table.append(c)
  return table


_TABLE = _crc32c_table()


def _masked_crc(data: bytes) -> int:
  crc = 0xFFFFFFFF
  for b in data:
    crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
  crc ^= 0xFFFFFFFF
  return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _records(path):
  with open(path, 'rb') as f:
    data = f.read()
  pos = 0
  while pos < len(data):
    header = data[pos:pos + 8]
    (length,) = struct.unpack('<Q', header)
    (length_crc,) = struct.unpack('<I', data[pos + 8:pos + 12])
    assert length_crc == _masked_crc(header)
    body = data[pos + 12:pos + 12 + length]
    (body_crc,) = struct.unpack('<I', data[pos + 12 + length:pos + 16 + length])
    assert body_crc == _masked_crc(body)
    yield body
    pos += 16 + length
  assert pos == len(data)


def _read_runs(root):
  """{run: [(tag, step, value), ...]} from every event file under `root`."""
  from tensorboardX.proto import event_pb2  # pylint: disable=g-import-not-at-top
  runs = {}
  for directory, _, files in os.walk(root):
    for name in files:
      assert name.startswith('events.out.tfevents.'), name
      run = os.path.relpath(directory, root)
      for body in _records(os.path.join(directory, name)):
        event = event_pb2.Event.FromString(body)
        for value in event.summary.value:
          runs.setdefault(run, []).append((value.tag, event.step, value.simple_value))
  return runs


def _history():
  acc = np.arange(12, dtype=np.float64).reshape(3, 2, 2) / 7 + 0.1  # not exact in float32
  loss = -np.arange(12, dtype=np.float64).reshape(3, 2, 2) * 1e3 - 1 / 3
  loss[1, 1, 0] = np.nan
  return History(rounds=[0, 5, 10], metrics={'test_accuracy': acc, 'train_loss': loss},
                 seeds=[0, 7], grid=[{'client_lr': 0.01}, {'client_lr': 0.1}])


def _expected(history, runs):
  expected = {}
  for g, point in enumerate(history.grid):
    for s, seed in enumerate(history.seeds):
      rows = []
      for e, rnd in enumerate(history.rounds):
        for name in ('test_accuracy', 'train_loss'):
          rows.append((name, int(rnd), float(np.float32(history.metrics[name][e, g, s]))))
      expected[runs[g, seed]] = rows
  return expected


def _same(got, expected):
  assert got.keys() == expected.keys()
  for run, rows in expected.items():
    assert len(got[run]) == len(rows), run
    for (tag, step, value), (tag0, step0, value0) in zip(sorted(got[run]), sorted(rows)):
      assert (tag, step) == (tag0, step0), run
      assert value == value0 or (math.isnan(value) and math.isnan(value0)), (run, tag, step)


def test_every_value_at_its_round(tmp_path):
  history = _history()
  written = tensorboard.write(str(tmp_path), history)
  names = {(0, 0): 'client_lr=0.01/seed_0', (0, 7): 'client_lr=0.01/seed_7',
           (1, 0): 'client_lr=0.1/seed_0', (1, 7): 'client_lr=0.1/seed_7'}
  root = tmp_path / 'tensorboard'
  assert written == [str(root / n) for n in names.values()]
  got = _read_runs(root)
  _same(got, _expected(history, names))
  assert any(math.isnan(v) for v in [r[2] for r in got['client_lr=0.1/seed_0']])


def test_second_write_replaces_the_first(tmp_path):
  tensorboard.write(str(tmp_path), _history())
  grid = _history()
  history = History(rounds=grid.rounds, seeds=grid.seeds,
                    metrics={k: v[:, 1:] + 1 for k, v in grid.metrics.items()})
  written = tensorboard.write(str(tmp_path), history)
  root = tmp_path / 'tensorboard'
  names = {(0, 0): 'seed_0', (0, 7): 'seed_7'}
  assert written == [str(root / n) for n in names.values()]
  _same(_read_runs(root), _expected(history, names))
  assert sorted(os.listdir(tmp_path)) == ['tensorboard']  # no temporary left behind


def test_run_names_are_distinct_and_safe():
  history = History(rounds=[1], metrics={}, seeds=[3],
                    grid=[{'opt': 'a/b'}, {'opt': 'a_b'}, {'opt': 'x', 'lr': np.float32(0.5)}])
  assert tensorboard.run_names(history) == [['0_opt=a_b/seed_3'], ['1_opt=a_b/seed_3'],
                                            ['2_opt=x,lr=0.5/seed_3']]


def test_missing_tensorboardx_is_a_one_line_usage_error(tmp_path, monkeypatch):
  monkeypatch.setitem(sys.modules, 'tensorboardX', None)  # makes the import fail
  with pytest.raises(UsageError) as error:
    tensorboard.write(str(tmp_path), _history())
  message = str(error.value)
  assert '\n' not in message and 'pip install tensorboardX' in message
  assert not os.listdir(tmp_path)
