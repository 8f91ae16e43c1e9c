"""Claims as code: verdicts from declared tests, runs cached by configuration and code,
reports generated and checked (fedjax_bench/claims, benchmarks/claims.py)."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from fedjax_bench.claims import (AtLeast, AtMost, Claim, Curve, Difference, Equivalent, Exact,
                                 Figure, Metric, Paper, Run, render)
from fedjax_bench.claims import store, verdicts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Student t quantiles t_{0.975, df} from a printed table (df 2, 4).
T975 = {2: 4.302652729911275, 4: 2.7764451051977987}


def record(name, per_seed, seeds=None, rounds=(10, 20)):
  """A run record whose test_accuracy is per_seed at every evaluation."""
  v = np.asarray(per_seed, dtype=np.float64)
  seeds = list(seeds or range(v.size))
  return {"name": name, "seeds": seeds, "rounds": list(rounds),
          "metrics": {"test_accuracy": [[list(v)] for _ in rounds]}}


def records(**per_seed):
  return {k: record(k, v) for k, v in per_seed.items()}


def test_interval_is_the_student_t_interval_by_hand():
  v = [1.0, 2.0, 4.0]
  mean, lo, hi = verdicts.interval(v)
  sd = np.sqrt(((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 2)
  half = T975[2] * sd / np.sqrt(3)
  assert mean == pytest.approx(7 / 3)
  assert (lo, hi) == pytest.approx((7 / 3 - half, 7 / 3 + half))
  assert verdicts.interval([5.0])[1:] == (-np.inf, np.inf)


@pytest.mark.parametrize("a, margin, verdict", [
    ([3.0, 3.2, 2.8, 3.1, 2.9], 1.0, verdicts.REPRODUCED),    # the interval clears the margin
    ([3.0, 3.2, 2.8, 3.1, 2.9], 5.0, verdicts.NOT_REPRODUCED),  # wholly below it: smaller
    ([3.0, 3.2, 2.8, 3.1, 2.9], 3.0, verdicts.DIRECTION_ONLY),  # > 0, spans the margin
    ([1.0, -1.0, 2.0, -0.5, 0.8], 0.0, verdicts.DIRECTION_ONLY),  # mean > 0, interval spans 0
    ([-0.2, 0.1, -0.3, 0.2, -0.1], 0.0, verdicts.NOT_REPRODUCED),  # mean <= 0, spans 0
    ([-3.0, -3.2, -2.8, -3.1, -2.9], 0.0, verdicts.CONTRADICTED),  # interval < 0
])
def test_difference_verdicts(a, margin, verdict):
  recs = records(a=a, b=[0.0] * 5)
  out = Difference(Metric("a"), Metric("b"), margin).outcome(recs)
  assert out.verdict == verdict
  d = np.asarray(a)
  half = T975[4] * d.std(ddof=1) / np.sqrt(5)
  assert out.ours == f"{d.mean():+.2f}".replace("-", "−")
  assert out.interval == (f"[{d.mean() - half:+.2f}, {d.mean() + half:+.2f}]"
                          .replace("-", "−"))
  assert out.n == 5


def test_difference_is_paired_per_seed():
  # Unpaired, the seeds' spread (±10) hides the +1 gap; paired, every seed gains about 1.
  recs = records(a=[11.1, 21.0, 0.9], b=[10.0, 20.0, 0.0])
  out = Difference(Metric("a"), Metric("b"), 0.5).outcome(recs)
  assert out.verdict == verdicts.REPRODUCED and out.interval == "[+0.75, +1.25]"
  recs["b"]["seeds"] = [3, 4, 5]
  with pytest.raises(ValueError, match="do not share seeds"):
    Difference(Metric("a"), Metric("b")).outcome(recs)


@pytest.mark.parametrize("a, verdict", [
    ([0.1, -0.1, 0.05, 0.0, -0.05], verdicts.REPRODUCED),
    ([2.0, 2.1, 1.9, 2.0, 2.05], verdicts.CONTRADICTED),
    ([0.5, -0.5, 1.5, -1.0, 0.2], verdicts.NOT_REPRODUCED),
])
def test_equivalent_verdicts(a, verdict):
  recs = records(a=a, b=[0.0] * 5)
  assert Equivalent(Metric("a"), Metric("b"), 0.6).outcome(recs).verdict == verdict


def test_a_mean_above_the_margin_is_not_enough_the_whole_interval_must_clear_it():
  # E2a-fedbuff's shape: mean 0.66 above the margin log10 3 = 0.477, interval [0.35, 0.97].
  d = [0.50, 0.66, 0.82]
  recs = records(a=d, b=[0.0] * 3)
  mean, lo, hi = verdicts.interval(d)
  assert mean > np.log10(3) > lo > 0
  out = Difference(Metric("a"), Metric("b"), np.log10(3)).outcome(recs)
  assert out.verdict == verdicts.DIRECTION_ONLY
  assert Difference(Metric("a"), Metric("b"), 0.2).outcome(recs).verdict == verdicts.REPRODUCED


def test_an_interval_wholly_below_the_claimed_size_is_not_reproduced_whatever_its_sign():
  # Ex2-p0.1's shape: the paper claims more than 10 pp; we measure +0.18 [−0.46, +0.81].
  recs = records(a=[0.0, 0.18, 0.36], b=[0.0] * 3)
  assert Difference(Metric("a"), Metric("b"), 10.0).outcome(recs).verdict == \
      verdicts.NOT_REPRODUCED
  assert Difference(Metric("a"), Metric("b")).outcome(recs).verdict == verdicts.DIRECTION_ONLY
  # A size the paper states above our margin: T5-R3-hv-sign-degrades, margin 1, claimed
  # 11.56, measured +0.93 [−3.99, +5.85]; an interval clear of the margin but wholly below
  # the claimed size is not reproduced either.
  recs = records(a=[-1.5, 0.93, 3.36], b=[0.0] * 3)
  assert Difference(Metric("a"), Metric("b"), 1.0, claimed=11.56).outcome(recs).verdict == \
      verdicts.NOT_REPRODUCED
  assert Difference(Metric("a"), Metric("b"), 1.0).outcome(recs).verdict == \
      verdicts.DIRECTION_ONLY
  clear = records(a=[3.0, 3.2, 2.8, 3.1, 2.9], b=[0.0] * 5)
  assert Difference(Metric("a"), Metric("b"), 1.0, claimed=11.56).outcome(clear).verdict == \
      verdicts.NOT_REPRODUCED
  assert Difference(Metric("a"), Metric("b"), 1.0, claimed=3.1).outcome(clear).verdict == \
      verdicts.DIRECTION_ONLY  # above the margin, but the claimed 3.1 inside the interval
  assert Difference(Metric("a"), Metric("b"), 1.0, claimed=2.5).outcome(clear).verdict == \
      verdicts.REPRODUCED  # the whole interval above the claimed size
  below_zero = records(a=[-3.0, -3.2, -2.8], b=[0.0] * 3)  # below 0: contradicted first
  assert Difference(Metric("a"), Metric("b"), 1.0, claimed=5.0).outcome(below_zero).verdict \
      == verdicts.CONTRADICTED
  with pytest.raises(ValueError, match="claimed size at least the margin"):
    Difference(Metric("a"), Metric("b"), 2.0, claimed=1.0)


def reached(name, rounds_per_seed, last=60):
  """A record whose test_accuracy reaches 1 at each seed's round (evaluations every 10)."""
  rounds = list(range(0, last + 1, 10))
  acc = [[[1.0 if r >= t else 0.0 for t in rounds_per_seed]] for r in rounds]
  return {"name": name, "seeds": list(range(len(rounds_per_seed))), "rounds": rounds,
          "metrics": {"test_accuracy": acc}}


