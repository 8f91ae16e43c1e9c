"""Claims declared, verdicts computed.

A claim names the paper's statement and number, and a test: which per-seed values it
compares (a `Metric` of one run), the statistic and its interval, and its margin. The
verdict follows from those numbers alone, by the rules below (`RULES`, printed at the top of
every VERDICTS.md; docs/claims.md explains them):

* The statistic is the mean over seeds (of paired per-seed differences when two runs share
  seeds, and so randomness) with a two-sided 95% Student-t interval. A statistic counted on
  a grid (rounds to a target, a grid point of a sweep: `Metric.is_discrete`), or one whose
  per-seed values all tie, is the median with the distribution-free interval of the exact
  sign test instead (`sign_interval`): a zero-width t-interval of tied values is no
  evidence.
* `Difference(a, b, margin, claimed)`, the paper's "a beats b" (by at least ``margin``; by
  ``claimed`` where the paper states a size, else the margin): contradicted when the
  interval lies below 0; not reproduced when it lies below the claimed size (smaller than
  claimed); reproduced when it lies above the claimed size; direction only when the
  statistic is above 0; not reproduced otherwise.
* `Equivalent(a, b, within)`, the paper's "a matches b": reproduced when the interval lies
  inside ±``within``; contradicted when it lies wholly outside; not reproduced otherwise.
* `AtLeast(a, value)` / `AtMost(a, value)`: the interval above (below) the value:
  reproduced; wholly on the other side: contradicted; the statistic on the claimed side:
  direction only; otherwise not reproduced.
* `Exact(a, b or value, relation)`: a deterministic property (an identity, an ordering
  that no seed can change), not a claim of the paper: it holds when every seed satisfies
  the relation and fails otherwise; no statistics.
* Ties: an end of an interval within `TIE_RTOL` of a boundary (0, a margin, ±within, a
  value) is on it, and a bound on a boundary is not past it, so no verdict turns on
  floating-point slack.

Prose may explain a verdict, never change it: the report prints these.
"""

import dataclasses
from typing import Optional, Sequence

import numpy as np

REPRODUCED = "reproduced"
DIRECTION_ONLY = "direction only"
NOT_REPRODUCED = "not reproduced"
CONTRADICTED = "contradicted"
NOT_ATTEMPTED = "not attempted"
HOLDS = "holds"   # an `Exact` check: every seed satisfies it
FAILS = "fails"
STALE = "stale"  # only shown by --list: a report is never written from stale runs
VERDICTS = (REPRODUCED, DIRECTION_ONLY, NOT_REPRODUCED, CONTRADICTED, NOT_ATTEMPTED)
RESULTS = VERDICTS[:4] + (HOLDS, FAILS, NOT_ATTEMPTED)  # of checks (`Claim.check`)
LEVEL = 0.95
POWER = 0.8  # of the smallest detectable effect each row prints (`detectable`)
SIGN_TEST_MIN_N = 6  # below this the exact sign test's 95% interval is unbounded
# Ties: a value within TIE_RTOL * max(1, |boundary|) of a boundary is on it. The records
# keep 7 significant digits; float arithmetic on them (a mean of equal values, a std of 0)
# is off by about 1e-15 relative, and any measured difference is far above 1e-6.
TIE_RTOL = 1e-6

