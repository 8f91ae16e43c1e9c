"""Tests for fedjax_bench.output.results: atomic writes, the summary contract, csv and plots."""

import csv
import json
import os

import numpy as np
import pytest

from fedjax_bench.output import results
from fedjax_bench.errors import UsageError

PNG_MAGIC = b'\x89PNG\r\n\x1a\n'


def _history(grid=None) -> results.History:
  """E=3 evaluations at rounds 10, 20, 30; S=2 seeds [5, 7]; G=len(grid)."""
  grid = grid or [{}]
  g = len(grid)
  acc = np.zeros((3, g, 2))
  loss = np.zeros((3, g, 2))
  for p in range(g):
    # Seed 5 then seed 7; grid point p adds 0.1 * p.
    acc[:, p, 0] = np.array([0.1, 0.5, 0.7]) + 0.1 * p
    acc[:, p, 1] = np.array([0.2, 0.6, 0.9]) + 0.1 * p
    loss[:, p, 0] = [2.0, 1.0, 0.5]
    loss[:, p, 1] = [2.2, 1.2, 0.7]
  return results.History(
      rounds=np.array([10, 20, 30]),
      metrics={'train_loss': loss, 'test_accuracy': acc, 'drift': loss * 2,
               'test_loss': loss + 1},
      seeds=[5, 7],
      grid=grid)


def _timing():
  return {'rounds_per_second': 12.5, 'wall_seconds': 3.0, 'compile_seconds': 1.5}


def _leftovers(directory, name):
  return [f for f in os.listdir(directory) if f != name]


# --- atomic writes ----------------------------------------------------------


def test_atomic_write_replaces_and_leaves_no_tmp(tmp_path):
  path = tmp_path / 'a.txt'
  results.atomic_write_text(path, 'old')
  results.atomic_write_text(path, 'new')
  assert path.read_text() == 'new'
  results.atomic_write_bytes(path, b'\x00\x01')
  assert path.read_bytes() == b'\x00\x01'
  assert _leftovers(tmp_path, 'a.txt') == []


def test_atomic_write_json_converts_numpy(tmp_path):
  path = tmp_path / 'a.json'
  results.atomic_write_json(path, {'b': np.float32(0.5), 'a': np.arange(3),
                                   'c': np.int64(4), 'd': float('nan')})
  text = path.read_text()
  assert json.loads(text) == {'b': 0.5, 'a': [0, 1, 2], 'c': 4, 'd': None}
  assert text.index('"b"') < text.index('"a"')  # sort_keys=False
  assert '\n  "b"' in text  # indent=2


def test_interrupted_json_write_keeps_previous_file(tmp_path):
  path = tmp_path / 'a.json'
  results.atomic_write_json(path, {'x': 1})
  with pytest.raises(TypeError):
    results.atomic_write_json(path, {'x': object()})
  assert json.loads(path.read_text()) == {'x': 1}
  assert _leftovers(tmp_path, 'a.json') == []


def test_failure_after_tmp_created_keeps_previous_file(tmp_path, monkeypatch):
  path = tmp_path / 'a.txt'
  results.atomic_write_text(path, 'old')

  def boom(src, dst):
    raise OSError('disk full')

  monkeypatch.setattr(results.os, 'replace', boom)
  with pytest.raises(OSError):
    results.atomic_write_text(path, 'new')
  assert path.read_text() == 'old'
  assert _leftovers(tmp_path, 'a.txt') == []


# --- summarize --------------------------------------------------------------


def test_summarize_last_evaluation_by_default():
  final = results.summarize(_history(), final_window=None)
  acc = final['test_accuracy']
  assert acc['per_seed'] == pytest.approx([0.7, 0.9])  # seed order [5, 7]
  assert acc['mean'] == pytest.approx(0.8)
  assert acc['std'] == pytest.approx(0.1)  # population std, ddof=0
  assert results.summarize(_history(), final_window=0) == final
  assert list(final) == ['test_accuracy', 'test_loss', 'train_loss', 'drift']