def test_three_tied_discrete_differences_are_not_reproduced_by_a_zero_width_interval():
  # T8-lag-¾'s shape: FedAWE reaches the target one evaluation (10 rounds) after FedAvg on
  # each of 3 seeds: +10, +10, +10. A t-interval is [+10, +10]; the sign test (3/3,
  # p = 0.25) decides nothing: [−∞, +∞], direction only.
  recs = {"a": reached("a", [30, 40, 20]), "b": reached("b", [20, 30, 10])}
  reach = lambda run: Metric(run, reach=1.0)
  out = Difference(reach("a"), reach("b")).outcome(recs)
  assert (out.verdict, out.ours, out.interval, out.kind) == (
      verdicts.DIRECTION_ONLY, "+10.00", "[−∞, +∞]", "median")
  # Continuous values that all tie are tested alike.
  tied = records(a=[12.0, 12.0, 12.0], b=[2.0, 2.0, 2.0])
  out = Difference(Metric("a"), Metric("b")).outcome(tied)
  assert (out.verdict, out.kind) == (verdicts.DIRECTION_ONLY, "median")
  # Six seeds, every one +10: the sign test's p = 1/64 decides (the interval's ends are the
  # order statistics it allows).
  recs = {"a": reached("a", [30, 40, 20, 30, 40, 20]), "b": reached("b", [20, 30, 10] * 2)}
  out = Difference(reach("a"), reach("b")).outcome(recs)
  assert (out.verdict, out.interval) == (verdicts.REPRODUCED, "[+10.00, +10.00]")


def test_sign_interval_is_the_order_statistics_the_exact_sign_test_allows():
  assert verdicts.sign_interval([1.0, 2.0, 3.0]) == (2.0, -np.inf, np.inf)
  assert verdicts.sign_interval([1.0, 2.0, 3.0, 4.0, 5.0]) == (3.0, -np.inf, np.inf)
  # n = 6: P(Binomial(6, ½) = 0) = 1/64 ≤ 0.025 < P(≤ 1): the smallest and the largest.
  assert verdicts.sign_interval(range(6)) == (2.5, 0.0, 5.0)
  # n = 10: P(≤ 1) = 11/1024 ≤ 0.025 < P(≤ 2): the 2nd smallest and the 2nd largest.
  assert verdicts.sign_interval(range(10)) == (4.5, 1.0, 8.0)


def test_a_bound_on_its_boundary_is_not_past_it():
  # E2b's shape: every seed's tuned stepsize exactly 30x (log10 on a half-decade grid),
  # against a margin of log10 30, computed differently (floating-point slack of 1e-16).
  n = 10
  grid = [{"client_lr": 10.0}, {"client_lr": 300.0}]
  rec = lambda name, point: {"name": name, "seeds": list(range(n)), "rounds": [0, 10],
                             "grid": grid, "metrics": {"gap": [[[0.0] * n] * 2] * 2}}
  recs = {"a": rec("a", 1), "b": rec("b", 0)}
  lr = lambda run, point: Metric(run, "client_lr", point=point, log_floor=1e-30)
  margin = np.log10(3) + 1.0
  d = lr("a", 1).values(recs) - lr("b", 0).values(recs)
  assert abs(d[0] - margin) < 1e-12
  for m in (margin, np.nextafter(margin, 0), np.nextafter(margin, 2)):
    out = Difference(lr("a", 1), lr("b", 0), m).outcome(recs)
    assert out.verdict == verdicts.DIRECTION_ONLY, m  # on the margin: not cleared
  # An equivalence whose interval ends on ±w (E3-alpha's shape) does not hold; one
  # clearly inside does.
  recs = records(a=[0.4, 0.5, 0.6, 0.45, 0.55, 0.5], b=[0.0] * 6)
  mean, lo, hi = verdicts.interval([0.4, 0.5, 0.6, 0.45, 0.55, 0.5])
  assert Equivalent(Metric("a"), Metric("b"), hi).outcome(recs).verdict == \
      verdicts.NOT_REPRODUCED
  assert Equivalent(Metric("a"), Metric("b"), hi * (1 + 1e-9)).outcome(recs).verdict == \
      verdicts.NOT_REPRODUCED
  assert Equivalent(Metric("a"), Metric("b"), hi + 0.01).outcome(recs).verdict == \
      verdicts.REPRODUCED
  # A threshold reached exactly (7 digits of θ̂ = 1) is not past it.
  ones = records(t=[1.0] * 6)
  assert AtLeast(Metric("t"), 1.0).outcome(ones).verdict == verdicts.NOT_REPRODUCED
  assert AtLeast(Metric("t"), 0.99).outcome(ones).verdict == verdicts.REPRODUCED
  with pytest.raises(ValueError, match="an identity is an Exact check"):
    Equivalent(Metric("a"), Metric("b"), 0.0)


def test_an_exact_check_holds_on_every_seed_or_fails():
  recs = records(a=[1.0, 2.0, 3.0], same=[1.0, 2.0, 3.0], off=[1.0, 2.0, 3.001],
                 low=[0.5, 1.5, 2.5])
  assert Exact(Metric("a"), Metric("same")).outcome(recs).verdict == verdicts.HOLDS
  assert Exact(Metric("a"), Metric("off")).outcome(recs).verdict == verdicts.FAILS
  assert Exact(Metric("a"), Metric("low"), relation=">").outcome(recs).verdict == \
      verdicts.HOLDS
  assert Exact(Metric("low"), Metric("a"), relation=">").outcome(recs).verdict == \
      verdicts.FAILS
  out = Exact(Metric("same"), value=2.0).outcome(records(same=[2.0, 2.0 + 1e-9]))
  assert (out.verdict, out.kind, out.interval) == (verdicts.HOLDS, "every seed",
                                                   "[2.00, 2.00]")
  with pytest.raises(ValueError, match="is a check"):
    Claim("x", "s", "p", Exact(Metric("a"), value=1.0))