RULES = f"""How a row's verdict follows from its numbers (`fedjax_bench/claims/verdicts.py`;
[docs/claims.md](../../docs/claims.md#verdict-rules)):

- **The statistic** is the mean over seeds of the row's per-seed values (paired per seed:
  the runs share seeds), with a two-sided {LEVEL:.0%} Student-t interval. A statistic
  counted on a grid (rounds to a target, a grid point of a sweep), or whose per-seed values
  all tie, is the **median** with the distribution-free interval of the exact sign test
  (order statistics; with fewer than 6 seeds it is [−∞, +∞]); its row says "median".
- **"a beats b"** (margin m ≥ 0; claimed size c = the paper's stated size where the row
  gives one, else m): **contradicted** when the whole interval is below 0; **not
  reproduced** when the whole interval is below c (the effect is smaller than claimed),
  whatever the sign of the statistic; **reproduced** when the whole interval is above c;
  **direction only** when the statistic is above 0; **not reproduced** otherwise.
- **"a matches b"** (±w): **reproduced** when the whole interval is inside (−w, +w);
  **contradicted** when it is wholly outside; **not reproduced** otherwise.
- **A threshold** v: **reproduced** when the whole interval is past v; **contradicted**
  when it is wholly on the other side; **direction only** when the statistic is on the
  claimed side; **not reproduced** otherwise.
- **Ties and grids**: a bound within 1e-6 × max(1, |boundary|) of a boundary (0, m,
  c, ±w, v) is on it, and a bound on a boundary is not past it: no margin is cleared, no
  equivalence holds and nothing is contradicted on a tie (the records keep 7 significant
  digits; floating-point slack is far below the tolerance).
- **Checks** (identities, our calibration, checks of an old report, deterministic
  properties, our own experiments) are not claims of the paper and are not counted with
  them; an exact check **holds** when every seed satisfies it, within the same tolerance,
  and **fails** otherwise.
- **Power**: beside its interval each row prints the smallest effect its seeds can detect:
  the true effect that a two-sided {LEVEL:.0%} t-test over its n seeds finds with
  probability {POWER:.0%} at the spread the row shows, (t_0.975 + t_0.8) s / √n; a median
  row detects nothing below {SIGN_TEST_MIN_N} seeds. A row whose claimed size is below it is
  underpowered: more seeds, not a different verdict, would settle it.
- **Multiplicity**: every row is judged at {LEVEL:.0%} on its own, with no correction across
  rows; REPORT.md says how many claims were tested and how many of its reproduced rows
  stay reproduced when every interval is widened to 1 − 0.05/N for N tested claims
  (Bonferroni over the report)."""


def _tol(boundary: float) -> float:
  return TIE_RTOL * max(1.0, abs(boundary))


def above(x: float, boundary: float) -> bool:
  """Whether ``x`` is past ``boundary`` upward, a tie (within `TIE_RTOL`) not counting."""
  return x > boundary + _tol(boundary)


def below(x: float, boundary: float) -> bool:
  return x < boundary - _tol(boundary)