def test_summarize_final_window_uses_rounds_after_last_minus_window():
  # Window 15: rounds > 30 - 15 = 15, i.e. rounds 20 and 30.
  acc = results.summarize(_history(), final_window=15)['test_accuracy']
  assert acc['per_seed'] == pytest.approx([0.6, 0.75])
  assert acc['mean'] == pytest.approx(0.675)
  assert acc['std'] == pytest.approx(0.075)
  # Window 20: rounds > 10, still rounds 20 and 30 (strict inequality).
  acc20 = results.summarize(_history(), final_window=20)['test_accuracy']
  assert acc20['per_seed'] == pytest.approx([0.6, 0.75])
  # Window 100 covers all three evaluations.
  acc100 = results.summarize(_history(), final_window=100)['test_accuracy']
  assert acc100['per_seed'] == pytest.approx([1.3 / 3, 1.7 / 3])


def test_summarize_nan_seed_is_null_and_excluded():
  h = _history()
  h.metrics['test_accuracy'][-1, 0, 0] = np.nan
  h.metrics['train_loss'][-1, 0, 1] = np.inf
  final = results.summarize(h, final_window=None)
  acc = final['test_accuracy']
  assert acc['per_seed'][0] is None
  assert acc['per_seed'][1] == pytest.approx(0.9)
  assert acc['mean'] == pytest.approx(0.9)
  assert acc['std'] == pytest.approx(0.0)
  assert final['train_loss']['per_seed'] == [pytest.approx(0.5), None]
  json.dumps(final, allow_nan=False)  # no NaN leaks into the JSON


def test_summarize_all_nan_gives_null_mean():
  h = _history()
  h.metrics['test_loss'][:] = np.nan
  loss = results.summarize(h, final_window=None)['test_loss']
  assert loss == {'mean': None, 'std': None, 'per_seed': [None, None]}


def test_summarize_grid_gives_one_object_per_point():
  grid = [{'client_lr': 0.1}, {'client_lr': 0.3}]
  final = results.summarize(_history(grid), final_window=None)
  acc = final['test_accuracy']
  assert isinstance(acc, list) and len(acc) == 2
  assert [p['hparams'] for p in acc] == grid
  assert acc[0]['per_seed'] == pytest.approx([0.7, 0.9])
  assert acc[1]['per_seed'] == pytest.approx([0.8, 1.0])
  assert acc[1]['mean'] == pytest.approx(0.9)
  assert acc[1]['std'] == pytest.approx(0.1)


def test_history_rejects_wrong_shape():
  with pytest.raises(ValueError, match='shape'):
    results.History(rounds=[1, 2], metrics={'a': np.zeros((2, 1, 3))}, seeds=[0, 1])


# --- metrics.csv ------------------------------------------------------------


def test_metrics_csv_round_trips(tmp_path):
  path = tmp_path / 'metrics.csv'
  results.write_metrics_csv(path, _history())
  with open(path, newline='') as f:
    rows = list(csv.reader(f))
  assert rows[0] == ['round', 'seed', 'test_accuracy', 'test_loss', 'train_loss', 'drift']
  assert len(rows) == 1 + 3 * 2
  assert rows[1][:3] == ['10', '5', '0.1']
  with open(path, newline='') as f:
    last = list(csv.DictReader(f))[-1]
  assert (int(last['round']), int(last['seed'])) == (30, 7)
  assert float(last['test_accuracy']) == pytest.approx(0.9)


def test_metrics_csv_with_grid_has_hparam_columns(tmp_path):
  path = tmp_path / 'metrics.csv'
  grid = [{'client_lr': 0.1}, {'client_lr': 0.3}]
  results.write_metrics_csv(path, _history(grid))
  with open(path, newline='') as f:
    rows = list(csv.DictReader(f))
  assert list(rows[0])[:3] == ['round', 'seed', 'client_lr']
  assert len(rows) == 3 * 2 * 2
  assert {float(r['client_lr']) for r in rows} == {0.1, 0.3}


def test_to_rows_matches_csv_layout():
  rows = _history().to_rows()
  assert len(rows) == 6
  assert list(rows[0]) == ['round', 'seed', 'test_accuracy', 'test_loss', 'train_loss',
                           'drift']
  assert rows[0]['round'] == 10 and rows[1]['seed'] == 7


# --- write_run / read_summary / plots --------------------------------------