def test_threshold_verdicts():
  recs = records(hi=[92.0, 92.2, 91.8], mid=[85.0, 95.0, 91.0], lo=[80.0, 80.5, 79.5])
  assert AtLeast(Metric("hi"), 90).outcome(recs).verdict == verdicts.REPRODUCED
  assert AtLeast(Metric("mid"), 90).outcome(recs).verdict == verdicts.DIRECTION_ONLY
  assert AtLeast(Metric("lo"), 90).outcome(recs).verdict == verdicts.CONTRADICTED
  assert AtMost(Metric("lo"), 90).outcome(recs).verdict == verdicts.REPRODUCED


def test_metric_windows_rounds_and_reach():
  rec = {"r": {"seeds": [0, 1], "rounds": [10, 20, 30, 40],
               "metrics": {"m": [[[0.1, 0.2]], [[0.3, 0.2]], [[0.5, 0.4]], [[0.7, 0.4]]]}}}
  np.testing.assert_allclose(Metric("r", "m").values(rec), [0.7, 0.4])
  np.testing.assert_allclose(Metric("r", "m", window=20).values(rec), [0.6, 0.4])
  np.testing.assert_allclose(Metric("r", "m", at=20, scale=100).values(rec), [30, 20])
  np.testing.assert_array_equal(Metric("r", "m", reach=0.3).values(rec), [20, 30])
  # Never reached: one evaluation after the last, a lower bound of the true round.
  np.testing.assert_array_equal(Metric("r", "m", reach=0.6).values(rec), [40, 50])


def test_a_diverged_seed_makes_the_statistic_n_a():
  recs = records(a=[1.0, 2.0, 3.0], b=[0.0, 0.0, 0.0])
  recs["a"]["metrics"]["test_accuracy"][-1][0][1] = None  # JSON's NaN
  out = Difference(Metric("a"), Metric("b")).outcome(recs)
  assert out.verdict == verdicts.NOT_REPRODUCED and out.ours == "n/a"


def test_a_claim_has_a_test_or_a_reason_and_reads_declared_runs():
  with pytest.raises(ValueError, match="not both"):
    Claim("x", "s", "p")
  with pytest.raises(ValueError, match="not declared"):
    Paper("p", "t", "s", runs=(Run("a", {}),),
          claims=(Claim("c", "s", "p", Difference(Metric("a"), Metric("b"))),))
  with pytest.raises(ValueError, match="figure f.png reads run 'b', which is not declared"):
    Paper("p", "t", "s", runs=(Run("a", {}),), claims=(),
          figures=(Figure("f.png", "t", (Curve("a", "a"), Curve("b", "b"))),))


def test_checks_are_shown_apart_from_the_claims_and_their_counts():
  paper = Paper("p", "A paper", "spec.md", runs=(Run("a", {}), Run("b", {})),
                claims=(Claim("c1", "a beats b", "+1", Difference(Metric("a"), Metric("b"))),
                        Claim("k1", "a equals itself", "—", Exact(Metric("a"), Metric("a")),
                              check="identity"),
                        Claim("k2", "our margin", "≥ 5", Difference(Metric("a"), Metric("b"),
                                                                    5.0), check="calibration")))
  recs = records(a=[3.0, 3.1, 2.9], b=[1.0, 1.0, 1.0])
  for r in recs.values():
    r.update(seconds=1.0)
  text = render(paper, recs)["REPORT.md"]
  assert "Verdicts: 1 reproduced." in text
  assert "The 2 checks that are not claims of the paper" in text
  assert ": 1 not reproduced, 1 holds." in text
  claims_part, checks_part = text.split("## Checks")
  assert "| c1 |" in claims_part and "| k1 |" not in claims_part
  assert "| k1 | a equals itself | identity | — | +0.00, range [+0.00, +0.00], n=3 | " \
         "**holds** |" in checks_part
  assert "| k2 |" in checks_part and "**not reproduced**" in checks_part
  assert text.index("| c1 |") < text.index("## Checks")  # the claims come first
  assert "Multiplicity: 1 claims were tested" in text  # the checks are not counted
  assert "- **k1** (a check): " in render(paper, recs)["VERDICTS.md"]


def test_report_is_a_function_of_the_records():
  paper = Paper("p", "A paper", "spec.md", runs=(Run("a", {"algo": "fedavg"}), Run("b", {})),
                claims=(Claim("c1", "a beats b", "+1", Difference(Metric("a"), Metric("b"))),
                        Claim("c2", "on GPU", "—", not_attempted="needs a GPU")))
  recs = records(a=[3.0, 3.1, 2.9], b=[1.0, 1.0, 1.0])
  for r in recs.values():
    r.update(seconds=1.0, commit="abc")
  files = render(paper, recs)
  assert files == render(paper, recs)
  assert sorted(files) == ["REPORT.md", "RUNS.md", "VERDICTS.md"]
  text = files["REPORT.md"]  # the answer: the verdicts and their tables
  assert ("| c1 | a beats b | +1 | +2.00 [+1.75, +2.25], n=3; detects ≥ 0.31 | **reproduced** |"
          in text)
  assert "| c2 | on GPU | — | — | **not attempted**: needs a GPU |" in text
  assert "Verdicts: 1 reproduced, 1 not attempted." in text
  assert "The counts are of the paper's 2 claims, one row each." in text
  assert ("Multiplicity: 1 claims were tested" in text
          and "1 of the 1 reproduced rows stay reproduced" in text)
  assert "## Checks" not in text
  assert "## How each verdict is computed" not in text and "| a | 0,1,2 |" not in text
  assert "[VERDICTS.md](VERDICTS.md)" in text and "[RUNS.md](RUNS.md)" in text
  assert "- **c1**: " in files["VERDICTS.md"] and "--claim=c1" in files["VERDICTS.md"]
  assert "## Rules" in files["VERDICTS.md"] and "sign test" in files["VERDICTS.md"]
  runs = files["RUNS.md"]
  assert "`python benchmarks/run.py --algo=fedavg --seeds=0,1,2`" in runs
  assert "| a | 0,1,2 | 1 | — | — | abc |" in runs  # recorded before CPU seconds and load were
  recs["a"].update(seconds=30.4, cpu_seconds=55.2, load_average=[1.96, 2.04])
  assert "| a | 0,1,2 | 30 | 55 | 1.96–2.04 | abc |" in render(paper, recs)["RUNS.md"]


TINY = dict(dataset="synthetic", num_clients=8, clients_per_round=4, rounds=2, eval_every=1, local_steps=2,
            batch_size=8, host_devices=1)