@dataclasses.dataclass(frozen=True)
class Metric:
  """Per-seed values of one run: ``metric`` times ``scale`` averaged over the evaluations
  in the last ``window`` rounds (the last evaluation with window 0), or at round ``at``,
  or with ``reach`` the first evaluated round at which it is at least ``reach``; a seed
  that never reaches it counts one evaluation after the last (censored: the true round is
  at least that, so a difference with it is a bound that errs toward zero, never
  across it); ``point`` picks a grid point of a swept run.

  For asynchronous runs, whose rounds are events: with ``clock`` (a metric holding each
  evaluation's time, e.g. "cum_time"; the evaluation at round 0 is time 0) ``window`` and
  ``at`` are in its units: the time average (trapezoids) over its last ``window``, the
  value of the last evaluation at or before time ``at``; a seed whose clock is NaN
  (diverged) gives NaN. ``log_floor`` > 0: log10 of max(value, log_floor) before any
  averaging. ``spread``: each seed's |value − the mean over seeds| (its distance from the
  seed-mean curve: the band's width). ``metric`` may name a swept setting of the run
  (e.g. "client_lr"): its value at the grid point. ``tune`` (a Metric of the same run, its
  point ignored): the grid point is the one whose mean over seeds of ``tune`` is smallest,
  non-finite means excluded, ties to the later point (grids are declared ascending);
  ``tune_each_seed``: each seed's own smallest. ``tune_below``: instead the last grid point
  whose ``tune`` is below this value (e.g. the largest stable stepsize). A ``tune`` of another
  run picks the grid point there, and this run is read at its grid point of the same swept
  values (a fixed stepsize: the one tuned for another setting); NaN where it has none.

  ``discrete``: the values lie on a grid (tested with the sign test, not the t-interval);
  rounds to a target (``reach``) and swept settings are discrete without it."""
  run: str
  metric: str = "test_accuracy"
  window: float = 0
  at: Optional[float] = None
  scale: float = 1.0
  point: int = 0
  label: str = ""
  reach: Optional[float] = None
  clock: str = ""
  log_floor: float = 0.0
  spread: bool = False
  tune: Optional["Metric"] = None
  tune_each_seed: bool = False
  tune_below: Optional[float] = None
  discrete: bool = False

  def values(self, records: dict) -> np.ndarray:
    rec = records[self.run]
    if self.tune is None:
      return self._values(rec, self.point)
    pick, ok = self.picked_points(records)
    vals = np.stack([self._values(rec, g) for g in range(_grid_size(rec))])
    out = vals[pick, np.arange(vals.shape[1])]
    return np.where(ok, out, np.nan)

  def is_discrete(self, records: dict) -> bool:
    """Whether the values lie on a grid: declared, rounds to a target, or a swept setting."""
    return (self.discrete or self.reach is not None
            or self.metric not in records[self.run]["metrics"])

  def runs(self) -> tuple[str, ...]:
    """The runs this metric reads: its own, and the run its ``tune`` picks on."""
    return (self.run,) + (self.tune.runs() if self.tune is not None else ())

  def _points_of_other(self, records: dict):
    """This run's grid points with the swept values that ``tune`` picks on its own run. The
    other run may hold other seeds (tuning seeds apart from the reported ones) when the pick
    is one point for every seed (not ``tune_each_seed``)."""
    other = records[self.tune.run]
    seeds = len(records[self.run]["seeds"])
    there, ok = dataclasses.replace(self, run=self.tune.run).tuned_points(other)
    if list(other["seeds"]) != list(records[self.run]["seeds"]):
      if self.tune_each_seed:
        raise ValueError(f"{self.run} and {self.tune.run} do not share seeds: no seed's own "
                         "point to read")
      there, ok = np.full(seeds, there[0]), np.full(seeds, bool(ok.all()))
    grid = records[self.run].get("grid") or []
    here = np.array([grid.index(other["grid"][g]) if other["grid"][g] in grid else -1
                     for g in there])
    return np.maximum(here, 0), ok & (here >= 0)

  def picked_points(self, records: dict):
    """([S] the grid point read for each seed of ``run``, [S] whether it has one)."""
    seeds = len(records[self.run]["seeds"])
    if self.tune is None:
      return np.full(seeds, self.point), np.ones(seeds, bool)
    if self.tune.run == self.run:
      return self.tuned_points(records[self.run])
    return self._points_of_other(records)

  def tuned_points(self, rec: dict):
    """([S] the grid point ``tune`` picks for each seed, [S] whether any point was finite)."""
    if self.tune is None or self.tune.run != self.run or self.tune.tune is not None:
      raise ValueError(f"{self.run}: tune must be an untuned Metric of the same run")
    points = range(_grid_size(rec))
    score = np.stack([dataclasses.replace(self.tune, point=g)._values(rec, g) for g in points])
    score = np.where(np.isfinite(score), score, np.inf)  # [G, S]
    if not self.tune_each_seed:
      score = np.broadcast_to(score.mean(axis=1, keepdims=True), score.shape)
    last = score.shape[0] - 1
    if self.tune_below is not None:
      below = score < self.tune_below
      return last - np.argmax(below[::-1], axis=0), below.any(axis=0)
    pick = last - np.argmin(score[::-1], axis=0)  # [S]: ties to the later point
    return pick, np.isfinite(score.min(axis=0))

  def _values(self, rec: dict, point: int) -> np.ndarray:
    rounds = np.asarray(rec["rounds"])
    curve, scale = self._curve(rec, point), self.scale
    if self.log_floor > 0 or self.spread:
      curve, scale = scale * curve, 1.0
      if self.log_floor > 0:
        curve = np.log10(np.maximum(curve, self.log_floor))
      if self.spread:
        curve = np.abs(curve - curve.mean(axis=1, keepdims=True))
    if self.clock:
      return scale * self._timed(rec, point, rounds, curve)
    if self.reach is not None:
      hit = scale * curve >= self.reach  # [E, S]
      return np.where(hit.any(axis=0), rounds[np.argmax(hit, axis=0)], _after(rounds))
    if self.at is not None:
      hit = np.nonzero(rounds == self.at)[0]
      if not hit.size:
        raise ValueError(f"{self.run} has no evaluation at round {self.at}")
      return scale * curve[hit[0]]
    idx = (np.nonzero(rounds > rounds[-1] - self.window)[0] if self.window
           else np.array([rounds.size - 1]))
    return scale * curve[idx].mean(axis=0)

  def _curve(self, rec: dict, point: int) -> np.ndarray:
    """[E, S] of the metric, or of the swept setting's value at the grid point."""
    if self.metric in rec["metrics"]:
      return np.asarray(rec["metrics"][self.metric], dtype=np.float64)[:, point, :]
    grid = rec.get("grid") or []
    if point < len(grid) and self.metric in grid[point]:
      return np.full((len(rec["rounds"]), len(rec["seeds"])), float(grid[point][self.metric]))
    raise ValueError(f"{self.run} has no metric or swept setting {self.metric!r}")

  def _timed(self, rec, point, rounds, curve) -> np.ndarray:
    if self.reach is not None:
      raise ValueError(f"{self.run}: reach is counted in rounds; give no clock with it")
    t = np.asarray(rec["metrics"][self.clock], dtype=np.float64)[:, point, :].copy()
    if rounds[0] == 0:
      t[0] = 0.0  # no event yet: the clock has not been read
    bad = ~np.isfinite(t).all(axis=0)
    t = np.where(np.isfinite(t), t, 0.0)
    if self.at is not None:
      idx = np.maximum((t <= self.at).sum(axis=0) - 1, 0)
      out = curve[idx, np.arange(curve.shape[1])]
    elif self.window:
      end = t[-1]
      lo = np.maximum(t[:-1], end - self.window)
      width = np.clip(np.minimum(t[1:], end) - lo, 0.0, None)  # [E-1, S]
      mid = 0.5 * (curve[1:] + curve[:-1])
      total = width.sum(axis=0)
      out = np.where(total > 0, (width * mid).sum(axis=0) / np.where(total > 0, total, 1),
                     curve[-1])
    else:
      out = curve[-1]
    return np.where(bad, np.nan, out)

  def describe(self) -> str:
    name = self.label or self.run
    what = f"log10 {self.metric}" if self.log_floor else self.metric
    if self.spread:
      what = f"|{what} − its mean over seeds|"
    if self.reach is not None:
      return f"{name}: first round with {what} ≥ {self.reach:g}"
    if self.clock:
      where = (f"at {self.clock} {self.at:g}" if self.at is not None else
               f"time average over the last {self.window:g} units of {self.clock}" if self.window
               else "final")
    else:
      where = (f"at round {self.at}" if self.at is not None else
               f"mean of the last {self.window} rounds" if self.window else "final")
    out = f"{name}: {what} ({where})"
    if self.tune is not None:
      whose = "each seed's" if self.tune_each_seed else "the"
      tuned = self.tune.describe().split(': ', 1)[1]
      if self.tune.run != self.run:
        tuned += f" of {self.tune.label or self.tune.run} (its swept values, read here)"
      if self.tune_below is not None:
        mean = "its" if self.tune_each_seed else "the seed-mean"
        out += f", at {whose} last grid point with {mean} {tuned} < {self.tune_below:g}"
      else:
        most = "largest" if self.tune.scale < 0 else "smallest"  # a negated score: its best
        rule = (f"each seed's grid point with its {most}" if self.tune_each_seed
                else f"the grid point with the {most} seed-mean")
        out += f", at {rule} {tuned}"
    return out


