"""Fed-EF's Appendix C.1 (Figs. 16-18): the compression discrepancy q_A² of TopK-0.1 and Sign
on simulated heterogeneous gradients, a seeded NumPy Monte-Carlo (no federated run).

Our reading (what the paper leaves out, resolved in docs/papers/fedef.md): n = 5
clients, d = 1100; client i's vector a_i has i.i.d. N(0, 0.01²) entries (Fig. 16) or
Laplace(0, 0.01) ones (Fig. 17), and its own block of coordinates [200 i, 200 i + 200) is
multiplied by s, its "strong signals" (the last 100 coordinates are nobody's); no error
term (one shot). For a compressor C,

  q_A² = ‖(1/n) Σ_i C(a_i) − ā‖² / ‖ā‖²   and   q_C² = ‖C(ā) − ā‖² / ‖ā‖²,   ā = (1/n) Σ_i a_i,

each averaged over the repetitions (the caption's formula, Fig. 18). TopK keeps the
max(1, ⌊0.1 d⌋) = 110 largest |x|; Sign is Definition 1's scaled sign (‖x‖₁/d) sign(x), the
whole vector one group. The paper averages 1e5 repetitions per point; here each seed is an
independent batch of `REPS` = 250 repetitions (10 seeds: 2,500), which fixes each mean to far
better than the claim needs (q² varies little between repetitions at d = 1100).

`Simulated` is a `Metric` whose per-seed values are this simulation's instead of a run's
and which reads no run, so the standard tests (`AtMost`) judge it by the same rules.
"""

import dataclasses
import functools

import numpy as np

from fedjax_bench.claims import Metric

N, D, BLOCK = 5, 1100, 200
SCALES = (2, 10, 100)
DISTRIBUTIONS = ("gaussian", "laplace")   # Figs. 16 and 17
COMPRESSORS = ("topk-0.1", "sign")
SCALE = 0.01                              # γ of N(0, γ²) and λ of Lap(0, λ)
TOPK = 0.1
SEEDS = tuple(range(10))
REPS = 250


def gradients(rng: np.random.Generator, distribution: str, s: float, reps: int) -> np.ndarray:
  """[reps, N, D]: each client's vector, its own block of 200 coordinates scaled by s."""
  shape = (reps, N, D)
  a = (rng.normal(0.0, SCALE, shape) if distribution == "gaussian"
       else rng.laplace(0.0, SCALE, shape))
  for i in range(N):
    a[:, i, BLOCK * i:BLOCK * (i + 1)] *= s
  return a


def topk(x: np.ndarray, k: float = TOPK) -> np.ndarray:
  """The max(1, ⌊k d⌋) entries of largest |x| of each vector (last axis), the rest 0."""
  keep = max(1, int(np.floor(k * x.shape[-1] + 1e-9)))
  idx = np.argpartition(-np.abs(x), keep - 1, axis=-1)[..., :keep]
  out = np.zeros_like(x)
  np.put_along_axis(out, idx, np.take_along_axis(x, idx, axis=-1), axis=-1)
  return out


def sign(x: np.ndarray) -> np.ndarray:
  """Definition 1's scaled sign: (‖x‖₁ / d) sign(x) of each vector (last axis)."""
  return np.abs(x).mean(axis=-1, keepdims=True) * np.sign(x)


COMPRESS = {"topk-0.1": topk, "sign": sign}


def _ratio(approx: np.ndarray, x: np.ndarray) -> np.ndarray:
  return ((approx - x) ** 2).sum(-1) / (x ** 2).sum(-1)


def discrepancies(a: np.ndarray, compressor: str) -> tuple[np.ndarray, np.ndarray]:
  """([reps] q_A², [reps] q_C²) of one compressor on the clients' vectors ``a`` [reps, N, D]."""
  c = COMPRESS[compressor]
  mean = a.mean(axis=1)
  return _ratio(c(a).mean(axis=1), mean), _ratio(c(mean), mean)


@functools.lru_cache(maxsize=None)
def table(seeds: tuple[int, ...] = SEEDS, reps: int = REPS) -> dict:
  """{(distribution, compressor, s): {"q_a2": [seeds], "q_c2": [seeds]}}: the mean over each
  seed's ``reps`` repetitions. Seed, distribution and s seed the draw, which both
  compressors share."""
  out = {}
  for di, dist in enumerate(DISTRIBUTIONS):
    for si, s in enumerate(SCALES):
      per = {c: ([], []) for c in COMPRESSORS}
      for seed in seeds:
        a = gradients(np.random.default_rng([seed, di, si]), dist, s, reps)
        for c in COMPRESSORS:
          qa, qc = discrepancies(a, c)
          per[c][0].append(qa.mean())
          per[c][1].append(qc.mean())
      for c, (qa, qc) in per.items():
        out[(dist, c, s)] = {"q_a2": np.array(qa), "q_c2": np.array(qc)}
  return out


@dataclasses.dataclass(frozen=True)
class Simulated(Metric):
  """Per-seed values of the simulation, not of a run: with ``case`` (distribution,
  compressor, s) that case's mean of ``metric`` ("q_a2" or "q_c2"); without, the largest
  over every case (the paper's "in all cases"). Reads no run."""
  run: str = "Appendix C.1 simulation"
  metric: str = "q_a2"
  case: tuple = ()

  def values(self, records: dict) -> np.ndarray:
    del records
    t = table()
    if self.case:
      return t[self.case][self.metric]
    return np.max([v[self.metric] for v in t.values()], axis=0)

  def runs(self) -> tuple[str, ...]:
    return ()

  def is_discrete(self, records: dict) -> bool:
    return False

  def describe(self) -> str:
    what = ("its " + "/".join(map(str, self.case)) if self.case
            else f"the largest over the {len(DISTRIBUTIONS) * len(COMPRESSORS) * len(SCALES)} "
            "cases (Gaussian and Laplace; TopK-0.1 and Sign; s = "
            + ", ".join(map(str, SCALES)) + ")")
    return (f"{self.label or self.run}: {self.metric}, the mean over a seed's {REPS} "
            f"repetitions (n = {N}, d = {D}), {what}")
