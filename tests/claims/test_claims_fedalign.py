"""`LargerGap` (fedjax_bench/claims/verdicts.py): "the gain of a over b is larger than that
of c over d", the test FedALIGN's T5 and T6 rows use (benchmarks/papers/fedalign.py)."""

import numpy as np
import pytest

from fedjax_bench.claims import Metric, Paper, Run
from fedjax_bench.claims import verdicts
from fedjax_bench.claims.verdicts import Claim, LargerGap

from tests.claims.test_claims import T975, records


def gap(margin=0.0):
  return LargerGap(Metric("a"), Metric("b"), margin, c=Metric("c"), d=Metric("d"))


@pytest.mark.parametrize("first, second, margin, verdict", [
    ([3.0, 3.2, 2.8, 3.1, 2.9], [1.0] * 5, 1.0, verdicts.REPRODUCED),
    ([3.0, 3.2, 2.8, 3.1, 2.9], [1.0] * 5, 5.0, verdicts.NOT_REPRODUCED),  # below: smaller
    ([3.0, 3.2, 2.8, 3.1, 2.9], [1.0] * 5, 2.0, verdicts.DIRECTION_ONLY),  # spans the margin
    ([1.0, -1.0, 2.0, -0.5, 0.8], [0.0] * 5, 0.0, verdicts.DIRECTION_ONLY),
    ([0.0] * 5, [0.2, -0.1, 0.3, -0.2, 0.1], 0.0, verdicts.NOT_REPRODUCED),
    ([1.0] * 5, [4.0, 4.2, 3.8, 4.1, 3.9], 0.0, verdicts.CONTRADICTED),
])
def test_verdicts_are_differences_of_the_paired_gaps(first, second, margin, verdict):
  zeros = [0.0] * 5
  out = gap(margin).outcome(records(a=first, b=zeros, c=second, d=zeros))
  assert out.verdict == verdict
  v = np.asarray(first) - np.asarray(second)
  half = T975[4] * v.std(ddof=1) / np.sqrt(5)
  assert out.ours == f"{v.mean():+.2f}".replace("-", "−")
  assert out.interval == f"[{v.mean() - half:+.2f}, {v.mean() + half:+.2f}]".replace("-", "−")
  assert out.n == 5


def test_each_gap_is_paired_per_seed_and_the_gaps_by_seed():
  # Per seed: gap 1 is about 2, gap 2 about 1, under a spread of ±10 between seeds.
  recs = records(a=[12.1, 22.0, 1.9], b=[10.0, 20.0, 0.0], c=[31.0, 1.0, 11.0],
                 d=[30.0, 0.0, 10.0])
  out = gap(0.5).outcome(recs)
  assert out.verdict == verdicts.REPRODUCED and out.interval == "[+0.75, +1.25]"
  recs["c"]["seeds"] = recs["d"]["seeds"] = [3, 4, 5]
  with pytest.raises(ValueError, match="do not share seeds"):
    gap().outcome(recs)


def test_it_reads_four_runs_and_needs_both_gaps():
  assert gap().runs() == ("a", "b", "c", "d")
  assert "(a: test_accuracy (final) − b: test_accuracy (final)) − (c:" in gap().statistic()
  with pytest.raises(ValueError, match="second gap"):
    LargerGap(Metric("a"), Metric("b"))
  with pytest.raises(ValueError, match="reads run 'd'"):
    Paper("p", "t", "s", runs=tuple(Run(n, {}) for n in "abc"),
          claims=(Claim("x", "s", "—", gap()),))


def _paper():
  from benchmarks.papers import fedalign
  return fedalign.PAPER


def test_runs_follow_the_authors_protocol():
  """The authors' DataLoader drops the partial batch; their Fig. 3 uses 120 shards of 50,
  20 per client; every seed redraws data, priority clients and test set, shared by the
  methods of a setting; the slow tier's seeds (docs/claims.md): 10 on MNIST and for the ε
  sweeps, 20 for the other runs on generated data."""
  runs = _paper().runs
  assert len(runs) >= 40
  for run in runs:
    assert run.settings["sampling"] == "shuffle_drop_last", run.name
    generated = run.settings["dataset"] != "mnist" and not run.name.endswith("_align_eps")
    seeds = tuple(range(20 if generated else 10))
    assert run.settings["data_per_seed"] is True and run.seeds == seeds, run.name
  for name in ("fig3_local", "fig3_align"):
    s = next(r for r in runs if r.name == name).settings
    assert (s["num_shards"], s["shard_size"], s["shards_per_client"]) == (120, 50, 20), name


def test_the_best_eps_sweeps_are_fig2s_runs_over_a_grid_of_eps():
  """T2-best-eps: FedALIGN over ε at each Fig. 2 noise level, its other settings those of the
  level's FedALIGN run; 10 seeds (a median's sign-test interval is unbounded below 6), and
  each seed's own best grid point is read."""
  from benchmarks.papers import fedalign
  p = _paper()
  for level, eps in fedalign.PAPER_EPS.items():
    sweep, base = p.run(f"fig2_{level}_align_eps"), p.run(f"fig2_{level}_align")
    assert dict(sweep.sweep) == {"align_epsilon": fedalign.EPS_GRID} and eps in fedalign.EPS_GRID
    assert {**sweep.settings, "align_epsilon": eps} == dict(base.settings)
    assert len(sweep.seeds) >= verdicts.SIGN_TEST_MIN_N
    claim = next(c for c in p.claims if c.id == f"T2-best-eps-{level}")
    assert claim.test.a.tune_each_seed and claim.test.a.tune.scale < 0  # the highest accuracy
    assert set(claim.test.runs()) == {sweep.name}