def _grid_size(rec: dict) -> int:
  return len(rec["metrics"][next(iter(rec["metrics"]))][0])


def _after(rounds: np.ndarray) -> float:
  """One evaluation past the last round."""
  return float(rounds[-1] + (rounds[-1] - rounds[-2] if rounds.size > 1 else 1))


@dataclasses.dataclass(frozen=True)
class Outcome:
  verdict: str
  ours: str         # the statistic, e.g. "+2.51"
  interval: str     # e.g. "[+2.0, +3.0]"
  n: int
  kind: str = "mean"  # "mean" (Student-t), "median" (sign test) or "every seed" (`Exact`)
  detectable: str = ""  # "detects ≥ 0.91": the smallest effect these seeds can detect


def interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, float]:
  """(mean, lo, hi): the two-sided Student-t interval of the mean over ``values``
  (infinite with one value)."""
  from scipy import stats
  v = np.asarray(values, dtype=np.float64)
  mean = float(v.mean())
  if v.size < 2:
    return mean, -np.inf, np.inf
  half = stats.t.ppf(0.5 + level / 2, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size)
  return mean, mean - half, mean + half


def sign_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, float]:
  """(median, lo, hi): the distribution-free interval of the median that inverts the exact
  two-sided sign test: the k-th smallest and k-th largest value for the largest k with
  P(Binomial(n, ½) < k) ≤ (1 − level)/2, valid for tied and discrete values; infinite when
  no k qualifies (fewer than 6 values at 95%)."""
  from scipy import stats
  v = np.sort(np.asarray(values, dtype=np.float64))
  median = float(np.median(v))
  k = 0
  while k < v.size // 2 and stats.binom.cdf(k, v.size, 0.5) <= (1 - level) / 2:
    k += 1
  if k == 0:
    return median, -np.inf, np.inf
  return median, float(v[k - 1]), float(v[v.size - k])