def test_write_run_writes_files_and_contract(tmp_path):
  out = tmp_path / 'run' / 'nested'
  config = {'algo': 'fedavg', 'rounds': 30, 'env': results.environment_info()}
  summary = results.write_run(out, config=config, history=_history(), final_window=None,
                              timing=_timing(), extra={'note': 'x'})
  assert sorted(os.listdir(out)) == ['config.json', 'curves.png', 'metrics.csv',
                                     'summary.json']
  assert json.loads((out / 'config.json').read_text()) == json.loads(json.dumps(config))
  on_disk = results.read_summary(out)
  assert on_disk == summary
  assert on_disk['config']['algo'] == 'fedavg'
  for key, value in _timing().items():
    assert on_disk[key] == value
  assert on_disk['note'] == 'x'
  for metric in ('test_accuracy', 'test_loss', 'train_loss', 'drift'):
    assert set(on_disk['final'][metric]) == {'mean', 'std', 'per_seed'}
    assert len(on_disk['final'][metric]['per_seed']) == 2
  assert on_disk['final']['test_accuracy']['mean'] == pytest.approx(0.8)


def test_write_run_grid(tmp_path):
  grid = [{'client_lr': 0.1}, {'client_lr': 0.3}]
  summary = results.write_run(tmp_path, config={}, history=_history(grid),
                              final_window=15, timing=_timing())
  acc = results.read_summary(tmp_path)['final']['test_accuracy']
  assert summary['final']['test_accuracy'] == acc
  assert [p['hparams'] for p in acc] == grid
  assert acc[1]['per_seed'] == pytest.approx([0.7, 0.85])


def test_write_run_unwritable_dir_raises_usage_error(tmp_path):
  blocker = tmp_path / 'file'
  blocker.write_text('not a dir')
  with pytest.raises(UsageError) as info:
    results.write_run(blocker / 'out', config={}, history=_history(), final_window=None,
                      timing=_timing())
  assert '\n' not in str(info.value)


def test_plot_is_a_valid_png(tmp_path):
  path = tmp_path / 'p.png'
  results.plot_curves(path, _history([{'lr': 1}, {'lr': 2}]), title='t')
  data = path.read_bytes()
  assert data[:8] == PNG_MAGIC
  assert len(data) > 5000


def test_plot_custom_x_and_nan(tmp_path):
  h = _history()
  h.metrics['test_accuracy'][:, 0, 0] = np.nan
  path = tmp_path / 'p.png'
  results.plot_curves(path, h, metrics=('test_accuracy', 'missing'),
                      x=np.array([1.0, 2.0, 3.0]), xlabel='seconds')
  assert path.read_bytes()[:8] == PNG_MAGIC


def _plotted(monkeypatch, history):
  """(panel titles, first panel's legend labels, first panel's filled bands)."""
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  figures = []
  monkeypatch.setattr(results, 'save_figure', lambda path, fig, dpi=0: figures.append(fig))
  results.plot_curves('unused.png', history)
  axes = figures[0].axes
  out = ([ax.get_title() for ax in axes],
         [t.get_text() for t in axes[0].get_legend().get_texts()],
         len(axes[0].collections))
  plt.close(figures[0])
  return out


def test_plot_titles_and_legend_count_seeds(monkeypatch):
  assert _plotted(monkeypatch, _history()) == (
      ['test_accuracy (2 seeds)', 'train_loss (2 seeds)'], ['mean (±1 std over seeds)'], 1)
  h = _history()
  one = results.History(rounds=h.rounds, metrics={k: v[:, :, 1:] for k, v in h.metrics.items()},
                        seeds=[7])
  assert _plotted(monkeypatch, one) == (
      ['test_accuracy (1 seed)', 'train_loss (1 seed)'], ['seed 7'], 0)


def _figure(monkeypatch, history, **kwargs):
  """The figure `plot_curves` would save (close it with plt.close)."""
  figures = []
  monkeypatch.setattr(results, 'save_figure', lambda path, fig, dpi=0: figures.append(fig))
  results.plot_curves('unused.png', history, **kwargs)
  return figures[0]


def _sweep_history(grid, final):
  """2 evaluations x 2 seeds; at the last one, test_accuracy is final[g] -/+ 0.01."""
  acc = np.zeros((2, len(grid), 2))
  acc[1] = np.asarray(final)[:, None] + np.array([-0.01, 0.01])
  return results.History(rounds=[0, 10], metrics={'test_accuracy': acc, 'train_loss': 1 - acc},
                         seeds=[0, 1], grid=grid)


