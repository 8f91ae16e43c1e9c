"""Claims declared, verdicts computed.

A claim names the paper's statement and number, and a test: which per-seed values it
compares (a `Metric` of one run), the statistic (the mean, paired per seed when two runs
share seeds and so randomness, with a two-sided Student-t confidence interval over seeds)
and its margin. The verdict follows from those numbers alone:

* `Difference(a, b, margin)`, the paper's "a beats b" (by at least ``margin``):
  reproduced when the interval of mean(a - b) lies above 0 and the mean reaches
  ``margin``; contradicted when the interval lies below 0; direction only when the mean
  is above 0 otherwise; not reproduced when it is not.
* `Equivalent(a, b, within)`, the paper's "a matches b": reproduced when the interval
  of mean(a - b) lies within ±``within``; contradicted when it lies wholly outside it;
  not reproduced otherwise.
* `AtLeast(a, value)` / `AtMost(a, value)`: the interval of mean(a) above (below) the
  value: reproduced; wholly on the other side: contradicted; the mean on the right
  side: direction only; otherwise not reproduced.
* `NotAttempted(reason)`.

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
STALE = "stale"  # only shown by --list: a report is never written from stale runs
VERDICTS = (REPRODUCED, DIRECTION_ONLY, NOT_REPRODUCED, CONTRADICTED, NOT_ATTEMPTED)
LEVEL = 0.95


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
  whose ``tune`` is below this value (e.g. the largest stable stepsize)."""
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

  def values(self, records: dict) -> np.ndarray:
    rec = records[self.run]
    if self.tune is None:
      return self._values(rec, self.point)
    pick, ok = self.tuned_points(rec)
    vals = np.stack([self._values(rec, g) for g in range(_grid_size(rec))])
    out = vals[pick, np.arange(vals.shape[1])]
    return np.where(ok, out, np.nan)

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
      if self.tune_below is not None:
        mean = "its" if self.tune_each_seed else "the seed-mean"
        out += f", at {whose} last grid point with {mean} {tuned} < {self.tune_below:g}"
      else:
        rule = ("each seed's grid point with its smallest" if self.tune_each_seed
                else "the grid point with the smallest seed-mean")
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


def _fmt(x: float, signed: bool) -> str:
  if np.isnan(x):
    return "n/a"
  if not np.isfinite(x):
    return "−∞" if x < 0 else "+∞"
  s = f"{x:+.2f}" if signed else f"{x:.2f}"
  return s.replace("-", "−")


def _outcome(verdict, mean, lo, hi, n, signed) -> Outcome:
  return Outcome(verdict, _fmt(mean, signed), f"[{_fmt(lo, signed)}, {_fmt(hi, signed)}]", n)


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
    return (self.a.run, self.b.run)

  def _described(self) -> str:
    return f"mean paired difference over seeds, {self.a.describe()} − {self.b.describe()}"

  def _interval(self, records):
    d = _paired(self.a, self.b, records)
    return (*interval(d), d.size)


@dataclasses.dataclass(frozen=True)
class Difference(_Paired):
  margin: float = 0.0

  def statistic(self) -> str:
    return f"{self._described()}; margin {self.margin:g}"

  def outcome(self, records) -> Outcome:
    mean, lo, hi, n = self._interval(records)
    if not np.isfinite(mean):
      verdict = NOT_REPRODUCED
    elif lo > 0 and mean >= self.margin:
      verdict = REPRODUCED
    elif hi < 0:
      verdict = CONTRADICTED
    elif mean > 0:
      verdict = DIRECTION_ONLY
    else:
      verdict = NOT_REPRODUCED
    return _outcome(verdict, mean, lo, hi, n, True)


@dataclasses.dataclass(frozen=True)
class Equivalent(_Paired):
  within: float = 0.0

  def statistic(self) -> str:
    return f"{self._described()}; equivalent within ±{self.within:g}"

  def outcome(self, records) -> Outcome:
    mean, lo, hi, n = self._interval(records)
    if -self.within <= lo and hi <= self.within:
      verdict = REPRODUCED
    elif lo > self.within or hi < -self.within:
      verdict = CONTRADICTED
    else:
      verdict = NOT_REPRODUCED
    return _outcome(verdict, mean, lo, hi, n, True)


@dataclasses.dataclass(frozen=True)
class AtLeast:
  a: Metric
  value: float
  above: bool = True

  def runs(self):
    return (self.a.run,)

  def statistic(self) -> str:
    return f"mean over seeds of {self.a.describe()} {'≥' if self.above else '≤'} {self.value:g}"

  def outcome(self, records) -> Outcome:
    v = self.a.values(records)
    mean, lo, hi = interval(v)
    sign = 1 if self.above else -1
    near, far = (lo, hi) if self.above else (hi, lo)
    if sign * (near - self.value) >= 0:
      verdict = REPRODUCED
    elif sign * (far - self.value) < 0:
      verdict = CONTRADICTED
    elif sign * (mean - self.value) >= 0:
      verdict = DIRECTION_ONLY
    else:
      verdict = NOT_REPRODUCED
    return _outcome(verdict, mean, lo, hi, v.size, False)


def AtMost(a: Metric, value: float) -> AtLeast:  # noqa: N802 (a test, named as one)
  return AtLeast(a, value, above=False)


@dataclasses.dataclass(frozen=True)
class Claim:
  """One row of a report: the paper's statement and value, and either a test on our runs
  or the reason it is not attempted."""
  id: str
  statement: str               # the paper's claim, in its words or close to them
  paper: str                   # the paper's number(s), or "—"
  test: Optional[object] = None
  not_attempted: str = ""      # the reason, when there is no test
  section: str = ""
  note: str = ""               # prose: explains, never changes the verdict

  def __post_init__(self):
    if (self.test is None) == (not self.not_attempted):
      raise ValueError(f"claim {self.id}: give a test or a not_attempted reason, not both")

  def outcome(self, records) -> Outcome:
    if self.test is None:
      return Outcome(NOT_ATTEMPTED, "—", "—", 0)
    return self.test.outcome(records)



@dataclasses.dataclass(frozen=True)
class LargerGap(Difference):
  """The paper's "the gain of a over b is larger than that of c over d" (e.g. in a more
  heterogeneous setting): mean over seeds of (a − b) − (c − d), each gap paired per seed
  and the two gaps paired by seed; the verdict as `Difference`'s."""
  c: Optional[Metric] = None
  d: Optional[Metric] = None

  def __post_init__(self):
    if self.c is None or self.d is None:
      raise ValueError("LargerGap needs the second gap's metrics c and d")

  def runs(self):
    return (self.a.run, self.b.run, self.c.run, self.d.run)

  def _described(self) -> str:
    return (f"mean over seeds of ({self.a.describe()} − {self.b.describe()}) − "
            f"({self.c.describe()} − {self.d.describe()}), paired per seed")

  def _interval(self, records):
    if list(records[self.a.run]["seeds"]) != list(records[self.c.run]["seeds"]):
      raise ValueError(f"{self.a.run} and {self.c.run} do not share seeds: no paired gaps")
    d = _paired(self.a, self.b, records) - _paired(self.c, self.d, records)
    return (*interval(d), d.size)


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
  over seeds of (a − b)/a, paired per seed; the verdict as `Difference`'s, ``margin`` a
  fraction."""

  def _described(self) -> str:
    return (f"mean over seeds of ({self.a.describe()} − {self.b.describe()}) / "
            f"({self.a.describe()}), paired per seed")

  def _interval(self, records):
    d = _paired(self.a, self.b, records) / self.a.values(records)
    return (*interval(d), d.size)