def _tied(v: np.ndarray) -> bool:
  return v.size > 1 and bool(np.all(np.abs(v - v[0]) <= _tol(float(v[0]))))


def estimate(values: np.ndarray, discrete: bool, level: float = LEVEL):
  """(statistic, lo, hi, kind): the t-interval of the mean, or the sign-test interval of
  the median for discrete or all-tied values; (NaN, NaN, NaN, kind) when a value is NaN."""
  v = np.asarray(values, dtype=np.float64)
  kind = "median" if discrete or (np.isfinite(v).all() and _tied(v)) else "mean"
  if not np.isfinite(v).all():
    return np.nan, np.nan, np.nan, kind
  return (*(sign_interval(v, level) if kind == "median" else interval(v, level)), kind)


def _fmt(x: float, signed: bool) -> str:
  if np.isnan(x):
    return "n/a"
  if not np.isfinite(x):
    return "−∞" if x < 0 else "+∞"
  s = f"{x:+.2f}" if signed else f"{x:.2f}"
  return s.replace("-", "−")


def detectable(lo: float, hi: float, n: int, level: float = LEVEL, power: float = POWER) -> float:
  """The smallest true effect that a two-sided t-test at 95% over these ``n`` seeds detects
  with probability ``power``, at the spread the interval [lo, hi] (at ``level``) shows:
  (t_0.975 + t_power) s / sqrt(n), n - 1 degrees of freedom. Infinite with one seed."""
  from scipy import stats
  if n < 2 or not (np.isfinite(lo) and np.isfinite(hi)):
    return np.inf
  se = (hi - lo) / 2 / stats.t.ppf(0.5 + level / 2, n - 1)
  return float((stats.t.ppf(0.5 + LEVEL / 2, n - 1) + stats.t.ppf(power, n - 1)) * se)


