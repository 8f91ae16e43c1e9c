"""The Metric options AREA's claims need (fedjax_bench/claims/verdicts.py): time read from
a clock metric, log10, the band around the seed mean, a swept setting's value, and the
tuned grid point (benchmarks/papers/area.py); and the declaration itself."""

import math
import os

import numpy as np
import pytest

from fedjax_bench.claims import Difference, Metric
from fedjax_bench.claims import verdicts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAN = None  # JSON's NaN


def record(curves, times, grid=None, rounds=None):
  """A run record: curves[g][s] per evaluation and times[g][s] its cum_time (the round-0
  evaluation's clock is NaN, as the engine writes it)."""
  curves = np.asarray(curves, dtype=np.float64)  # [G, S, E]
  times = np.asarray(times, dtype=np.float64)
  g, s, e = curves.shape
  to_json = lambda a: [[[None if np.isnan(x) else float(x) for x in row] for row in point]
                       for point in np.moveaxis(a, 2, 0)]
  times = times.copy()
  times[:, :, 0] = np.nan
  return {"seeds": list(range(s)), "rounds": list(rounds or range(0, 10 * e, 10)),
          "grid": grid or [], "metrics": {"gap": to_json(curves), "cum_time": to_json(times)}}


def test_clock_reads_time_not_rounds():
  # Two seeds, five evaluations; seed 1's clock runs half as fast.
  rec = {"r": record([[[4, 3, 2, 1, 1], [4, 3, 2, 1, 1]]],
                     [[[0, 1, 2, 3, 3], [0, 0.5, 1, 1.5, 2]]])}
  at = lambda t: Metric("r", "gap", clock="cum_time", at=t).values(rec)
  np.testing.assert_allclose(at(1.0), [3, 2])    # the last evaluation at or before t
  np.testing.assert_allclose(at(0.2), [4, 4])
  np.testing.assert_allclose(at(9.0), [1, 1])
  # Time average (trapezoids) over the last 2 time units: seed 0 [1, 3] (the evaluation
  # past the horizon repeats t = 3 and weighs nothing), seed 1 [0, 2].
  np.testing.assert_allclose(Metric("r", "gap", clock="cum_time", window=2).values(rec),
                             [(2.5 + 1.5) / 2, (3.5 + 2.5 + 1.5 + 1) / 4])
  # A window past the start is the whole run; window 0 the last evaluation.
  whole = Metric("r", "gap", clock="cum_time", window=100).values(rec)
  np.testing.assert_allclose(whole, [(3.5 + 2.5 + 1.5) / 3, (3.5 + 2.5 + 1.5 + 1) / 4])
  np.testing.assert_allclose(Metric("r", "gap", clock="cum_time").values(rec), [1, 1])
  with pytest.raises(ValueError, match="reach"):
    Metric("r", "gap", clock="cum_time", reach=2).values(rec)


def test_a_diverged_seed_is_nan_on_the_clock():
  rec = {"r": record([[[4, 3, 2], [4, 3, 2]]], [[[0, 1, 2], [0, 1, 2]]])}
  rec["r"]["metrics"]["cum_time"][2][0][1] = NAN
  rec["r"]["metrics"]["gap"][2][0][1] = NAN
  out = Metric("r", "gap", clock="cum_time", at=0.5).values(rec)
  assert out[0] == 4 and np.isnan(out[1])


def test_log10_with_a_floor_and_the_band_around_the_seed_mean():
  rec = {"r": record([[[1, 100], [1, 1e-12], [1, 1]]], [[[0, 1]] * 3])}
  np.testing.assert_allclose(Metric("r", "gap", log_floor=1e-8).values(rec), [2, -8, 0])
  np.testing.assert_allclose(Metric("r", "gap", log_floor=1e-8, scale=10).values(rec),
                             [3, -8, 1])  # scaled, then floored
  # Each seed's distance from the seed mean of log10 (mean -2): 4, 6, 2.
  np.testing.assert_allclose(Metric("r", "gap", log_floor=1e-8, spread=True).values(rec),
                             [4, 6, 2])
  m = Metric("r", "gap", log_floor=1e-8, spread=True)
  assert m.describe() == "r: |log10 gap − its mean over seeds| (final)"