def test_a_run_is_fresh_until_its_configuration_or_its_code_changes(tmp_path):
  run = Run("tiny", {**TINY, "algo": "fedavg"}, seeds=(0, 1))
  assert store.status(store.load(str(tmp_path), run), run) == "missing"
  rec = store.execute(str(tmp_path), run, log=lambda *_: None)
  assert store.status(store.load(str(tmp_path), run), run) == "fresh"
  assert "core/local.py:train" in rec["code"] and "core/local.py" in rec["code"]
  assert not any(k.startswith("claims/") for k in rec["code"])
  assert rec["rounds"] == [0, 1, 2] and np.asarray(rec["metrics"]["test_accuracy"]).shape == (3, 1, 2)
  assert rec["cpu_seconds"] > 0 and len(rec["load_average"]) == 2
  assert all(load >= 0 for load in rec["load_average"])

  from fedjax_bench import api
  direct = api.run(seeds=[0, 1], progress=False, **run.settings).curves["test_accuracy"]
  np.testing.assert_allclose(rec["metrics"]["test_accuracy"], direct, rtol=1e-6)

  other = Run("tiny", {**TINY, "algo": "fedavg", "client_lr": 0.2}, seeds=(0, 1))
  assert store.status(rec, other) == "configuration changed"
  assert store.status(rec, Run("tiny", run.settings, seeds=(0, 2))) == "configuration changed"
  old = {**rec, "code": {**rec["code"], "core/local.py:train": "0" * 16}}
  assert store.status(old, run) == "code changed: core/local.py:train"
  first_format = {k: v for k, v in rec.items() if k != "code_kind"}  # whole-file hashes
  assert store.status(first_format, run).startswith("code changed: recorded under an older rule")


def test_a_run_in_progress_says_it_still_is(tmp_path, monkeypatch):
  import time
  import types

  from fedjax_bench import api

  def slow(**_):
    time.sleep(0.5)
    return types.SimpleNamespace(curves={"round": np.array([0]), "test_accuracy": np.zeros(
        (1, 1, 1))}, grid=[], diverged=[False])

  monkeypatch.setattr(api, "run", slow)
  monkeypatch.setattr(store, "HEARTBEAT_SECONDS", 0.1)
  lines = []
  store.execute(str(tmp_path), Run("slow", {**TINY, "algo": "fedavg"}), log=lines.append)
  assert lines[-1].startswith("  ran slow (") and len(lines) >= 3
  assert set(lines[:-1]) == {"  slow: still running after 0 min"}
  done = len(lines)
  time.sleep(0.3)
  assert len(lines) == done  # it stops with the run


def _toy_library(tmp_path, monkeypatch, **sources):
  """Modules NAME (one per keyword, its source) in a library at tmp_path, imported."""
  import importlib

  from fedjax_bench.claims import code
  monkeypatch.setattr(code, "PACKAGE_DIR", str(tmp_path))
  monkeypatch.syspath_prepend(str(tmp_path))
  for name, source in sources.items():
    (tmp_path / f"{name}.py").write_text(source)
    sys.modules.pop(name, None)
  return [importlib.import_module(name) for name in sources]


MODULE = """'''A module.'''
import math
SCALE = 2  # a constant
NAMES = ("a", "b")
TABLE = {"a": 1}
SEEN = []
SEEN.append("a")


def setting(default, help):
  return default


class Opts:
  lr: float = setting(0.1, "A setting: its value is in a run's configuration key.")


def used(x):
  '''Doubles.'''
  return SCALE * helper(x)


def helper(x):
  return x + 1


def unused(x):
  return x - 1


class Box:
  size: int = 3

  def grow(self):
    return self.size + 1
"""


@pytest.mark.parametrize("edit, stale", [
    (("return x + 1", "return x + 2"), ["toymod.py:helper"]),       # called, nested call
    (("return x - 1", "return x - 2"), []),                          # never called
    (("SCALE = 2", "SCALE = 3"), ["toymod.py"]),                     # top level
    (("size: int = 3", "size: int = 4"), ["toymod.py"]),             # class body
    (("return self.size + 1", "return self.size + 2"), ["toymod.py:Box.grow"]),
    (("# a constant", "# the scale"), []),                           # a comment
    (("'''Doubles.'''", "'''Twice x plus two.'''"), []),  # a docstring
    (("class Box:", "def added(x):\n  return x\n\n\nclass Box:"), []),  # a new function
    (("  def grow", "  def shrink(self):\n    return 0\n\n  def grow"), []),  # a new method
    (("lr: float = setting(0.1", "lr: float = setting(0.2"), []),  # a setting's declaration
    (("  lr: float", "  momentum: float = setting(0.0, 'new')\n  lr: float"), []),
    (("import math", "import cmath as math"), ["toymod.py"]),       # an import
    (("import math", "import math\nimport os"), []),                 # a new import
    (("SCALE = 2  # a constant", "SCALE = 2\nSCALE = 5"), ["toymod.py"]),  # rebound
    (("import math", "import math\nmath = None"), ["toymod.py"]),   # rebound
    (('NAMES = ("a", "b")', 'NAMES = ("a", "b", "c")'), []),        # a new element
    (('NAMES = ("a", "b")', 'NAMES = ("b", "a")'), ["toymod.py"]),  # reordered
    (('NAMES = ("a", "b")', 'NAMES = ["a", "b"]'), ["toymod.py"]),  # another kind
    (('TABLE = {"a": 1}', 'TABLE = {"a": 1, "z": 2}'), []),         # a new entry
    (('TABLE = {"a": 1}', 'TABLE = {"a": 2}'), ["toymod.py"]),      # a changed entry
    (('SEEN.append("a")', 'SEEN.append("a")\nSEEN.append("b")'), []),  # a new registration
    (('SEEN.append("a")', 'SEEN.append("A")'), ["toymod.py"]),      # a changed one
])
def test_a_run_goes_stale_only_on_code_it_ran(tmp_path, monkeypatch, edit, stale):
  from fedjax_bench.claims import code
  (toymod,) = _toy_library(tmp_path, monkeypatch, toymod=MODULE)
  path = tmp_path / "toymod.py"
  with code.Trace() as trace:
    toymod.used(1)
    toymod.Box().grow()
  recorded = code.digest(trace)
  assert {k for k in recorded if k.startswith("toymod")} == {
      "toymod.py", "toymod.py:used", "toymod.py:helper", "toymod.py:Box.grow"}
  assert code.changed(recorded) == []
  path.write_text(MODULE.replace(*edit))
  os.utime(path, (1, 1))  # a new mtime, whatever the clock's resolution
  assert code.changed(recorded) == stale
  sys.modules.pop("toymod", None)