def _detectable_text(lo, hi, n, kind, level) -> str:
  """"detects ≥ 0.91", "detects nothing below 6 seeds", or "" (not a statistical row)."""
  if kind == "every seed" or (kind == "median" and n >= SIGN_TEST_MIN_N):
    return ""
  if kind == "median":
    return f"detects nothing below {SIGN_TEST_MIN_N} seeds"
  d = detectable(lo, hi, n, level)
  return f"detects ≥ {_fmt(d, False)}" if np.isfinite(d) else "detects nothing with one seed"


def _outcome(verdict, mean, lo, hi, n, signed, kind="mean", level=LEVEL) -> Outcome:
  return Outcome(verdict, _fmt(mean, signed), f"[{_fmt(lo, signed)}, {_fmt(hi, signed)}]", n,
                 kind, _detectable_text(lo, hi, n, kind, level))


def _runs_of(metrics) -> tuple[str, ...]:
  """The runs some metrics read (tuning runs included), each once, in order."""
  return tuple(dict.fromkeys(r for m in metrics for r in m.runs()))


def _paired(a: Metric, b: Metric, records) -> np.ndarray:
  ra, rb = records[a.run], records[b.run]
  if list(ra["seeds"]) != list(rb["seeds"]):
    raise ValueError(f"{a.run} and {b.run} do not share seeds: no paired difference")
  return a.values(records) - b.values(records)


@dataclasses.dataclass(frozen=True)
class _Paired:
  a: Metric
  b: Metric

  def runs(self):
    return _runs_of(self.metrics())

  def metrics(self):
    return (self.a, self.b)

  def _described(self, kind: str = "mean") -> str:
    return f"{kind} paired difference over seeds, {self.a.describe()} − {self.b.describe()}"

  def _sample(self, records) -> np.ndarray:
    """The per-seed values the statistic is of."""
    return _paired(self.a, self.b, records)

  def _estimate(self, records, level):
    d = self._sample(records)
    discrete = any(m.is_discrete(records) for m in self.metrics())
    return (*estimate(d, discrete, level), d.size)


@dataclasses.dataclass(frozen=True)
class Difference(_Paired):
  margin: float = 0.0
  claimed: Optional[float] = None  # the paper's stated size, when above the margin

  def __post_init__(self):
    if self.margin < 0 or (self.claimed is not None and self.claimed < self.margin):
      raise ValueError("a margin is at least 0, and a claimed size at least the margin")

  def size(self) -> float:
    return self.margin if self.claimed is None else self.claimed

  def statistic(self, kind: str = "mean") -> str:
    out = f"{self._described(kind)}; margin {self.margin:g}"
    if self.claimed is not None:
      out += f"; the paper's size {self.claimed:g}"
    return out

  def outcome(self, records, level: float = LEVEL) -> Outcome:
    stat, lo, hi, kind, n = self._estimate(records, level)
    if not np.isfinite(stat):
      verdict = NOT_REPRODUCED
    elif below(hi, 0.0):
      verdict = CONTRADICTED
    elif self.size() > 0 and below(hi, self.size()):
      verdict = NOT_REPRODUCED  # smaller than claimed, whatever the sign
    elif above(lo, self.size()):
      verdict = REPRODUCED
    elif above(stat, 0.0):
      verdict = DIRECTION_ONLY
    else:
      verdict = NOT_REPRODUCED
    return _outcome(verdict, stat, lo, hi, n, True, kind, level)


@dataclasses.dataclass(frozen=True)
class Equivalent(_Paired):
  within: float = 0.0

  def __post_init__(self):
    if not self.within > 0:
      raise ValueError("equivalence needs a tolerance above 0; an identity is an Exact check")

  def statistic(self, kind: str = "mean") -> str:
    return f"{self._described(kind)}; equivalent within ±{self.within:g}"

  def outcome(self, records, level: float = LEVEL) -> Outcome:
    stat, lo, hi, kind, n = self._estimate(records, level)
    if not np.isfinite(stat):
      verdict = NOT_REPRODUCED
    elif above(lo, -self.within) and below(hi, self.within):
      verdict = REPRODUCED
    elif above(lo, self.within) or below(hi, -self.within):
      verdict = CONTRADICTED
    else:
      verdict = NOT_REPRODUCED
    return _outcome(verdict, stat, lo, hi, n, True, kind, level)


