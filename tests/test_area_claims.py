"""The AREA paper's MNIST claims at CPU scale (spec 002 §7 E2, E3): multinomial logistic
regression (no bias, nu = 1e-3) on a 2,000-example subset of real MNIST, Dirichlet(0.1)
label skew, exact local gradients (full local batch, sigma = 0), one local step,
Delta = 4, lambda_i ~ N(10, 5) clipped at 0.5, one seed, T = 20 (the spec's E2 uses
T = 40 on sklearn digits; the ratio test (c) is g(20)/g(10) here). Per method a small
stepsize grid runs vmapped in one program; alpha* is chosen by §8 row 13 (smallest
time-average of log10 gap over [0, T], diverged runs excluded, ties -> larger alpha).

Slow (a few minutes on 2 CPU cores); skipped when MNIST is not available locally.
"""

import numpy as np
import pytest

from fedjax_bench import config, data, engine, experiment
from fedjax_bench.data.federated import Dataset, FederatedData

pytestmark = pytest.mark.slow

SUBSET = 2000
T = 20.0
GRID = {"area": [30.0, 100.0, 300.0, 1000.0, 3000.0],
        "fedbuff": [1.0, 3.0, 10.0, 30.0, 100.0],
        "mifa_async": [1.0, 3.0, 10.0, 30.0],
        "asfedavg": [10.0, 30.0, 100.0, 300.0],
        "sfedavg": [10.0, 30.0, 100.0, 300.0]}
_CACHE = {}
# Not reproduced on this subset, so not asserted (measured values in results/area/REPORT.md):
# E2 (a) AREA's gap >= 3x below every other method's, E2 (c)'s AREA half (g(T)/g(T/2) <= 0.2),
# E3's MIFA >= 2x better than AREA at n = 8.


def subset(n: int) -> Dataset:
  try:
    a = data.load_arrays("mnist")
  except Exception as e:  # no local copy: nothing to test against
    pytest.skip(f"MNIST not available locally: {e}")
  idx = np.random.default_rng(0).choice(len(a["train_y"]), SUBSET, replace=False)
  x, y = a["train_x"][idx], a["train_y"][idx]
  clients = data.make_partition("dirichlet", y, n, 0, alpha=0.1, shards_per_client=2,
                                num_classes=10)
  train = FederatedData.from_partition(x, y, clients)
  return Dataset(name="mnist", train=train, test_x=a["test_x"][:2000],
                 test_y=a["test_y"][:2000].astype(np.int32), num_classes=10,
                 feature_shape=tuple(x.shape[1:]), is_image=True)


def run_config(over: dict) -> config.Config:
  """``over`` on the papers' defaults, with about 40 evaluations."""
  cfg = config.resolve(over, seeds=[0])
  return config.replace(cfg, eval_every=max(1, cfg.eval.rounds // 40))


def run_method(n: int, algo: str) -> dict:
  """{alpha*, final gap, gaps at T/2 and T, time-average log gap} of one method at n."""
  if (n, algo) in _CACHE:
    return _CACHE[n, algo]
  dataset = _CACHE.setdefault(("data", n), None) or subset(n)
  _CACHE["data", n] = dataset
  over = {"algo": algo, "dataset": "mnist", "num_clients": n, "async_rates": "normal",
          "async_rate_std": 5.0, "sim_time": T, "batch_size": int(dataset.train.counts.max()),
          "sampling": "shuffle", "train_eval_examples": 0, "partition": "dirichlet",
          "alpha": 0.1, "clients_per_round": n}
  cfg = run_config(over)
  exp = experiment.setup(cfg, dataset=dataset)
  alphas = GRID[algo]
  h = engine.run(exp.build, exp.task, exp.hparams, seeds=[0], rounds=cfg.eval.rounds,
                 eval_every=cfg.eval.eval_every, grid=[{"client_lr": a} for a in alphas]).history
  t = np.maximum.accumulate(np.nan_to_num(h.metrics["cum_time"][:, :, 0]), axis=0)  # [E, G]
  gap = h.metrics["optimality_gap"][:, :, 0]
  bad = ~np.all(np.isfinite(gap), 0) | (np.nan_to_num(gap[-1], nan=np.inf) > gap[0])
  lg = np.log10(np.maximum(np.nan_to_num(gap, nan=1e30), 1e-8))
  score = np.sum(0.5 * (lg[1:] + lg[:-1]) * np.diff(t, axis=0), 0) / np.maximum(t[-1], 1e-9)
  score = np.where(bad, np.inf, score)
  assert np.isfinite(score).any(), f"{algo} n={n}: every alpha diverged"
  g = max((i for i in range(len(alphas)) if score[i] <= score.min() + 0.01),
          key=lambda i: alphas[i])
  at = lambda s: float(10 ** np.interp(s, t[:, g], lg[:, g]))
  # A choice at the grid's edge only bounds alpha* on one side: "low" means it may be lower.
  edge = "low" if g == 0 else "high" if g == len(alphas) - 1 else None
  out = {"alpha": alphas[g], "final": at(T), "half": at(T / 2), "score": float(score[g]),
         "edge": edge}
  _CACHE[n, algo] = out
  return out


def n64():
  return {a: run_method(64, a) for a in GRID}


def summary(r):
  return {a: (v["alpha"], v["edge"], f"{v['final']:.2e}", f"{v['final'] / v['half']:.2f}")
          for a, v in r.items()}


def test_e2b_area_tolerates_30x_larger_stepsizes_than_fedbuff_and_mifa():
  r = n64()
  assert r["area"]["alpha"] >= 30 * r["fedbuff"]["alpha"], summary(r)
  assert r["area"]["alpha"] >= 30 * r["mifa_async"]["alpha"], summary(r)
  # Edges that could flip the comparison: AREA's alpha* possibly lower, the others' higher.
  assert r["area"]["edge"] != "low", summary(r)
  assert r["fedbuff"]["edge"] != "high" and r["mifa_async"]["edge"] != "high", summary(r)


def test_e2c_fedbuff_and_asfedavg_plateau():
  """The half of E2 (c) that reproduces: g(T)/g(T/2) >= 0.3 for FedBuff and AS-FedAvg."""
  r = n64()
  for a in ("fedbuff", "asfedavg"):
    assert r[a]["final"] / r[a]["half"] >= 0.3, summary(r)


def test_e2d_sfedavg_is_the_slowest():
  r = n64()
  assert max(r, key=lambda a: r[a]["score"]) == "sfedavg", summary(r)
  assert r["sfedavg"]["edge"] is None, summary(r)  # else a step outside the grid may be faster


def test_e3_area_stepsize_grows_at_least_in_proportion_to_n():
  small, big = run_method(8, "area"), run_method(64, "area")
  assert big["alpha"] >= (64 / 8) * small["alpha"], (big, small)
  assert small["edge"] != "high" and big["edge"] != "low", (big, small)