def test_a_kernels_source_hash_stales_only_the_runs_that_called_its_module(tmp_path,
                                                                          monkeypatch):
  from fedjax_bench.claims import code
  kernel = 'SOURCE_SHA256 = "aaaa"\nWIDTH = 8\n\n\ndef call(x):\n  return x * WIDTH\n'
  toykernel, toyuser = _toy_library(tmp_path, monkeypatch, toykernel=kernel,
                                    toyuser="def run(x):\n  return x + 1\n")
  with code.Trace() as trace:
    toyuser.run(1)  # toykernel is loaded, none of its functions runs
  without = code.digest(trace)
  with code.Trace() as trace:
    toykernel.call(1)
  called = code.digest(trace)
  assert len(called["toykernel.py"].split()) == 2 and len(without["toykernel.py"].split()) == 1
  assert code.changed(without) == code.changed(called) == []
  for t, (old, new, stale_without) in enumerate([
      ('"aaaa"', '"bbbb"', []),                       # the C++ changed
      ("WIDTH = 8", "WIDTH = 16", ["toykernel.py"])], 1):  # any other binding counts for all
    (tmp_path / "toykernel.py").write_text(kernel.replace(old, new))
    os.utime(tmp_path / "toykernel.py", (t, t))
    assert code.changed(without) == stale_without
    assert code.changed(called) == ["toykernel.py"]
  for name in ("toykernel", "toyuser"):
    sys.modules.pop(name, None)


def test_code_moved_to_another_module_stales_no_run(tmp_path, monkeypatch):
  from fedjax_bench.claims import code
  main = ("from fedjax_bench.core import keys\n"
          "SCALE = 2\n\n\ndef used(x):\n  return SCALE * helper(x)\n\n\n"
          "def helper(x):\n  return x + 1\n")
  # moveother is loaded too: its bindings are recorded.
  movemain, _ = _toy_library(tmp_path, monkeypatch, movemain=main, moveother="OTHER = 1\n")
  with code.Trace() as trace:
    movemain.used(1)
  recorded = code.digest(trace)
  assert "movemain.py:helper" in recorded and code.changed(recorded) == []

  mtimes = iter(range(1, 100))

  def rewrite(main_text, other_text):
    (tmp_path / "movemain.py").write_text(main_text)
    (tmp_path / "moveother.py").write_text(other_text)
    t = next(mtimes)  # a new mtime each time, whatever the clock's resolution
    for name in ("movemain.py", "moveother.py"):
      os.utime(tmp_path / name, (t, t))

  # helper and SCALE move to the other module; the library import names a new module.
  moved_main = ("from fedjax_bench import keys\nfrom moveother import SCALE, helper\n\n\n"
                "def used(x):\n  return SCALE * helper(x)\n")
  moved_other = "OTHER = 1\nSCALE = 2\n\n\ndef helper(x):\n  return x + 1\n"
  rewrite(moved_main, moved_other)
  assert code.changed(recorded) == []
  rewrite(moved_main, moved_other.replace("x + 1", "x + 2"))  # moved, and changed
  assert code.changed(recorded) == ["movemain.py:helper"]
  rewrite(moved_main, moved_other.replace("SCALE = 2", "SCALE = 3"))
  assert code.changed(recorded) == ["movemain.py"]
  rewrite(moved_main.replace("import keys", "import keys as k"), moved_other)  # renamed
  assert code.changed(recorded) == ["movemain.py"]
  for name in ("movemain", "moveother"):
    sys.modules.pop(name, None)


def claims_cli(*args, cwd=ROOT):
  return subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "claims.py"), *args],
                        capture_output=True, text=True, cwd=cwd, timeout=300)


def test_committed_reports_are_what_their_runs_produce():
  p = claims_cli("--check")
  assert p.returncode == 0, p.stdout + p.stderr


def check_with_pending(name, *args):
  """`claims.py --check` with paper ``name`` listed in PENDING (the list may be empty)."""
  code = (f"import sys; from benchmarks import papers; "
          f"papers.PENDING = ({name!r},); import runpy; "
          f"sys.argv = ['claims.py', '--check', {name!r}, *{list(args)!r}]; "
          f"runpy.run_module('benchmarks.claims', run_name='__main__')")
  return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        cwd=ROOT, timeout=300)


def test_check_counts_the_made_runs_of_a_pending_paper(tmp_path):
  from benchmarks import papers
  name = "shakespeare"
  total = len(papers.PAPERS[name].claim_runs())
  shutil.copytree(os.path.join(ROOT, "results", name), tmp_path / name)
  os.remove(tmp_path / name / "runs" / "fedyogi.json")
  p = check_with_pending(name, f"--results_dir={tmp_path}")
  assert p.returncode == 0, p.stdout + p.stderr
  assert f"{name}: pending, not checked: {total - 1} of its {total} runs made" in p.stdout
  shutil.rmtree(tmp_path / name / "runs")
  p = check_with_pending(name, f"--results_dir={tmp_path}")
  assert f"{name}: pending, not checked: 0 of its {total} runs made" in p.stdout
  p = claims_cli("--check", name, f"--results_dir={tmp_path}")  # not pending: a failure
  assert p.returncode == 1 and f"{name}: run fedavg: missing" in p.stdout, p.stdout


def test_readme_links_every_report_with_its_verdicts():
  # README's "What holds" table: one row per paper whose report is generated, linking it,
  # with the verdict counts its REPORT.md gives (so the summary cannot drift from them).
  import re
  from benchmarks import papers
  readme = open(os.path.join(ROOT, "README.md")).read()
  for name, paper in papers.PAPERS.items():
    if name in papers.PENDING or paper.renderer is not None:  # the leaderboard: below
      continue
    report = open(os.path.join(ROOT, "results", name, "REPORT.md")).read()
    counts = re.search(r"^Verdicts: (.*)\.$", report, re.M).group(1)
    row = next((line for line in readme.splitlines()
                if line.startswith(f"| [{name}](results/{name}/REPORT.md) |")), None)
    assert row is not None, f"README's What holds table has no row for {name}"
    assert f"| {counts} |" in row, (name, counts, row)


def test_readme_repeats_the_leaderboards_line_for_each_task():
  from benchmarks import papers
  if "leaderboard" in papers.PENDING:
    pytest.skip("the leaderboard's runs are not made yet")
  readme = open(os.path.join(ROOT, "README.md")).read()
  board = open(os.path.join(ROOT, "results", "leaderboard", "LEADERBOARD.md")).read()
  assert "(results/leaderboard/LEADERBOARD.md)" in readme
  lines = [x for x in board.splitlines() if x.startswith("- ") and ": best " in x]
  assert lines, "LEADERBOARD.md has no summary line"
  for line in lines:
    assert line in readme.splitlines(), line