@dataclasses.dataclass(frozen=True)
class AtLeast:
  a: Metric
  value: float
  above: bool = True

  def runs(self):
    return _runs_of(self.metrics())

  def metrics(self):
    return (self.a,)

  def statistic(self, kind: str = "mean") -> str:
    return f"{kind} over seeds of {self.a.describe()} {'≥' if self.above else '≤'} {self.value:g}"

  def outcome(self, records, level: float = LEVEL) -> Outcome:
    v = self.a.values(records)
    stat, lo, hi, kind = estimate(v, self.a.is_discrete(records), level)
    past = above if self.above else below    # on the claimed side of the value
    short = below if self.above else above
    near, far = (lo, hi) if self.above else (hi, lo)
    if not np.isfinite(stat):
      verdict = NOT_REPRODUCED
    elif past(near, self.value):
      verdict = REPRODUCED
    elif short(far, self.value):
      verdict = CONTRADICTED
    elif past(stat, self.value):
      verdict = DIRECTION_ONLY
    else:
      verdict = NOT_REPRODUCED
    return _outcome(verdict, stat, lo, hi, v.size, False, kind, level)


def AtMost(a: Metric, value: float) -> AtLeast:  # noqa: N802 (a test, named as one)
  return AtLeast(a, value, above=False)


@dataclasses.dataclass(frozen=True)
class Exact:
  """A deterministic property checked on every seed, without statistics: ``a`` minus ``b``
  (paired per seed) or minus ``value`` is 0 (``relation`` "==", within `TIE_RTOL`) or above
  0 (">", beyond it) on every seed: holds, else fails. For checks only (`Claim.check`)."""
  a: Metric
  b: Optional[Metric] = None
  value: Optional[float] = None
  relation: str = "=="

  def __post_init__(self):
    if (self.b is None) == (self.value is None) or self.relation not in ("==", ">"):
      raise ValueError("Exact compares a with b or with a value, by '==' or '>'")

  def runs(self):
    return _runs_of(self.metrics())

  def metrics(self):
    return (self.a,) + ((self.b,) if self.b is not None else ())

  def statistic(self, kind: str = "every seed") -> str:
    del kind
    other = self.b.describe() if self.b is not None else f"{self.value:g}"
    rel = "equals" if self.relation == "==" else "exceeds"
    return (f"on every seed, {self.a.describe()} {rel} {other} (within {TIE_RTOL:g} relative; "
            "an exact check, no statistics)")

  def outcome(self, records, level: float = LEVEL) -> Outcome:
    del level  # no interval
    if self.b is not None:
      d, ref = _paired(self.a, self.b, records), self.b.values(records)
    else:
      d = self.a.values(records) - self.value
      ref = np.full(d.shape, self.value)
    if self.relation == "==":
      ok = np.abs(d) <= np.array([_tol(float(r)) for r in ref])
    else:
      ok = np.array([above(float(x), float(r)) for x, r in zip(d + ref, ref)])
    verdict = HOLDS if np.isfinite(d).all() and ok.all() else FAILS
    shown = d if self.b is not None else d + self.value  # a difference, or a's own values
    return _outcome(verdict, float(np.mean(shown)), float(np.min(shown)), float(np.max(shown)),
                    d.size, self.b is not None, "every seed")