def test_a_swept_setting_reads_its_grid_value():
  rec = {"r": record([[[1, 1]], [[1, 1]]], [[[0, 1]]] * 2,
                     grid=[{"client_lr": 0.1}, {"client_lr": 100.0}])}
  np.testing.assert_allclose(Metric("r", "client_lr", point=1).values(rec), [100.0])
  np.testing.assert_allclose(Metric("r", "client_lr", log_floor=1e-30).values(rec), [-1.0])
  with pytest.raises(ValueError, match="no metric or swept setting 'server_lr'"):
    Metric("r", "server_lr").values(rec)


def tuned_record():
  # Three grid points x three seeds; final gaps by point: the middle point has the
  # smallest seed mean (2) although seed 2 alone would pick the last point.
  finals = [[5, 5, 5], [1, 2, 3], [9, 9, 1]]
  curves = [[[10, f] for f in point] for point in finals]
  return {"r": record(curves, [[[0, 1]] * 3] * 3,
                      grid=[{"client_lr": a} for a in (1.0, 10.0, 100.0)])}


def test_the_tuned_point_is_the_smallest_seed_mean():
  rec = tuned_record()
  tune = Metric("r", "gap")
  np.testing.assert_allclose(Metric("r", "gap", tune=tune).values(rec), [1, 2, 3])
  np.testing.assert_allclose(Metric("r", "client_lr", tune=tune).values(rec), [10, 10, 10])
  # Each seed's own choice: seeds 0 and 1 the middle point, seed 2 the last.
  np.testing.assert_allclose(Metric("r", "client_lr", tune=tune, tune_each_seed=True)
                             .values(rec), [10, 10, 100])
  assert "at the grid point with the smallest seed-mean gap (final)" in \
      Metric("r", "client_lr", tune=tune).describe()


def test_tuning_excludes_diverged_points_and_breaks_ties_toward_the_later_point():
  rec = tuned_record()
  rec["r"]["metrics"]["gap"][1][1][0] = NAN  # the middle point diverged on seed 0
  tune = Metric("r", "gap")
  np.testing.assert_allclose(Metric("r", "client_lr", tune=tune).values(rec), [1] * 3)
  np.testing.assert_allclose(Metric("r", "client_lr", tune=tune, tune_each_seed=True)
                             .values(rec), [1, 10, 100])
  tied = tuned_record()
  tied["r"]["metrics"]["gap"][1][0] = [2.0, 2.0, 2.0]
  tied["r"]["metrics"]["gap"][1][2] = [2.0, 2.0, 2.0]
  np.testing.assert_allclose(Metric("r", "client_lr", tune=tune).values(tied), [100] * 3)
  for g in range(3):  # every point diverged: no value
    tied["r"]["metrics"]["gap"][1][g][0] = NAN
  out = Difference(Metric("r", "gap", tune=tune), Metric("r", "gap")).outcome(tied)
  assert out.verdict == verdicts.NOT_REPRODUCED and out.ours == "n/a"


def test_a_tune_of_another_run_reads_this_run_at_the_same_swept_values():
  # The destabilize rows: the 50-step run read at the stepsize tuned for the one-step run.
  one = tuned_record()["r"]  # tunes to lr 10 (seed means 5, 2, 6.33)
  other = tuned_record()["r"]
  other["grid"] = [{"client_lr": a} for a in (3.0, 10.0, 30.0)]
  other["metrics"]["gap"] = [[[10, 10, 10], [7, 8, 9], [0, 0, 0]], [[1, 1, 1], [4, 5, 6],
                                                                    [0, 0, 0]]]
  recs = {"one": one, "other": other}
  at = Metric("other", "gap", tune=Metric("one", "gap"))
  np.testing.assert_allclose(at.values(recs), [4, 5, 6])  # other's point of lr 10
  assert "of one (its swept values, read here)" in at.describe()
  recs["other"]["grid"] = [{"client_lr": a} for a in (3.0, 30.0, 100.0)]
  assert np.isnan(at.values(recs)).all()  # no point of lr 10 here: no value
  # Tuned on other seeds (the leaderboard's tuning seeds): the one point picked there.
  recs["other"]["grid"] = [{"client_lr": a} for a in (3.0, 10.0, 30.0)]
  recs["other"]["seeds"] = [5, 6, 7]
  np.testing.assert_allclose(at.values(recs), [4, 5, 6])
  # Each seed's own point needs the same seeds.
  with pytest.raises(ValueError, match="do not share seeds"):
    Metric("other", "gap", tune=Metric("one", "gap"), tune_each_seed=True).values(recs)