def test_a_sweep_figure_has_the_final_metric_panel_and_the_legend_outside(monkeypatch):
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  grid = [{'client_lr': v} for v in (0.01, 0.1, 1.0)]
  fig = _figure(monkeypatch, _sweep_history(grid, [0.5, 0.8, 0.6]))
  curves, _, sweep = fig.axes
  assert sweep.get_title() == 'final test_accuracy by client_lr'
  assert sweep.get_xlabel() == 'client_lr' and sweep.get_xscale() == 'log'  # 2 decades
  (bars,) = sweep.containers  # one line, with seed-spread error bars
  line, _, (yerr,) = bars
  assert line.get_xdata().tolist() == [0.01, 0.1, 1.0]
  assert line.get_ydata().tolist() == pytest.approx([0.5, 0.8, 0.6])
  assert [seg[:, 1].tolist() for seg in yerr.get_segments()][1] == pytest.approx([0.79, 0.81])
  assert [t.get_text() for t in sweep.get_legend().get_texts()] == ['best: client_lr=0.1']
  # No legend over the curves: one for the figure, the best point named.
  assert curves.get_legend() is None and len(fig.legends) == 1
  assert [t.get_text() for t in fig.legends[0].get_texts()] == [
      'client_lr=0.01', 'client_lr=0.1 (best)', 'client_lr=1']
  assert [l.get_linewidth() for l in curves.get_lines()][1] > curves.get_lines()[0].get_linewidth()
  plt.close(fig)


def test_a_two_axis_sweep_panel_has_a_line_per_value_of_the_other_axis(monkeypatch):
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  grid = [{'server_lr': a, 'client_lr': b} for a in (0.5, 1.0) for b in (0.02, 0.05, 0.1)]
  fig = _figure(monkeypatch, _sweep_history(grid, [0.5, 0.6, 0.7, 0.4, 0.9, 0.3]),
                final_window=10)
  sweep = fig.axes[-1]
  assert sweep.get_xlabel() == 'client_lr' and sweep.get_xscale() == 'linear'  # < a decade
  assert 'last 10 rounds' in sweep.get_ylabel()
  np.testing.assert_allclose([np.asarray(c[0].get_ydata(), float) for c in sweep.containers],
                             [[0.5, 0.6, 0.7], [0.4, 0.9, 0.3]])
  legend = sweep.get_legend()
  assert legend.get_title().get_text() == 'server_lr'
  assert [t.get_text() for t in legend.get_texts()] == [
      'server_lr=0.5', 'server_lr=1', 'best: server_lr=1,\nclient_lr=0.05']
  plt.close(fig)


def test_the_best_point_is_the_lowest_loss_without_accuracy(monkeypatch):
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  h = _sweep_history([{'lr': 1.0}, {'lr': 2.0}], [0.2, 0.1])
  h.metrics['optimality_gap'] = h.metrics.pop('test_accuracy')
  assert results.best_point({'optimality_gap': [0.2, 0.1]}) == ('optimality_gap', 1)
  assert results.best_point({'test_accuracy': [None, float('nan')],
                             'train_loss': [0.3, 0.2]}) == ('train_loss', 1)
  assert results.best_point({'test_accuracy': [0.2, 0.1]}) == ('test_accuracy', 0)
  fig = _figure(monkeypatch, h, metrics=('optimality_gap',))
  assert fig.axes[-1].get_title() == 'final optimality_gap by lr'
  assert [t.get_text() for t in fig.axes[-1].get_legend().get_texts()] == ['best: lr=2']
  plt.close(fig)


def test_one_grid_point_has_no_sweep_panel(monkeypatch):
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig = _figure(monkeypatch, _sweep_history([{'lr': 1.0}], [0.5]))
  assert [ax.get_title() for ax in fig.axes] == ['test_accuracy (2 seeds)',
                                                  'train_loss (2 seeds)']
  plt.close(fig)


def test_write_run_png_valid(tmp_path):
  results.write_run(tmp_path, config={}, history=_history(), final_window=None,
                    timing=_timing())
  data = (tmp_path / 'curves.png').read_bytes()
  assert data[:8] == PNG_MAGIC and len(data) > 5000


def test_environment_info_fields():
  info = results.environment_info()
  for key in ('python', 'jax', 'jaxlib', 'flax', 'optax', 'numpy', 'platform', 'devices',
              'device_count', 'host'):
    assert key in info
  assert info['device_count'] == len(info['devices'])


def test_atomic_write_gives_ordinary_permissions(tmp_path):
  path = tmp_path / 'p.txt'
  results.atomic_write_text(path, 'x')
  mask = os.umask(0)
  os.umask(mask)
  assert (path.stat().st_mode & 0o777) == (0o666 & ~mask)


