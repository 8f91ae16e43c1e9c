"""The statistics the loss-aware aggregation paper's claims add to the claims mechanism
(benchmarks/papers/hetero_agg.py): `Smoothness` (Table 4) and `Relative` (Table 3's
relative R90 savings)."""

import numpy as np

from fedjax_bench.claims.verdicts import (CONTRADICTED, DIRECTION_ONLY, NOT_REPRODUCED,
                                          REPRODUCED, Difference, Metric, Relative,
                                          Smoothness, interval, smoothness)


def _record(curves, rounds=None, seeds=(0, 1, 2)):
  """A run record: ``curves`` [E, S] (one grid point) of test_accuracy."""
  curves = np.asarray(curves, np.float64)
  rounds = list(range(curves.shape[0])) if rounds is None else rounds
  return {"rounds": rounds, "seeds": list(seeds),
          "metrics": {"test_accuracy": curves[:, None, :].tolist()}}


def test_smoothness_is_the_curve_statistic_from_round_one_per_seed():
  rng = np.random.default_rng(0)
  acc = np.cumsum(rng.uniform(-0.02, 0.06, (11, 3)), axis=0)
  recs = {"a": _record(acc)}
  got = Smoothness("a").values(recs)
  np.testing.assert_allclose(got, smoothness(acc[1:]))
  d = np.diff(acc[1:, 2])
  np.testing.assert_allclose(got[2], d.std() / abs(d.mean()))  # population std
  # round 0 (before training) is left out: changing it changes nothing
  acc0 = acc.copy()
  acc0[0] = 5.0
  np.testing.assert_array_equal(Smoothness("a").values({"a": _record(acc0)}), got)
  np.testing.assert_allclose(Smoothness("a", start=3).values(recs),
                             smoothness(acc[3:]))
  assert "smoothness" in Smoothness("a", label="A").describe()


def test_smoothness_in_a_difference_is_paired_per_seed():
  steady = np.linspace(0, 1, 11)[:, None] * np.ones(3)
  rough = steady + np.array([0.0, 0.05, -0.05] * 4)[:11, None] * np.array([1.0, 1.1, 1.2])
  recs = {"rough": _record(rough), "steady": _record(steady)}
  o = Difference(Smoothness("rough"), Smoothness("steady")).outcome(recs)
  want = Smoothness("rough").values(recs) - Smoothness("steady").values(recs)
  mean, lo, hi = interval(want)
  assert o.verdict == REPRODUCED and o.n == 3 and lo > 0
  assert o.ours == f"{mean:+.2f}".replace("-", "−")


def test_relative_is_the_fraction_saved_paired_per_seed():
  # rounds to a target (discrete: the median with the sign-test interval): a at 20, 30, 40
  # on six seeds; b saves 10%, 20%, 30% of a's
  a = Metric("a", reach=0.9)
  b = Metric("b", reach=0.9)
  rounds = list(range(61))
  seeds = range(6)

  def reaching(at):
    return np.array([[1.0 if r >= t else 0.0 for t in at] for r in rounds])

  recs = {"a": _record(reaching([20, 30, 40] * 2), rounds, seeds),
          "b": _record(reaching([18, 24, 28] * 2), rounds, seeds)}
  o = Relative(a, b, margin=0.15).outcome(recs)
  assert o.kind == "median" and o.ours == "+0.20" and o.interval == "[+0.10, +0.30]"
  assert o.verdict == DIRECTION_ONLY  # the interval spans the margin
  tight = {"a": recs["a"], "b": _record(reaching([16, 24, 32] * 2), rounds, seeds)}  # 20%
  assert Relative(a, b, margin=0.15).outcome(tight).verdict == REPRODUCED
  # the paper's size (Table 3: 46%) above the whole interval: smaller than claimed
  assert Relative(a, b, claimed=0.46).outcome(tight).verdict == NOT_REPRODUCED
  assert Relative(a, b, margin=0.25).outcome(tight).verdict == NOT_REPRODUCED
  assert Relative(b, a).outcome(tight).verdict == CONTRADICTED
  same = {"a": recs["a"], "b": recs["a"]}
  assert Relative(a, b).outcome(same).verdict == NOT_REPRODUCED
  assert "/ (" in Relative(a, b, margin=0.46).statistic()


def test_top_group_share_counts_the_places_the_most_frequent_clients_hold():
  # 3 clients, k = 1: the round leaders are 0, 0, 1 (round 0 has no weights yet), so the most
  # frequent leader holds 2 of the 3 places; seed 1's leaders 2, 1, 0 give 1 of 3.
  from benchmarks.papers.hetero_agg import TopGroupShare
  nan = float("nan")
  a = {0: [[nan, nan], [0.8, 0.1], [0.6, 0.2], [0.1, 0.5]],   # client 0: [round][seed]
       1: [[nan, nan], [0.15, 0.2], [0.3, 0.5], [0.7, 0.3]],
       2: [[nan, nan], [0.05, 0.7], [0.1, 0.3], [0.2, 0.2]]}
  metrics = {f"alpha_{i:04d}": [[row] for row in a[i]] for i in a}  # [E][G][S]
  rec = {"r": {"metrics": {**metrics, "alpha_max": metrics["alpha_0000"]},
               "seeds": [0, 1], "rounds": [0, 1, 2, 3]}}
  np.testing.assert_allclose(TopGroupShare("r", k=1).values(rec), [2 / 3, 1 / 3])
  # k = 2 of 3 clients: the two most frequent hold 5 of 6 places (seed 0: {0, 1} twice, then
  # {1, 2}: client 1 three times, client 0 twice).
  np.testing.assert_allclose(TopGroupShare("r", k=2).values(rec)[0], 5 / 6)