def test_tune_below_picks_the_last_point_under_the_value():
  """The largest stable stepsize: the last grid point whose final gap is below a value."""
  rec = tuned_record()  # finals per point (lr 1, 10, 100): [5, 5, 5], [1, 2, 3], [9, 9, 1]
  tune = Metric("r", "gap")
  lr = lambda below, each: Metric("r", "client_lr", tune=tune, tune_below=below,
                                  tune_each_seed=each).values(rec)
  np.testing.assert_allclose(lr(4.0, True), [10, 10, 100])
  np.testing.assert_allclose(lr(4.0, False), [10, 10, 10])  # seed means 5, 2, 6.33
  np.testing.assert_allclose(lr(9.5, True), [100, 100, 100])
  assert np.isnan(lr(0.5, True)).all()  # no point is below: no value
  assert "at each seed's last grid point with its gap (final) < 4" in \
      Metric("r", "client_lr", tune=tune, tune_below=4.0, tune_each_seed=True).describe()


def test_the_old_options_read_and_describe_as_before():
  rec = {"r": {"seeds": [0, 1], "rounds": [10, 20, 30, 40],
               "metrics": {"m": [[[0.1, 0.2]], [[0.3, 0.2]], [[0.5, 0.4]], [[0.7, 0.4]]]}}}
  np.testing.assert_allclose(Metric("r", "m", window=20, scale=100).values(rec), [60, 40])
  assert Metric("r", "m", window=50).describe() == "r: m (mean of the last 50 rounds)"
  assert Metric("r", "m", at=20).describe() == "r: m (at round 20)"
  assert Metric("r", "m", reach=0.3).describe() == "r: first round with m ≥ 0.3"


def _area():
  from benchmarks.papers import area
  return area


def test_every_method_of_a_setting_is_tuned_on_the_same_grid_and_seeds():
  area = _area()
  runs = area.PAPER.runs
  by_setting = {}
  for r in runs:
    setting = "fig4" if r.name.startswith("fig4") else r.name[:-len(r.settings["algo"]) - 1]
    by_setting.setdefault(setting, []).append(r)
  for setting, rs in by_setting.items():
    assert len({(tuple(r.sweep["client_lr"]), r.seeds) for r in rs}) == 1, setting
    assert list(rs[0].sweep["client_lr"]) == sorted(rs[0].sweep["client_lr"]), setting
  assert {r.seeds for r in runs if r.name.startswith("fig")} == {area.SEEDS}


def test_the_declaration_reads_declared_runs():
  area = _area()
  counts = {v: 0 for v in ("attempted", "not attempted")}
  for c in area.PAPER.claims:
    counts["not attempted" if c.test is None else "attempted"] += 1
  assert counts["attempted"] > 100 and counts["not attempted"] >= 8
  fig1 = {c.id for c in area.PAPER.claims if c.id.startswith("F1-uniform")}
  assert {"F1-uniform-final-fedbuff", "F1-uniform-speed-fedbuff"} <= fig1
  assert math.isclose(area.claims()[0].test.margin, 0.0)


def test_the_variance_reading_twins_the_standard_deviation_reading():
  """Issue 41: each N(10, 5) run of a figure in VAR_FIGS has a twin that reads 5 as the
  variance (std √5) with the same seeds and grid, and each row that reads those runs (and
  only runs of those figures) a -var twin with the same statistic and margin on the twins."""
  area = _area()
  runs = {r.name: r for r in area.PAPER.runs}
  twins = {n: n.replace("_normalvar_", "_normal_") for n in runs if "_normalvar_" in n}
  assert {int(n[3:].split("_")[0]) for n in twins} == set(area.VAR_FIGS)
  for var, sd in twins.items():
    assert (runs[var].seeds, runs[var].sweep) == (runs[sd].seeds, runs[sd].sweep)
    assert runs[var].settings == {**runs[sd].settings, "async_rate_std": 5 ** 0.5}
  claims = {c.id: c for c in area.PAPER.claims}
  var = {i for i in claims if i.endswith("-var")}
  figs = tuple(f"fig{f}_" for f in area.VAR_FIGS)
  reads_sd = {i for i, c in claims.items() if c.test is not None and i not in var
              and set(c.test.runs()) & set(twins.values())
              and all(n.startswith(figs) for n in c.test.runs())}
  assert {i[:-len("-var")] for i in var} == reads_sd
  for i in var:
    assert repr(claims[i].test).replace("_normalvar_", "_normal_") == \
        repr(claims[i[:-len("-var")]].test)