def test_check_fails_on_an_edited_report_and_a_missing_run(tmp_path):
  shutil.copytree(os.path.join(ROOT, "results", "fedawe"), tmp_path / "fedawe")
  report = tmp_path / "fedawe" / "REPORT.md"
  text = report.read_text()
  weaker = next(v for v in ("contradicted", "not reproduced", "direction only")
                if f"**{v}**" in text)
  report.write_text(text.replace(f"**{weaker}**", "**reproduced**", 1))  # upgraded by hand
  kept = {}
  for name in ("VERDICTS.md", "RUNS.md"):  # the report's other files are checked alike
    other = tmp_path / "fedawe" / name
    kept[other] = other.read_text()
    other.write_text(kept[other].replace(" |", " (edited) |", 1) + "A line added by hand.\n")
  p = claims_cli("--check", "fedawe", f"--results_dir={tmp_path}")
  assert p.returncode == 1, p.stdout
  for name in ("REPORT.md", "VERDICTS.md", "RUNS.md"):  # each named on its own line
    assert sum(f"{name} differs from what its runs produce" in line
               for line in p.stdout.splitlines()) == 1, (name, p.stdout)
  report.write_text(text)
  for other, original in kept.items():
    other.write_text(original)
  p = claims_cli("--check", "fedawe", f"--results_dir={tmp_path}")
  assert p.returncode == 0, p.stdout
  os.remove(next((tmp_path / "fedawe" / "runs").glob("*.json")))
  p = claims_cli("--check", "fedawe", f"--results_dir={tmp_path}")
  assert p.returncode == 1 and ": missing" in p.stdout


def test_report_only_writes_the_report_files_from_the_committed_runs(tmp_path):
  shutil.copytree(os.path.join(ROOT, "results", "fedawe"), tmp_path / "fedawe")
  (tmp_path / "fedawe" / "REPORT.md").write_text("stale\n")
  os.remove(tmp_path / "fedawe" / "VERDICTS.md")
  runs_before = sorted(p.name for p in (tmp_path / "fedawe" / "runs").iterdir())
  p = claims_cli("--report_only", "fedawe", f"--results_dir={tmp_path}")
  assert p.returncode == 0 and "wrote " in p.stdout, p.stdout + p.stderr
  assert sorted(p.name for p in (tmp_path / "fedawe" / "runs").iterdir()) == runs_before
  for name in ("REPORT.md", "VERDICTS.md", "RUNS.md"):
    assert (tmp_path / "fedawe" / name).read_text() == open(
        os.path.join(ROOT, "results", "fedawe", name)).read(), name
  os.remove(next((tmp_path / "fedawe" / "runs").glob("*.json")))
  p = claims_cli("--report_only", "fedawe", f"--results_dir={tmp_path}")
  assert p.returncode == 1 and "report not written" in p.stdout, p.stdout + p.stderr


def test_unknown_paper_or_claim_is_one_line():
  p = claims_cli("nosuch")
  assert p.returncode == 2
  assert p.stderr.strip().splitlines()[-1].startswith("error: unknown paper 'nosuch'; valid: ")
  assert "fedawe" in p.stderr.strip().splitlines()[-1]
  p = claims_cli("fedawe", "--claim=nosuch")
  assert p.returncode == 2 and "unknown claim 'nosuch' of fedawe; valid: T2-gain" in p.stderr
  for cmd in (("--verify", "shakespeare"), ("shakespeare",)):  # a claim not attempted: no runs
    p = claims_cli(*cmd, "--claim=T1-fedyogi")
    assert p.returncode == 2, (cmd, p.stdout, p.stderr)
    line = p.stderr.strip().splitlines()[-1]
    head = "claim 'T1-fedyogi' of shakespeare has no runs; claims with runs: "
    assert head in line, line
    listed = line.split(head)[1].split(", ")
    assert "yogi-over-avg" in listed and not any(c.startswith("T1-") for c in listed), line


def test_pending_makes_a_pending_groups_missing_runs_and_refuses_what_it_cannot(
    tmp_path, monkeypatch):
  """`claims.py PAPER --pending=GROUP` makes the group's runs that are not fresh, and only
  them; an unknown group (naming the valid ones), or --pending with --claim or --verify,
  is a one-line error."""
  from benchmarks import claims as runner
  from fedjax_bench.errors import UsageError
  from fedjax_bench.claims import leaderboard, store
  from fedjax_bench.claims.leaderboard import Method, Task
  methods = (Method("fedavg", "FedAvg", dict(algo="fedavg"), {"client_lr": (0.1, 0.2)}),)
  big = Task("big", "A big task", dict(dataset="synthetic"), methods, target=0.5,
             grid_points=2, pending="slow")
  p = leaderboard.board("lb", "Board", (big,))
  made = []
  monkeypatch.setattr(store, "execute", lambda d, r, log=print: made.append(r.name))
  monkeypatch.setattr(runner, "write_report", lambda p, root: {})
  assert runner.make(p, str(tmp_path), "", False, "big") == 0
  assert made == ["big-fedavg-tune", "big-fedavg"]
  with pytest.raises(UsageError, match=r"lb has no pending group 'nope'; valid: big$"):
    runner.make(p, str(tmp_path), "", False, "nope")
  p = claims_cli("leaderboard", "--pending=nope")
  assert p.returncode == 2, p.stdout + p.stderr
  valid = ", ".join(_papers().PAPERS["leaderboard"].pending) or "none"
  assert p.stderr.strip().splitlines()[-1] == (
      f"error: leaderboard has no pending group 'nope'; valid: {valid}"), p.stderr
  p = claims_cli("fedawe", "--pending=x", "--claim=T2-gain")
  assert p.returncode == 2 and "--pending and --claim exclude each other" in p.stderr
  p = claims_cli("leaderboard", "--pending=x", "--verify")
  assert p.returncode == 2 and "not with --check, --list, --report_only or --verify" in p.stderr


