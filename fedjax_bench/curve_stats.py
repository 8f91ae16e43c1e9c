"""Statistics of per-round accuracy curves (spec 003_hetero_agg §6.3): rounds to a target
accuracy, the smoothness value of Table 4, and the paper's confidence interval."""

import numpy as np


def rounds_to(acc: np.ndarray, rounds: np.ndarray, target: float = 0.9) -> np.ndarray:
  """min{r ≥ 1 : acc_r ≥ target} along axis 0 of ``acc`` ([E, ...], at ``rounds`` [E]);
  NaN where a run never reaches it (censored)."""
  acc, rounds = np.asarray(acc, np.float64), np.asarray(rounds)
  hit = (acc >= target) & (rounds >= 1).reshape((-1,) + (1,) * (acc.ndim - 1))
  first = np.argmax(hit, axis=0)
  return np.where(hit.any(axis=0), rounds[first], np.nan)


def smoothness(acc: np.ndarray) -> np.ndarray:
  """std(Δ) / |mean(Δ)| of Δ_r = acc_{r+1} − acc_r along axis 0 (spec A8: higher is
  rougher; ``acc`` holds rounds 1..T, population std)."""
  d = np.diff(np.asarray(acc, np.float64), axis=0)
  return np.std(d, axis=0) / np.abs(np.mean(d, axis=0))


def lag1_autocorrelation(acc: np.ndarray) -> np.ndarray:
  """The secondary reading of A8: the lag-1 autocorrelation of Δ, along axis 0."""
  d = np.diff(np.asarray(acc, np.float64), axis=0)
  d = d - d.mean(axis=0)
  return np.sum(d[1:] * d[:-1], axis=0) / np.sum(d * d, axis=0)


def paper_ci(values) -> tuple[float, float, float, int]:
  """(mean, low, high, n) with mean ± 1.96 · np.std(ddof=0) / √n, Table 3's formula
  (reconstructed in spec §7.1); NaNs (censored runs) are left out."""
  v = np.asarray(values, np.float64).ravel()
  v = v[np.isfinite(v)]
  if v.size == 0:
    return float("nan"), float("nan"), float("nan"), 0
  m, h = v.mean(), 1.96 * v.std() / np.sqrt(v.size)
  return float(m), float(m - h), float(m + h), int(v.size)