def test_the_exact_gradient_runs_hold_every_client_in_one_batch():
  """E2/E3 are exact local gradients only if the batch holds each client's examples."""
  area = _area()
  from fedjax_bench import data
  try:
    counts = {n: data.load("mnist", num_clients=n, partition="noniid", pool_size=area.E_POOL,
                           shard_size=area.E_POOL // (2 * n), partition_seed=0).train.counts
              for n in area.E_BATCH}
  except Exception as e:  # no local MNIST
    pytest.skip(f"MNIST not available locally: {e}")
  for n, c in counts.items():
    assert int(np.max(c)) <= area.E_BATCH[n], n


@pytest.mark.filterwarnings("ignore:No artists with labels")  # ax.plot is replaced
def test_a_figure_curve_is_drawn_at_the_tuned_point(tmp_path, monkeypatch):
  import matplotlib.axes
  from fedjax_bench.claims import Curve, Figure, Paper, Run, plot
  drawn = []
  monkeypatch.setattr(matplotlib.axes.Axes, "plot",
                      lambda self, x, y, **kw: drawn.append(np.asarray(y)))
  tune = Metric("r", "gap")
  fig = Figure("f.png", "t", (Curve("r", "common", "gap", tune=tune),
                              Curve("r", "own", "gap", tune=tune, tune_each_seed=True),
                              Curve("r", "point 2", "gap", point=2)), ylabel="gap", log=True)
  paper = Paper(name="toy", title="t", source="s", runs=(Run("r", {}),), claims=(),
                figures=(fig,))
  plot(paper, tuned_record(), str(tmp_path))
  np.testing.assert_allclose(drawn[0], [10, 2])   # the middle point's seed mean
  np.testing.assert_allclose(drawn[1], [10, 4 / 3])  # seeds 0, 1 middle, seed 2 last: 1, 2, 1
  np.testing.assert_allclose(drawn[2], [10, 19 / 3])
  assert (tmp_path / "toy" / "f.png").exists()


@pytest.mark.filterwarnings("ignore:No artists with labels")
def test_a_clock_figure_reads_every_seed_on_one_time_grid(tmp_path, monkeypatch):
  import matplotlib.axes
  from fedjax_bench.claims import Curve, Figure, Paper, Run, plot
  drawn = []
  monkeypatch.setattr(matplotlib.axes.Axes, "plot",
                      lambda self, x, y, **kw: drawn.append((np.asarray(x), np.asarray(y))))
  # Seed 1's clock runs half as fast; seed 1 ends at time 2, seed 0 at 3.
  rec = {"r": record([[[100, 10, 1, 0.1, 0.1], [100, 1, 0.01, 1e-4, 1e-4]]],
                     [[[0, 1, 2, 3, 3], [0, 0.5, 1, 1.5, 2]]])}
  fig = Figure("f.png", "t", (Curve("r", "gap", "gap"),), ylabel="gap", log=True,
               geometric=True, clock="cum_time")
  paper = Paper(name="toy", title="t", source="s", runs=(Run("r", {}),), claims=(),
                figures=(fig,))
  plot(paper, rec, str(tmp_path))
  x, y = drawn[0]
  assert x[0] == 0 and x[-1] == 2.0  # up to the earliest seed's last time
  at = lambda t: y[np.searchsorted(x, t)]  # the first grid time at or after t
  np.testing.assert_allclose(at(0.0), 100)
  np.testing.assert_allclose(at(1.0), np.sqrt(10 * 0.01))  # seed 0 at 1: 10; seed 1: 0.01
  np.testing.assert_allclose(at(2.0), np.sqrt(1 * 1e-4))
  # A floor (the claims' log_floor): an exact 0 counts as the floor, not as -inf.
  rec["r"]["metrics"]["gap"][4][0][1] = 0.0  # seed 1's last evaluation
  floored = Figure("g.png", "t", fig.curves, log=True, geometric=True, floor=1e-2,
                   clock="cum_time")
  drawn.clear()
  plot(Paper(name="toy", title="t", source="s", runs=(Run("r", {}),), claims=(),
             figures=(floored,)), rec, str(tmp_path))
  x, y = drawn[0]
  np.testing.assert_allclose(y[-1], np.sqrt(1 * 1e-2))


def test_a_long_figure_title_is_wrapped_to_the_figure_width(tmp_path, monkeypatch):
  import matplotlib.axes
  from fedjax_bench.claims import Curve, Figure, Paper, Run, plot
  from fedjax_bench.claims.paper import TITLE_WIDTH
  titles = []
  monkeypatch.setattr(matplotlib.axes.Axes, "set_title",
                      lambda self, t, *a, **kw: titles.append(t))
  words = ("Built Shakespeare, 75 roles, char LSTM 2 x 32: each method at its tuned "
           "learning rate")
  short = "Figure 8, partial participation: m of 200, TopK 0.01"
  figs = tuple(Figure(f"f{i}.png", t, (Curve("r", "gap", "gap"),))
               for i, t in enumerate((words, short)))
  plot(Paper(name="toy", title="t", source="s", runs=(Run("r", {}),), claims=(),
             figures=figs), tuned_record(), str(tmp_path))
  assert titles[0] == ("Built Shakespeare, 75 roles, char LSTM 2 x 32: each method at its "
                       "tuned\nlearning rate")
  assert all(len(line) <= TITLE_WIDTH for line in titles[0].splitlines())
  assert titles[1] == short


def test_a_figure_leaves_a_gap_where_no_seed_has_a_number_without_a_warning(tmp_path,
                                                                         monkeypatch):
  import warnings
  import matplotlib.axes
  from fedjax_bench.claims import Curve, Figure, Paper, Run, plot
  lines, draw = [], matplotlib.axes.Axes.plot

  def plot_and_keep(self, x, y, *a, **kw):
    lines.append(np.asarray(y))
    return draw(self, x, y, *a, **kw)

  monkeypatch.setattr(matplotlib.axes.Axes, "plot", plot_and_keep)
  rec = tuned_record()
  gap = rec["r"]["metrics"]["gap"]  # [evaluation][point][seed]
  gap[0][0] = [NAN, NAN, NAN]  # no seed has round 0 (as a compression statistic)
  gap[1][0][1] = NAN  # one seed diverged
  figs = (Figure("f.png", "t", (Curve("r", "gap", "gap"),)),
          Figure("g.png", "t", (Curve("r", "gap", "gap"),), geometric=True, floor=1e-12))
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    plot(Paper(name="toy", title="t", source="s", runs=(Run("r", {}),), claims=(),
               figures=figs), rec, str(tmp_path))
  arith, geo = lines
  assert np.isnan(arith[0]) and np.isnan(geo[0])
  np.testing.assert_allclose(arith[1], (5 + 5) / 2)
  np.testing.assert_allclose(geo[1], 5.0)


def test_every_curve_of_a_crowded_figure_is_told_apart(tmp_path, monkeypatch):
  import matplotlib.axes
  from fedjax_bench.claims import Curve, Figure, Paper, Run, plot
  lines, draw = [], matplotlib.axes.Axes.plot

  def plot_and_keep(self, *a, **kw):
    drawn = draw(self, *a, **kw)
    lines.extend(drawn)
    return drawn

  monkeypatch.setattr(matplotlib.axes.Axes, "plot", plot_and_keep)
  fig = Figure("f.png", "t", tuple(Curve("r", f"method {i}", "gap") for i in range(14)))
  plot(Paper(name="toy", title="t", source="s", runs=(Run("r", {}),), claims=(),
             figures=(fig,)), tuned_record(), str(tmp_path))
  styles = {(line.get_color(), line.get_linestyle()) for line in lines}
  assert len(lines) == 14 and len(styles) == 14