def test_verify_finds_a_committed_run_that_the_code_does_not_give(tmp_path, sine_reruns):
  # The committed FedAWE run must come out again with the same numbers (within the float
  # tolerance between CPUs: it was made on another machine); its FedAvg partner, edited to
  # fail, must flip the claim's verdict and fail the command. The reruns are the fixture's
  # (this code's, made by `--verify` itself, which test_verify_dir_keeps_the_reruns...
  # checks), read from its --verify_dir instead of made again.
  shutil.copytree(os.path.join(ROOT, "results", "fedawe"), tmp_path / "fedawe")
  runs = sorted((tmp_path / "fedawe" / "runs").glob("*.json"))
  path = tmp_path / "fedawe" / "runs" / "toyfl_paper_sine_fedavg.json"
  import json
  rec = json.loads(path.read_text())
  rec["metrics"]["test_accuracy"] = np.ones_like(rec["metrics"]["test_accuracy"]).tolist()
  path.write_text(json.dumps(rec))
  before = {f: f.read_bytes() for f in (tmp_path / "fedawe").rglob("*") if f.is_file()}
  p = claims_cli("fedawe", "--verify", "--claim=S-paper-phi", f"--results_dir={tmp_path}",
                 f"--verify_dir={sine_reruns[0]}")
  assert p.returncode == 1, p.stdout + p.stderr
  assert p.stdout.count("rerun already in") == 2, p.stdout
  lines = {line.split(":")[0].strip(): line for line in p.stdout.splitlines()}
  assert lines["toyfl_paper_sine_fedawe"].endswith("; the same numbers"), p.stdout
  assert not lines["toyfl_paper_sine_fedavg"].endswith("; the same numbers"), p.stdout
  assert "S-paper-phi    DIFFERS: committed contradicted" in p.stdout
  assert sorted((tmp_path / "fedawe" / "runs").glob("*.json")) == runs
  after = {f: f.read_bytes() for f in (tmp_path / "fedawe").rglob("*") if f.is_file()}
  assert after == before  # nothing written: no run, and VERIFY.md only for a whole paper


def test_same_numbers_allows_the_last_digits_a_cpu_changes_and_nothing_more():
  rec = {"key": "k", "grid": [], "rounds": [0, 5], "diverged": [],
         "metrics": {"test_loss": [[[0.6931472]], [[0.4]]], "acc": [[[None]], [[0.9]]]}}
  moved = lambda **m: {**rec, "metrics": {**rec["metrics"], **m}}
  assert store.same_numbers(rec, rec)
  # AVX2 against AVX-512, measured: 2.6e-7 relative.
  assert store.same_numbers(moved(test_loss=[[[0.6931474]], [[0.4000001]]]), rec)
  assert not store.same_numbers(moved(test_loss=[[[0.6932]], [[0.4]]]), rec)  # 4th digit
  assert not store.same_numbers(moved(acc=[[[0.1]], [[0.9]]]), rec)  # NaN against a number
  assert not store.same_numbers({**rec, "diverged": [{"seed": 0}]}, rec)
  assert not store.same_numbers({**rec, "key": "other"}, rec)


def test_verification_report_names_every_differing_verdict():
  from fedjax_bench.claims import paper
  text = paper.verification_report(
      "toy", [("a", 12.3, 0.0), ("b", 4.0, None), ("c", 3.0, "another configuration")],
      [("C1", "reproduced", "reproduced", True), ("C2", "reproduced", "direction only", False),
       ("C3", "direction only", "reproduced", None)],
      125.0, {"commit": "abc1234", "environment": {"jax": "0.4", "platform": "cpu",
                                                   "devices": 2}})
  assert "reran the 3 runs of the report aside, on commit abc1234" in text
  assert "in 2.1 minutes" in text
  assert "**1 of 2 verdicts the same as the committed runs' ones**: differing C2." in text
  assert "| C2 | reproduced | direction only | **no** |" in text
  # C3 read a run whose declaration changed: shown, not counted, not a difference.
  assert "1 more read a committed run of another configuration" in text
  assert "| C3 | direction only | reproduced | (another configuration) |" in text
  assert "| a | 12 | 0 |" in text and "| b | 4 | (not committed) |" in text
  assert "| c | 3 | (another configuration) |" in text
  # Nothing comparable: said so, not "0 of 0".
  apart = paper.verification_report("toy", [("c", 3.0, "another configuration")],
                                    [("C3", "direction only", "reproduced", None)], 60.0, {})
  assert "**No verdict compared**." in apart
  assert "1 read a committed run of another configuration" in apart
  assert "0 of 0" not in apart


def test_every_declared_run_is_read_by_a_claim_or_a_figure():
  # `claims.py PAPER` makes only the runs its claims and figures read: any other declared
  # run would never be made nor checked.
  from benchmarks import papers
  for p in papers.PAPERS.values():
    read = {r.name for r in p.claim_runs()}
    assert [r.name for r in p.runs if r.name not in read] == [], p.name


def test_an_x64_run_runs_in_float64_and_is_its_own_configuration(tmp_path):
  import jax
  from fedjax_bench import api
  settings = dict(dataset="quadratic", algo="sfedavg", num_clients=50, rounds=3,
                  eval_every=1, optimality_gap=True, host_devices=1)
  run32, run64 = Run("q", settings, seeds=(0,)), Run("q", settings, seeds=(0,), x64=True)
  assert run64.command().startswith("JAX_ENABLE_X64=1 python benchmarks/run.py ")
  rec = store.execute(str(tmp_path), run64, log=lambda *_: None)
  assert store.status(rec, run64) == "fresh"
  assert store.status(rec, run32) == "configuration changed"
  with jax.enable_x64(True):
    direct = api.run(seeds=[0], progress=False, **settings).curves["optimality_gap"]
  np.testing.assert_allclose(rec["metrics"]["optimality_gap"], direct, rtol=1e-6)  # 7 digits
  single = api.run(seeds=[0], progress=False, **settings).curves["optimality_gap"]
  assert not np.allclose(rec["metrics"]["optimality_gap"], single, rtol=1e-4, atol=0)


def _papers():
  """The paper declarations (benchmarks/papers)."""
  from benchmarks import papers
  return papers


def _stale_sine_pair(tmp_path):
  """A copy of FedAWE's results in which both runs of S-paper-phi were made "on other code"
  (a recorded hash that no function has) and the FedAvg run's accuracy set to 1 (so the
  committed verdict is contradicted, the reruns' reproduced); their
  paths (FedAWE's, FedAvg's)."""
  import json
  shutil.copytree(os.path.join(ROOT, "results", "fedawe"), tmp_path / "fedawe")
  runs_dir = tmp_path / "fedawe" / "runs"
  paths = [runs_dir / f"toyfl_paper_sine_{a}.json" for a in ("fedawe", "fedavg")]
  for i, path in enumerate(paths):
    rec = json.loads(path.read_text())
    key = next(k for k in rec["code"] if k.endswith(":run"))
    rec["code"][key] = "0" * 8
    if i == 1:
      rec["metrics"]["test_accuracy"] = np.ones_like(rec["metrics"]["test_accuracy"]).tolist()
    path.write_text(json.dumps(rec))
  return paths


@pytest.fixture(scope="module")
def sine_reruns(tmp_path_factory):
  """S-paper-phi's two runs rerun once into a kept directory (``--verify_dir``): that
  directory, the process that made them and the results root it verified (a copy of the
  committed FedAWE results, which a one-claim verification leaves as they are); the tests
  below read the reruns from there instead of making them again (a rerun is the current
  code's, whatever the committed run it is compared with)."""
  tmp = tmp_path_factory.mktemp("sine")
  shutil.copytree(os.path.join(ROOT, "results", "fedawe"), tmp / "fedawe")
  aside = tmp / "aside"
  first = claims_cli("fedawe", "--verify", "--claim=S-paper-phi", f"--results_dir={tmp}",
                     f"--verify_dir={aside}")
  return aside, first, tmp