@dataclasses.dataclass(frozen=True)
class Claim:
  """One row of a report: the paper's statement and value, and either a test on our runs
  or the reason it is not attempted. With ``check`` (what kind: an identity, our
  calibration, a check of an old report, a deterministic property, our own experiment) the
  row is not a claim of the paper: the report shows it under Checks, outside the verdict
  counts."""
  id: str
  statement: str               # the paper's claim, in its words or close to them
  paper: str                   # the paper's number(s), or "—"
  test: Optional[object] = None
  not_attempted: str = ""      # the reason, when there is no test
  section: str = ""
  note: str = ""               # prose: explains, never changes the verdict
  check: str = ""

  def __post_init__(self):
    if (self.test is None) == (not self.not_attempted):
      raise ValueError(f"claim {self.id}: give a test or a not_attempted reason, not both")
    if isinstance(self.test, Exact) and not self.check:
      raise ValueError(f"claim {self.id}: an Exact test is a check (give its kind)")

  def outcome(self, records, level: float = LEVEL) -> Outcome:
    if self.test is None:
      return Outcome(NOT_ATTEMPTED, "—", "—", 0)
    return self.test.outcome(records, level)


@dataclasses.dataclass(frozen=True)
class LargerGap(Difference):
  """The paper's "the gain of a over b is larger than that of c over d" (e.g. in a more
  heterogeneous setting): mean over seeds of (a − b) − (c − d), each gap paired per seed
  and the two gaps paired by seed; the verdict as `Difference`'s."""
  c: Optional[Metric] = None
  d: Optional[Metric] = None

  def __post_init__(self):
    super().__post_init__()
    if self.c is None or self.d is None:
      raise ValueError("LargerGap needs the second gap's metrics c and d")

  def metrics(self):
    return (self.a, self.b, self.c, self.d)

  def _described(self, kind: str = "mean") -> str:
    return (f"{kind} over seeds of ({self.a.describe()} − {self.b.describe()}) − "
            f"({self.c.describe()} − {self.d.describe()}), paired per seed")

  def _sample(self, records) -> np.ndarray:
    if list(records[self.a.run]["seeds"]) != list(records[self.c.run]["seeds"]):
      raise ValueError(f"{self.a.run} and {self.c.run} do not share seeds: no paired gaps")
    return _paired(self.a, self.b, records) - _paired(self.c, self.d, records)


def smoothness(acc: np.ndarray) -> np.ndarray:
  """std(Δ) / |mean(Δ)| of Δ_r = acc_{r+1} − acc_r along axis 0 (higher is rougher; ``acc``
  holds the evaluations from the first one counted on; population std)."""
  d = np.diff(np.asarray(acc, np.float64), axis=0)
  return np.std(d, axis=0) / np.abs(np.mean(d, axis=0))


@dataclasses.dataclass(frozen=True)
class Smoothness(Metric):
  """Per-seed smoothness of a run's curve (the loss-aware aggregation paper's Table 4, as we
  read its smoothness value, docs/papers/hetero_agg.md): std(Δ)/|mean(Δ)| of the changes Δ between
  consecutive evaluations from round
  ``start`` on, population std (higher is rougher)."""
  start: int = 1

  def values(self, records: dict) -> np.ndarray:
    rec = records[self.run]
    curve = self.scale * self._curve(rec, self.point)
    return smoothness(curve[np.asarray(rec["rounds"]) >= self.start])

  def describe(self) -> str:
    return (f"{self.label or self.run}: smoothness std(Δ)/|mean(Δ)| of {self.metric} "
            f"from round {self.start}")


@dataclasses.dataclass(frozen=True)
class Relative(Difference):
  """The paper's "a exceeds b by a fraction of a" (e.g. rounds saved, relative): the mean
  over seeds of (a − b)/a, paired per seed; the verdict as `Difference`'s, ``margin`` and
  ``claimed`` fractions."""

  def _described(self, kind: str = "mean") -> str:
    return (f"{kind} over seeds of ({self.a.describe()} − {self.b.describe()}) / "
            f"({self.a.describe()}), paired per seed")

  def _sample(self, records) -> np.ndarray:
    return _paired(self.a, self.b, records) / self.a.values(records)