def test_verify_refresh_replaces_a_stale_run_only_when_its_numbers_come_out_again(
    tmp_path, sine_reruns):
  # The FedAWE run reruns to the same numbers and takes the rerun's record, the FedAvg
  # run, edited, does not and stays stale.
  import json

  from fedjax_bench.claims import store
  paths = _stale_sine_pair(tmp_path)
  p = claims_cli("fedawe", "--verify", "--refresh", "--claim=S-paper-phi",
                 f"--results_dir={tmp_path}", f"--verify_dir={sine_reruns[0]}")
  assert "toyfl_paper_sine_fedawe: the same numbers on the current code; refreshed" in p.stdout
  assert "toyfl_paper_sine_fedavg: the same numbers" not in p.stdout
  from benchmarks import papers
  by_name = {r.name: r for r in papers.PAPERS["fedawe"].runs}
  fresh = [store.status(json.loads(path.read_text()), by_name[path.stem]) for path in paths]
  assert fresh[0] == "fresh" and fresh[1].startswith("code changed"), fresh


def test_verify_dir_keeps_the_reruns_and_a_second_verification_reuses_them(sine_reruns):
  aside, first, results_root = sine_reruns
  assert first.returncode == 0, first.stdout + first.stderr
  assert first.stdout.count("rerun already in") == 0, first.stdout
  assert sorted(p.name for p in (aside / "fedawe").glob("*.json")) == [
      "toyfl_paper_sine_fedavg.json", "toyfl_paper_sine_fedawe.json"]
  second = claims_cli("fedawe", "--verify", "--claim=S-paper-phi",
                      f"--results_dir={results_root}", f"--verify_dir={aside}")
  assert second.returncode == 0 and second.stdout.count("rerun already in") == 2, second.stdout


def test_verify_remake_adopts_every_stale_rerun_and_regenerates_the_report(tmp_path,
                                                                          sine_reruns):
  # --remake gives both stale runs their reruns' records, fresh (the edited FedAvg run's
  # committed verdict was wrong), and the report written from them is the committed one.
  _stale_sine_pair(tmp_path)
  (tmp_path / "fedawe" / "REPORT.md").write_text("stale\n")
  p = claims_cli("fedawe", "--verify", "--remake", "--claim=S-paper-phi",
                 f"--results_dir={tmp_path}", f"--verify_dir={sine_reruns[0]}")
  assert "toyfl_paper_sine_fedavg: remade from its rerun" in p.stdout, p.stdout + p.stderr
  assert "S-paper-phi    DIFFERS: committed contradicted" in p.stdout  # the edit's verdict
  by_name = {r.name: r for r in _papers().PAPERS["fedawe"].runs}
  for path in sorted((tmp_path / "fedawe" / "runs").glob("toyfl_paper_sine_*.json")):
    rec = json.loads(path.read_text())
    assert store.status(rec, by_name[path.stem]) == "fresh", path.stem
  check = claims_cli("--check", "fedawe", f"--results_dir={tmp_path}")
  assert check.returncode == 0, check.stdout + check.stderr
  # The same report, and the same runs but for the two remade runs' rows (their seconds
  # and commit).
  assert (tmp_path / "fedawe" / "REPORT.md").read_text() == open(
      os.path.join(ROOT, "results", "fedawe", "REPORT.md")).read()
  def without_pair(text):
    rows = [line for line in text.splitlines() if line.startswith("| toyfl_paper_sine_")]
    assert len(rows) == 2, rows
    return [line for line in text.splitlines() if line not in rows]
  assert without_pair((tmp_path / "fedawe" / "RUNS.md").read_text()) == without_pair(open(
      os.path.join(ROOT, "results", "fedawe", "RUNS.md")).read())


def test_verify_remake_replaces_a_run_committed_with_other_seeds(tmp_path, sine_reruns):
  # A declaration whose seeds changed: the committed run's metrics have another shape, so
  # no difference is computed; --remake adopts the rerun and says why nothing was compared.
  import json
  shutil.copytree(os.path.join(ROOT, "results", "fedawe"), tmp_path / "fedawe")
  path = tmp_path / "fedawe" / "runs" / "toyfl_paper_sine_fedavg.json"
  rec = json.loads(path.read_text())
  rec.update(key="0" * 16, seeds=rec["seeds"][:1],
             metrics={m: [[row[:1] for row in grid] for grid in v]
                      for m, v in rec["metrics"].items()})
  path.write_text(json.dumps(rec))
  p = claims_cli("fedawe", "--verify", "--remake", "--claim=S-paper-phi",
                 f"--results_dir={tmp_path}", f"--verify_dir={sine_reruns[0]}")
  seeds = list(next(r for r in _papers().PAPERS["fedawe"].runs
                     if r.name == "toyfl_paper_sine_fedavg").seeds)
  assert "toyfl_paper_sine_fedavg: the committed run is of another configuration (seeds 0, " \
      f"now {','.join(map(str, seeds))})" in p.stdout, p.stdout + p.stderr
  assert "toyfl_paper_sine_fedavg: remade from its rerun" in p.stdout
  assert json.loads(path.read_text())["seeds"] == seeds
  # The claim read the one-seed run: its verdict is not compared, so the command passes.
  assert "S-paper-phi    another configuration: committed" in p.stdout, p.stdout
  assert p.returncode == 0, p.stdout + p.stderr


def test_each_row_prints_the_smallest_effect_its_seeds_can_detect():
  # n = 3, s = 1: (t_0.975,2 + t_0.80,2) / sqrt(3) = (4.3027 + 1.0607) / 1.7321 = 3.0966
  # (Student-t table values).
  recs = records(a=[1.0, 2.0, 3.0], b=[0.0] * 3)
  out = Difference(Metric("a"), Metric("b")).outcome(recs)
  assert out.detectable == "detects ≥ 3.10"  # printed to 3 significant digits
  lo, hi = 2.0 - 4.3027 / np.sqrt(3), 2.0 + 4.3027 / np.sqrt(3)
  assert abs(verdicts.detectable(lo, hi, 3) - 3.0966) < 1e-3
  # Three tied rounds-to-target: a median row, nothing detectable below 6 seeds.
  tied = records(a=[10.0] * 3, b=[0.0] * 3)
  assert Difference(Metric("a"), Metric("b")).outcome(tied).detectable == \
      "detects nothing below 6 seeds"
