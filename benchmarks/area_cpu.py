"""AREA and its asynchronous baselines at CPU scale (spec 002 §5, §6.3, §7, §8 rows 12-13).

  python benchmarks/area_cpu.py --experiment=quadratic [--seeds=0,1,2]
  python benchmarks/area_cpu.py --experiment=bias
  python benchmarks/area_cpu.py --experiment=mnist [--num_clients=128] [--partition=dirichlet]
      [--local_steps=1] [--async_rates=uniform|normal] [--sim_time=5] [--seeds=0,1,2]
      [--methods=area,fedbuff,...] [--alphas=10,100,1000] [--out=results/area] [--render_only]

quadratic (§7 E1, Fig. 4): float64, n = 50, f^_i(x) = 1/2 (100 i x - 1)^2, exact gradients,
lambda_i ~ N(10, 3) clipped at 0.5, Delta = 4 (S-FedAvg: Delta = n), T = 10, every method
over the grid {1, 2, 5, 7} x 1e-7 .. 1e-5; metric (x_s - x*)^2 / x*^2 against simulated
time, geometric mean over seeds; the E1 acceptance (a)-(d) as claims.

bias (§7 E5): two clients (x - 1)^2 and (x + 1)^2, lambda = (9, 1), Delta in {1, 2},
alpha = 0.1, T = 400, x0 = 0 (the model's init; the spec's x0 = 3 only changes the
transient); |x_s| averaged over t in (200, 400]: AREA and MIFA about 0, FedBuff and
AS-FedAvg about the rate-weighted 0.8.

mnist (Figs. 1, 2, 5-10 at reduced cost): the paper's multinomial logistic regression
(no bias, nu = 1e-3, b = 32, Delta = 4): the papers' defaults of config.resolve; per method a
stepsize grid x seeds vmapped in one program; alpha chosen by §8 row 13 (smallest
time-average of log10 optimality gap over [0, T]; diverged runs excluded: a non-finite
value or a final gap above the initial one on any seed; ties within 0.01 decade -> the
larger alpha). The flags --num_clients, --partition, --alpha (Dirichlet), --local_steps,
--async_rates, --async_rate_std, --sim_time, --batch_size, --async_delta, --partition_seed,
--data_dir, --cache_dir and --seeds of the main CLI apply; any other run setting is refused.

Confirmation at the paper's scale: --chosen_from=DIR runs, per method, only the alpha the
grid in DIR chose for the same setting (any horizon), e.g. with --seeds=10 --sim_time=20
--out=results/area/seeds10; --refine=area,fedbuff adds 0.3x and 3x that alpha for the
methods named, and the same rule picks again among the three.

Each (setting, method) grid run is cached in <out>/old_cache/<setting>_<method>.json and
skipped on a rerun with the same config; per setting the script writes <out>/<setting>.md
(tables, claims), <out>/<setting>.json and <out>/<setting>.png. The cross-setting claims
(S-FedAvg uniform vs normal rates, AREA's rank against n, K = 50 vs K = 1) are written
to <out>/cross_claims.md from whatever settings have been run; `figure()` maps a setting
to the paper's figure (n = 128 / 4, Dirichlet / iid, K = 1 / 50: Figs. 1, 2, 5-10) and
`cross_claims` holds the §6.3 claims of each. Exit status 1 if a claim fails.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fedjax_bench import host_devices  # noqa: E402

host_devices.use_all_cores()

from absl import flags  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402

from fedjax_bench import cli, config, engine, experiment, results  # noqa: E402
from fedjax_bench import flags as run_flags  # noqa: E402

METHODS = ("area", "fedbuff", "asfedavg", "mifa_async", "sfedavg")
LABELS = {"area": "AREA", "fedbuff": "FedBuff", "asfedavg": "AS-FedAvg",
          "mifa_async": "MIFA", "sfedavg": "S-FedAvg"}
# The spec's grid {1e-3, ..., 1e4}, trimmed per method to where a run is not clearly
# divergent or hopelessly slow (short probes, results/area/REPORT.md).
MNIST_GRID = {"area": [100.0, 1000.0, 10000.0],
              "fedbuff": [1.0, 10.0, 100.0],
              "asfedavg": [10.0, 100.0, 1000.0],
              "mifa_async": [0.1, 1.0, 10.0, 100.0],
              "sfedavg": [1.0, 10.0, 100.0, 1000.0]}
# n <= 16 (Fig. 5, 6, 9, 10): g_i = w_i grad f^_i with w_i ~ 1/n, so the stable stepsizes
# are about n/128 of the n = 128 ones; every point of the n = 128 grid but the largest
# diverged at n = 4.
MNIST_GRID_SMALL = {"area": [0.1, 1.0, 10.0, 100.0, 1000.0],
                    "fedbuff": [0.01, 0.1, 1.0, 10.0],
                    "asfedavg": [0.1, 1.0, 10.0, 100.0],
                    "mifa_async": [0.1, 1.0, 10.0],
                    "sfedavg": [0.1, 1.0, 10.0, 100.0]}
# K = 50 (Figs. 2, 8) costs ~50x per event: four or five points per method, half decades where a
# first two-point grid ({100, 1000}, {1, 10}, {10, 100}, {0.1, 1}, {10, 100}) left the
# choice on an edge.
MNIST_GRID_K50 = {"area": [30.0, 100.0, 300.0, 1000.0], "fedbuff": [0.1, 0.3, 1.0, 3.0, 10.0],
                  "asfedavg": [10.0, 100.0, 300.0, 1000.0],
                  "mifa_async": [0.03, 0.1, 0.3, 1.0], "sfedavg": [10.0, 100.0, 300.0, 1000.0]}
# n = 4 with K = 50 (Figs. 6, 10): half decades below the K = 1 choice (1 for every method).
MNIST_GRID_SMALL_K50 = {a: [0.1, 0.3, 1.0, 3.0] for a in METHODS}
MNIST_GRID_SMALL_K50["fedbuff"] = [0.03] + MNIST_GRID_SMALL_K50["fedbuff"]  # 0.1 was its edge
QUAD_GRID = [float(f"{m}e{e}") for e in (-7, -6, -5) for m in (1, 2, 5, 7)]
# MIFA's best alpha sat on the spec grid's lower edge (1e-7): extended down by a decade.
QUAD_GRID = {a: ([1e-8, 2e-8, 5e-8] if a == "mifa_async" else []) + QUAD_GRID for a in METHODS}
TIE = 0.01  # decades
FLOOR = {"mnist": 1e-8, "quadratic": 1e-32}
# The grid runs' cache under --out; `runs/` is the claims runner's (benchmarks/papers/area.py).
CACHE = "old_cache"

flags.DEFINE_enum("experiment", "mnist", ["quadratic", "bias", "mnist"], "Which experiment.")
flags.DEFINE_list("methods", list(METHODS), "Methods to run.")
flags.DEFINE_list("alphas", [], "Stepsize grid for every method (default: per method, "
                  "MNIST_GRID or QUAD_GRID).")
flags.DEFINE_integer("evals", 40, "About this many evaluations over [0, T].")
flags.DEFINE_string("out", "results/area", "Where the tables, JSON and plots go.")
flags.DEFINE_string("chosen_from", "", "Confirmation mode: a directory holding an earlier "
                    "grid run of the same setting (any horizon); each method runs only the "
                    "alpha chosen there, with --seeds (e.g. 0,...,9) and --sim_time.")
flags.DEFINE_list("refine", [], "With --chosen_from: methods that also run 0.3x and 3x their "
                  "chosen alpha (half decades); the same rule then picks among the three.")
flags.DEFINE_bool("render_only", False, "Rebuild tables, claims and plots from the cached "
                  "runs instead of running.")
FLAGS = flags.FLAGS

# The run settings of the command line that reach the runs (any other is refused).
PASSTHROUGH = ("num_clients", "partition", "alpha", "local_steps", "async_rates",
               "async_rate_std", "sim_time", "batch_size", "async_delta", "partition_seed",
               "data_dir", "cache_dir")


def log(msg):
  print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------------------
# Running


def make_cfg(dataset: str, algo: str, overrides: dict, seeds) -> config.Config:
  """The run's Config: ``overrides`` on the papers' defaults, about --evals evaluations."""
  cfg = config.resolve({"algo": algo, "dataset": dataset, **overrides}, seeds=seeds)
  return config.replace(cfg, eval_every=max(1, cfg.eval.rounds // FLAGS.evals))


def setting_name(cfg: dict) -> str:
  if cfg["dataset"] == "quadratic":
    return f"quadratic_n{cfg['num_clients']}_{cfg['async_rates']}_T{cfg['sim_time']:g}"
  part = "iid" if cfg["partition"] == "iid" else f"dir{cfg['alpha']:g}"
  return (f"mnist_n{cfg['num_clients']}_{part}_K{cfg['local_steps']}_{cfg['async_rates']}"
          f"_T{cfg['sim_time']:g}")


CFG_KEYS = ("dataset", "num_clients", "partition", "alpha", "local_steps", "batch_size",
            "async_rates", "async_rate", "async_rate_std", "async_min_rate", "async_delta",
            "sim_time", "rounds", "eval_every", "l2", "logreg_bias", "model",
            "partition_seed")


def run_grid(cfg: config.Config, alphas, seeds, cache: str, metrics) -> dict:
  """The grid alphas x seeds of one method, from the cache or freshly run."""
  flat = cfg.flat()
  key = {k: flat.get(k) for k in CFG_KEYS}
  key.update(algo=cfg.algo, alphas=list(map(float, alphas)), seeds=list(seeds))
  if os.path.exists(cache):
    old = json.load(open(cache))
    if old["key"] == key:
      return old
    if FLAGS.render_only:
      log(f"  {cache}: config differs, using it anyway (--render_only)")
      return old
  if FLAGS.render_only:
    raise FileNotFoundError(cache)
  t0 = time.perf_counter()
  exp = experiment.setup(cfg, seeds=list(seeds))
  res = engine.run(exp.build, exp.task, exp.hparams, seeds=list(seeds), rounds=cfg.eval.rounds,
                   eval_every=cfg.eval.eval_every,
                   grid=[{"client_lr": float(a)} for a in alphas])
  h = res.history
  out = {"key": key, "rounds": h.rounds.tolist(), "seconds": time.perf_counter() - t0,
         "metrics": {m: h.metrics[m].tolist() for m in ("cum_time", *metrics)},
         "environment": results.environment_info()}
  results.atomic_write_json(cache, out)
  return out


# ---------------------------------------------------------------------------------------
# Analysis (arrays [E, G, S])


def clean_times(t):
  t = np.nan_to_num(np.asarray(t, np.float64))
  return np.maximum.accumulate(t, axis=0)


def diverged(v):
  """[G] bool: a non-finite value, or a final value above the initial one, on any seed."""
  v = np.asarray(v)
  bad = ~np.all(np.isfinite(v), axis=0) | (np.nan_to_num(v[-1], nan=np.inf) > v[0])
  return bad.any(axis=-1)


def log_time_average(t, v, horizon, floor):
  """[G, S] time-average of log10 v over [0, horizon] (trapezoid on the evaluations)."""
  t = np.minimum(clean_times(t), horizon)
  lv = np.log10(np.maximum(np.nan_to_num(np.asarray(v), nan=1e30, posinf=1e30), floor))
  area = np.sum(0.5 * (lv[1:] + lv[:-1]) * np.diff(t, axis=0), axis=0)
  return area / np.maximum(t[-1] - t[0], 1e-12)


def select(alphas, scores, bad):
  """Index of the chosen alpha: smallest seed-mean score, not diverged, ties -> larger."""
  s = np.where(bad, np.inf, np.asarray(scores).mean(-1))
  if not np.isfinite(s).any():
    return None
  best = s.min()
  ties = [g for g in range(len(alphas)) if s[g] <= best + TIE]
  return max(ties, key=lambda g: alphas[g])


def on_grid(t, v, grid, log_scale, floor=1e-300):
  """[len(grid), S] values interpolated at the common times (log-linear for the gap)."""
  t = clean_times(t)
  v = np.asarray(v, np.float64)
  out = []
  for s in range(v.shape[-1]):
    y = np.log10(np.maximum(v[:, s], floor)) if log_scale else v[:, s]
    out.append(np.interp(grid, t[:, s], y))
  out = np.stack(out, -1)
  return 10 ** out if log_scale else out


def analyse(runs: dict, horizon: float, metric: str, floor: float, geo: bool) -> dict:
  """Per method: the chosen alpha, scores per alpha, curves of the chosen alpha."""
  grid = np.linspace(0, horizon, 201)
  out = {}
  for algo, r in runs.items():
    alphas = r["key"]["alphas"]
    t = np.asarray(r["metrics"]["cum_time"], np.float64)  # None (NaN in JSON) -> nan
    v = np.asarray(r["metrics"][metric], np.float64)
    bad = diverged(v)
    scores = log_time_average(t, v, horizon, floor)
    g = select(alphas, scores, bad)
    last = np.nan_to_num(v[-1], nan=np.inf)
    final = (10 ** np.log10(np.maximum(last, floor)).mean(-1) if geo else last.mean(-1))
    entry = {"alphas": alphas, "diverged": bad.tolist(), "score": scores.mean(-1).tolist(),
             "final": final.tolist(),
             "chosen": None if g is None else alphas[g], "seconds": r["seconds"],
             "edge": g is not None and g in (0, len(alphas) - 1), "time": grid.tolist()}
    if g is not None:
      for name in r["metrics"]:
        if name == "cum_time":
          continue
        vals = on_grid(t[:, g], np.asarray(r["metrics"][name], np.float64)[:, g], grid,
                       log_scale=name != "test_accuracy", floor=floor)
        mean = (10 ** np.log10(np.maximum(vals, 1e-300)).mean(-1) if geo and name != "test_accuracy"
                else vals.mean(-1))
        entry[name] = {"mean": mean.tolist(), "min": vals.min(-1).tolist(),
                       "max": vals.max(-1).tolist(), "per_seed": vals.T.tolist()}
    out[algo] = entry
  return out


def at(entry, metric, t, stat="mean"):
  grid = np.asarray(entry["time"])
  return float(np.asarray(entry[metric][stat])[np.argmin(np.abs(grid - t))])


# ---------------------------------------------------------------------------------------
# Claims


def claim(text, ok, measured):
  return {"claim": text, "holds": bool(ok), "measured": measured}


def mnist_claims(an: dict, cfg: dict) -> list[dict]:
  T = cfg["sim_time"]
  ok = {a: e for a, e in an.items() if e["chosen"] is not None}
  out = []
  if "area" not in ok or len(ok) < 2:
    return out
  others = [a for a in ok if a != "area"]
  a_star = ok["area"]["chosen"]
  out.append(claim("Fig. 1/§6.3: alpha*(AREA) > alpha* of every other method",
                   all(a_star > ok[a]["chosen"] for a in others),
                   ", ".join(f"{LABELS[a]} {ok[a]['chosen']:g}" for a in ok)))
  grid = np.asarray(ok["area"]["time"])
  mid = grid >= T / 2
  gap = {a: np.asarray(ok[a]["optimality_gap"]["mean"]) for a in ok}
  lowest = all(np.all(gap["area"][mid] < gap[a][mid]) for a in others)
  out.append(claim("Fig. 1: AREA's seed-mean gap is below every other method's at all t >= T/2",
                   lowest, ", ".join(f"{LABELS[a]} {gap[a][-1]:.2e}" for a in ok) + " (at T)"))
  acc = {a: at(ok[a], "test_accuracy", T) for a in ok}
  out.append(claim("Fig. 1: AREA's final test accuracy >= every other method's (seed means)",
                   all(acc["area"] >= acc[a] for a in others),
                   ", ".join(f"{LABELS[a]} {acc[a]:.4f}" for a in ok)))
  return out


def figure(name: str) -> int | None:
  """The paper's figure for a setting name like mnist_n128_dir0.1_K1_uniform_T10."""
  if not name.startswith("mnist_n"):
    return None
  big = int(name[len("mnist_n"):].split("_")[0]) > 16
  return {(True, False, False): 1, (True, False, True): 2, (False, False, False): 5,
          (False, False, True): 6, (True, True, False): 7, (True, True, True): 8,
          (False, True, False): 9, (False, True, True): 10}[
              big, "_iid_" in name, "_K50_" in name]


def cross_claims(analyses: dict) -> list[dict]:
  """Claims of §6.3 per figure, from the settings run so far (some compare two settings)."""
  out = []

  def ok(name):
    return {a: e for a, e in analyses[name].items() if a in METHODS and e["chosen"] is not None}

  def final_gap(name, algo):
    e = ok(name).get(algo)
    return None if e is None else float(np.asarray(e["optimality_gap"]["mean"])[-1])

  def final_acc(name, algo):
    e = ok(name).get(algo)
    return None if e is None else float(np.asarray(e["test_accuracy"]["mean"])[-1])

  def score(name, algo):
    e = ok(name).get(algo)
    return None if e is None else min(s for s, d in zip(e["score"], e["diverged"]) if not d)

  def ranking(name, value, higher_better=False):
    """{algo: value}, {algo: rank (1 = best)} over the methods with a chosen alpha."""
    vals = {a: value(name, a) for a in ok(name)}
    sign = -1 if higher_better else 1
    return vals, {a: 1 + sum(sign * w < sign * v for w in vals.values()) for a, v in vals.items()}

  def twin(name, old, new):
    """The same setting with `old` replaced by `new` in its name, at any horizon."""
    stem = name.replace(old, new).split("_T")[0]
    found = [m for m in analyses if m.split("_T")[0] == stem]
    return found[0] if found else None

  def listing(vals, fmt):
    return ", ".join(f"{LABELS[a]} {vals[a]:{fmt}}" for a in sorted(vals, key=vals.get))

  def k50_plateau(name):
    k1 = twin(name, "_K50_", "_K1_")
    if not k1 or "area" not in ok(k1):
      return []
    tk = analyses[name]["area"]["time"][-1]
    g1, g50 = at(analyses[k1]["area"], "optimality_gap", tk), final_gap(name, "area")
    return [claim(f"Fig. 2: AREA's K = 50 loss plateau is above its K = 1 gap at the same "
                  f"time ({name})", g50 > g1, f"K=50 {g50:.2e} vs K=1 {g1:.2e} at t = {tk:g}")]

  for name in sorted(analyses):
    fig = figure(name)
    if fig is None or "area" not in ok(name):
      continue
    if "_uniform_" in name:
      other = twin(name, "_uniform_", "_normal_")
      if other and score(name, "sfedavg") is not None and score(other, "sfedavg") is not None:
        su, sn = score(name, "sfedavg"), score(other, "sfedavg")
        gu, gn = final_gap(name, "sfedavg"), final_gap(other, "sfedavg")
        out.append(claim(f"Figs. 1/5/9: S-FedAvg with N(10,5) rates is worse than with uniform "
                         f"rates ({name} vs normal): higher time-averaged log gap and final gap",
                         sn > su and gn > gu,
                         f"score {su:.3f} -> {sn:.3f} decades, final gap {gu:.2e} -> {gn:.2e}"))
    if len(ok(name)) < 2:  # e.g. AREA alone over a longer horizon: only the K = 50 vs K = 1 claim
      if fig == 2:
        out += k50_plateau(name)
      continue
    gaps, grank = ranking(name, final_gap)
    accs, arank = ranking(name, final_acc, higher_better=True)
    scores, srank = ranking(name, score)
    if fig == 5:
      best = min(gaps, key=gaps.get)
      out.append(claim(f"Fig. 5: at n = 4 AREA is not the best method ({name})", grank["area"] > 1,
                       f"AREA rank {grank['area']} of {len(gaps)} by final gap; best "
                       f"{LABELS[best]} {gaps[best]:.2e}, AREA {gaps['area']:.2e}"))
      big = twin(name, "mnist_n4_", "mnist_n128_")
      if big and "area" in ok(big):
        r128 = ranking(big, final_gap)[1]["area"]
        out.append(claim(f"Fig. 5 vs 1: AREA's rank improves from n = 4 to n = 128 ({name} "
                         f"vs {big})", r128 < grank["area"],
                         f"rank {grank['area']} (n=4) -> {r128} (n=128)"))
    if fig == 7 and "fedbuff" in gaps:
      top2 = sorted(gaps, key=gaps.get)[:2]
      out.append(claim(f"Fig. 7: AREA and FedBuff are the two best by final gap ({name})",
                       set(top2) == {"area", "fedbuff"}, listing(gaps, ".2e")))
      band = {}
      for a in ("area", "fedbuff"):
        e = analyses[name][a]["optimality_gap"]
        half = len(e["min"]) // 2
        band[a] = float(np.mean(np.log10(np.asarray(e["max"][half:]) / np.asarray(e["min"][half:]))))
      out.append(claim(f"Fig. 7: AREA's min-max band (second half, decades) is tighter than "
                       f"FedBuff's ({name})", band["area"] < band["fedbuff"],
                       f"AREA {band['area']:.3f}, FedBuff {band['fedbuff']:.3f}"))
    if fig == 9:
      keep = {a: g for a, g in gaps.items() if not (a == "sfedavg" and "_normal_" in name)}
      spread = max(keep.values()) / min(keep.values())
      out.append(claim(f"Fig. 9: at n = 4 with iid data all methods are comparable (final gaps "
                       f"within 2x{', S-FedAvg aside' if '_normal_' in name else ''}) ({name})",
                       spread <= 2, f"max/min {spread:.2f}: " + listing(keep, ".2e")))
    if fig == 2:
      err = {a: float(np.mean(1 - np.asarray(e["test_accuracy"]["mean"]))) for a, e in ok(name).items()}
      out.append(claim(f"Fig. 2: AREA has the lowest time-averaged test error (fastest "
                       f"test-accuracy curve) with K = 50 ({name})",
                       min(err, key=err.get) == "area", listing(err, ".4f")))
      out += k50_plateau(name)
    if fig == 6:
      second = sorted(accs, key=accs.get, reverse=True)[1]
      out.append(claim(f"Fig. 6: AREA has the best final test accuracy, S-FedAvg the second "
                       f"({name})", arank["area"] == 1 and second == "sfedavg",
                       listing(accs, ".4f")))
    if fig == 8:
      order = sorted(scores, key=scores.get)
      out.append(claim(f"Fig. 8: with K = 50 AS-FedAvg converges fastest, AREA second "
                       f"(time-averaged log gap) ({name})", order[:2] == ["asfedavg", "area"],
                       listing(scores, ".3f")))
      out.append(claim(f"Fig. 8: AREA stays in a larger neighbourhood than the best method "
                       f"(final gap not the lowest) ({name})", grank["area"] > 1,
                       listing(gaps, ".2e")))
    if fig in (6, 8, 10):
      k1 = twin(name, "_K50_", "_K1_")
      if k1 and "area" in ok(k1):
        r1 = ranking(k1, final_gap)[1]
        moved = {a: (r1[a], grank[a]) for a in grank if a in r1}
        if fig in (8, 10) and "asfedavg" in moved:
          out.append(claim(f"Figs. 8/10: local steps boost AS-FedAvg: its rank by final gap "
                           f"improves from K = 1 to K = 50 ({name})",
                           moved["asfedavg"][1] < moved["asfedavg"][0],
                           f"rank {moved['asfedavg'][0]} -> {moved['asfedavg'][1]}"))
        if fig in (6, 10) and {"fedbuff", "mifa_async"} <= set(moved):
          out.append(claim(f"Figs. 6/10: local steps destabilize FedBuff and MIFA: both lose "
                           f"rank by final gap from K = 1 to K = 50 ({name})",
                           all(moved[a][1] > moved[a][0] for a in ("fedbuff", "mifa_async")),
                           ", ".join(f"{LABELS[a]} {moved[a][0]} -> {moved[a][1]}"
                                     for a in ("fedbuff", "mifa_async"))))
  return out


def quad_claims(an: dict) -> list[dict]:
  m = {a: e for a, e in an.items() if e["chosen"] is not None}
  v = lambda a, t: at(m[a], "rel_dist_sq", t)
  out = []
  need = {"area", "mifa_async", "sfedavg"}
  if need <= set(m):
    vals = {a: v(a, 10.0) for a in need}
    out.append(claim("E1 (a): AREA, MIFA, S-FedAvg(Delta=n) <= 1e-8 at T = 10, AREA <= 1e-16",
                     all(x <= 1e-8 for x in vals.values()) and vals["area"] <= 1e-16,
                     ", ".join(f"{LABELS[a]} {x:.1e}" for a, x in vals.items())))
    t5 = {a: v(a, 5.0) for a in need}
    out.append(claim("E1 (c): at t = 5, AREA < MIFA < S-FedAvg, each >= 10x apart",
                     10 * t5["area"] <= t5["mifa_async"] and 10 * t5["mifa_async"] <= t5["sfedavg"],
                     ", ".join(f"{LABELS[a]} {x:.1e}" for a, x in t5.items())))
  for a in ("fedbuff", "asfedavg"):
    if a in m:
      t5, t10 = v(a, 5.0), v(a, 10.0)
      lo = float(np.min(np.asarray(m[a]["rel_dist_sq"]["mean"])))
      out.append(claim(f"E1 (b): {LABELS[a]} stays >= 1e-7 and v(10) >= 0.1 v(5) (no exact "
                       "convergence)", lo >= 1e-7 and t10 >= 0.1 * t5,
                       f"min {lo:.1e}, v(5) {t5:.1e}, v(10) {t10:.1e}"))
  if {"area", "mifa_async"} <= set(an):
    stable = {a: max((al for al, s in zip(an[a]["alphas"], an[a]["stable"]) if s), default=0.0)
              for a in ("area", "mifa_async")}
    out.append(claim("E1 (d): largest stable alpha of AREA >= 10x MIFA's",
                     stable["area"] >= 10 * stable["mifa_async"],
                     f"AREA {stable['area']:g}, MIFA {stable['mifa_async']:g}"))
  return out


# ---------------------------------------------------------------------------------------
# Output


def fmt_stat(e, metric, t, spec):
  return (f"{at(e, metric, t):{spec}} [{at(e, metric, t, 'min'):{spec}}, "
          f"{at(e, metric, t, 'max'):{spec}}]")


def grid_table(an: dict) -> list[str]:
  lines = ["| method | alpha tried: time-avg log10 metric / final value, seed mean "
           "(x = diverged) | chosen alpha | seconds |", "|---|---|---|---|"]
  for a, e in an.items():
    finals = e.get("final", [float("nan")] * len(e["alphas"]))
    cells = ", ".join(f"{al:g}: " + ("x" if d else f"{s:.2f} / {f:.2g}")
                      for al, s, d, f in zip(e["alphas"], e["score"], e["diverged"], finals))
    ch = "none" if e["chosen"] is None else f"{e['chosen']:g}" + (" (grid edge)" if e["edge"] else "")
    lines.append(f"| {LABELS[a]} | {cells} | {ch} | {e['seconds']:.0f} |")
  return lines


def value_table(an: dict, metric: str, times, spec: str) -> list[str]:
  head = " | ".join(f"t = {t:g}" for t in times)
  lines = [f"| method (alpha) | {head} |", "|---|" + "---|" * len(times)]
  for a, e in an.items():
    if e["chosen"] is None:
      continue
    lines.append(f"| {LABELS[a]} ({e['chosen']:g}) | "
                 + " | ".join(fmt_stat(e, metric, t, spec) for t in times) + " |")
  return lines


def plot(path: str, an: dict, panels, title: str) -> None:
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
  for ax, (metric, ylabel, logy) in zip(axes[0], panels):
    for a, e in an.items():
      if e["chosen"] is None or metric not in e:
        continue
      t = np.asarray(e["time"])
      m = e[metric]
      line, = ax.plot(t, m["mean"], label=f"{LABELS[a]} (alpha={e['chosen']:g})",
                      lw=2 if a == "area" else 1.2)
      ax.fill_between(t, m["min"], m["max"], color=line.get_color(), alpha=0.2, lw=0)
    if logy:
      ax.set_yscale("log")
    ax.set_xlabel("simulated time")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
  axes[0][0].legend(fontsize=8)
  fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  results.save_figure(path, fig)


def write_setting(stem, name, cfg, an, claims, metric_tables, panels, extra=()):
  md = [f"# {name}", "", "Config: " + ", ".join(f"{k}={cfg.get(k)}" for k in CFG_KEYS
                                                   if k not in ("rounds", "eval_every")),
        "", "## Stepsize grid (§8 row 13 selection)", "", *grid_table(an), ""]
  for title, lines in metric_tables:
    md += [f"## {title}", "", *lines, ""]
  md += list(extra)
  if claims:
    md += ["## Claims", ""]
    md += [f"- {'PASS' if c['holds'] else 'FAIL'}: {c['claim']} — {c['measured']}" for c in claims]
  results.atomic_write_text(stem + ".md", "\n".join(md) + "\n")
  results.atomic_write_json(stem + ".json", {"setting": name, "config": {k: cfg.get(k) for k in CFG_KEYS},
                                             "analysis": an, "claims": claims})
  plot(stem + ".png", an, panels, name)
  for c in claims:
    log(f"  {'PASS' if c['holds'] else 'FAIL'}  {c['claim']}: {c['measured']}")


# ---------------------------------------------------------------------------------------
# Experiments


def overrides(defaults: dict) -> dict:
  return {**defaults, **run_flags.passed_on(PASSTHROUGH)}


def grid_for(algo, default):
  if FLAGS.alphas:
    return [float(a) for a in FLAGS.alphas]
  return default[algo] if isinstance(default, dict) else list(default)


def grid_from(name: str, algo: str) -> list[float]:
  """--chosen_from: the alpha chosen for algo in the same setting there (longest horizon)."""
  stem = name.split("_T")[0] + "_T"
  found = [f for f in os.listdir(FLAGS.chosen_from) if f.startswith(stem) and f.endswith(".json")]
  if not found:
    raise SystemExit(f"--chosen_from={FLAGS.chosen_from}: no {stem}*.json there; run the grid "
                     "of this setting first (without --chosen_from)")
  best = max(found, key=lambda f: float(f[len(stem):-len(".json")]))
  chosen = json.load(open(os.path.join(FLAGS.chosen_from, best)))["analysis"][algo]["chosen"]
  if chosen is None:
    raise SystemExit(f"{best}: every alpha of {algo} diverged; nothing to confirm")
  if algo in FLAGS.refine:
    return [float(f"{0.3 * chosen:.3g}"), chosen, float(f"{3 * chosen:.3g}")]
  return [chosen]


def mnist_grid(cfg: dict, algo: str) -> list[float]:
  big, k50 = cfg["num_clients"] > 16, cfg["local_steps"] > 1
  return grid_for(algo, {(True, False): MNIST_GRID, (True, True): MNIST_GRID_K50,
                         (False, False): MNIST_GRID_SMALL,
                         (False, True): MNIST_GRID_SMALL_K50}[big, k50])


def mnist(seeds) -> list[dict]:
  ov = overrides({})
  analyses, claims = {}, []
  runs, cfg = {}, None
  for algo in FLAGS.methods:
    run_cfg = make_cfg("mnist", algo, ov, seeds)
    cfg = run_cfg.flat()
    name = setting_name(cfg)
    cache = os.path.join(FLAGS.out, CACHE, f"{name}_{algo}.json")
    alphas = grid_from(name, algo) if FLAGS.chosen_from else mnist_grid(cfg, algo)
    log(f"{name} {algo}: alphas {alphas}, seeds {seeds}, {cfg['rounds']} steps")
    runs[algo] = run_grid(run_cfg, alphas, seeds, cache,
                          ("optimality_gap", "test_accuracy", "train_loss"))
    log(f"  {runs[algo]['seconds']:.0f}s")
  T = cfg["sim_time"]
  an = analyse(runs, T, "optimality_gap", FLOOR["mnist"], geo=False)
  claims = mnist_claims(an, cfg) if cfg["num_clients"] >= 64 and cfg["partition"] != "iid" \
      and cfg["local_steps"] == 1 else []
  times = [T / 10, T / 4, T / 2, T]
  stem = os.path.join(FLAGS.out, name)
  write_setting(stem, name, cfg, an, claims,
                [("Optimality gap f(x_s) - f* (seed mean [min, max]) at the chosen alpha",
                  value_table(an, "optimality_gap", times, ".2e")),
                 ("Test accuracy (seed mean [min, max]) at the chosen alpha",
                  value_table(an, "test_accuracy", times, ".4f"))],
                [("optimality_gap", "f(x_s) - f* (seed mean, min-max band)", True),
                 ("test_accuracy", "test accuracy", False)])
  # Cross-setting claims from every setting written so far.
  for fname in sorted(os.listdir(FLAGS.out)):
    if fname.startswith("mnist_") and fname.endswith(".json"):
      rec = json.load(open(os.path.join(FLAGS.out, fname)))
      analyses[rec["setting"]] = rec["analysis"]
  cross = cross_claims(analyses)
  md = ["# Cross-setting claims (MNIST)", "",
        *[f"- {'PASS' if c['holds'] else 'FAIL'}: {c['claim']} — {c['measured']}" for c in cross]]
  results.atomic_write_text(os.path.join(FLAGS.out, "cross_claims.md"), "\n".join(md) + "\n")
  for c in cross:
    log(f"  {'PASS' if c['holds'] else 'FAIL'}  {c['claim']}: {c['measured']}")
  return claims + cross


def quadratic(seeds) -> list[dict]:
  ov = overrides({})
  runs, cfg = {}, None
  for algo in FLAGS.methods:
    run_cfg = make_cfg("quadratic", algo, ov, seeds)
    cfg = run_cfg.flat()
    name = setting_name(cfg)
    cache = os.path.join(FLAGS.out, CACHE, f"{name}_{algo}.json")
    alphas = grid_for(algo, QUAD_GRID)
    log(f"{name} {algo}: alphas {alphas}, seeds {seeds}, {cfg['rounds']} steps, "
        f"Delta {cfg['async_delta']}")
    runs[algo] = run_grid(run_cfg, alphas, seeds, cache, ("rel_dist_sq",))
    log(f"  {runs[algo]['seconds']:.0f}s")
  T = cfg["sim_time"]
  an = analyse(runs, T, "rel_dist_sq", FLOOR["quadratic"], geo=True)
  for algo, r in runs.items():  # stable: finite, never above 10x x0's value, <= 1e-2 at T
    v = np.asarray(r["metrics"]["rel_dist_sq"], np.float64)
    st = np.all(np.isfinite(v), axis=0) & (np.nan_to_num(v, nan=np.inf).max(0) <= 10) & (v[-1] <= 1e-2)
    an[algo]["stable"] = st.all(-1).tolist()
  claims = quad_claims(an)
  stem = os.path.join(FLAGS.out, name)
  write_setting(stem, name, cfg, an, claims,
                [("(x_s - x*)^2 / x*^2, geometric seed mean [min, max], at the chosen alpha",
                  value_table(an, "rel_dist_sq", [2.5, 5.0, 10.0], ".1e")),
                 ("Largest stable alpha (finite, <= 10, <= 1e-2 at T on every seed)",
                  ["| method | largest stable alpha |", "|---|---|"]
                  + [f"| {LABELS[a]} | {max((al for al, s in zip(e['alphas'], e['stable']) if s), default=0):g} |"
                     for a, e in an.items()])],
                [("rel_dist_sq", "(x - x*)^2 / x*^2 (geo mean, min-max band)", True)])
  return claims


def bias_cfg(algo: str, seeds) -> config.Config:
  """E5's run (the quadratic's own partition, natural: one client per function)."""
  return make_cfg("quadratic", algo, {"quadratic_variant": "two_clients", "num_clients": 2,
                                      "client_lr": 0.1, "sim_time": 400.0, "rounds": 4600,
                                      "clients_per_round": 2}, seeds)


def bias(seeds) -> list[dict]:
  from fedjax_bench import algorithms
  from fedjax_bench.sim import asynchrony
  out_rows, claims = [], []
  stem = os.path.join(FLAGS.out, "bias_two_clients")
  cache = stem + ".json"
  if FLAGS.render_only and os.path.exists(cache):
    rec = json.load(open(cache))
  else:
    rec = {"rows": []}
    for algo in ("area", "mifa_async", "fedbuff", "asfedavg"):
      cfg = config.replace(bias_cfg(algo, seeds), eval_every=10)
      exp = experiment.setup(cfg, seeds=list(seeds))
      world = exp.world._replace(clock=asynchrony.renewal([9.0, 1.0]))
      alg = algorithms.get(algo)
      build = lambda hp, alg=alg, world=world: alg.build(exp.task, world, hp)
      t0 = time.perf_counter()
      res = engine.run(build, exp.task, exp.hparams, seeds=list(seeds), rounds=cfg.eval.rounds,
                       eval_every=cfg.eval.eval_every,
                       grid=[{"async_delta": 1}, {"async_delta": 2}])
      h = res.history
      t = clean_times(h.metrics["cum_time"])
      x = np.sqrt(h.metrics["dist_sq"])  # x* = 0
      late = (t > 200) & (t <= 400)
      avg = (x * late).sum(0) / np.maximum(late.sum(0), 1)  # [G, S]
      for g, d in enumerate((1, 2)):
        rec["rows"].append({"algo": algo, "delta": d, "per_seed": avg[g].tolist(),
                            "seconds": time.perf_counter() - t0})
    results.atomic_write_json(cache, rec)
  for row in rec["rows"]:
    v = np.asarray(row["per_seed"])
    target, tol = (0.0, 1e-3) if row["algo"] in ("area", "mifa_async") else (0.8, 0.05)
    ok = np.all(np.abs(v - target) <= tol)
    claims.append(claim(f"E5: {LABELS[row['algo']]} Delta={row['delta']}: mean |x_s| over "
                        f"(200, 400] within {tol} of {target}", ok,
                        ", ".join(f"{x:.4f}" for x in v)))
    out_rows.append(f"| {LABELS[row['algo']]} | {row['delta']} | "
                    + ", ".join(f"{x:.4f}" for x in v) + f" | {target} |")
  md = ["# E5: two-client frequency bias", "",
        "f^_1 = (x-1)^2, f^_2 = (x+1)^2, lambda = (9, 1), alpha = 0.1, T = 400, x0 = 0.", "",
        "| method | Delta | mean |x_s| over (200, 400] per seed | expected |", "|---|---|---|---|",
        *out_rows, "", *[f"- {'PASS' if c['holds'] else 'FAIL'}: {c['claim']} — {c['measured']}"
                         for c in claims]]
  results.atomic_write_text(stem + ".md", "\n".join(md) + "\n")
  for c in claims:
    log(f"  {'PASS' if c['holds'] else 'FAIL'}  {c['claim']}: {c['measured']}")
  return claims


def main(argv) -> int:
  del argv
  if FLAGS.experiment in ("quadratic", "bias"):
    jax.config.update("jax_enable_x64", True)
  run_flags.passed_on(PASSTHROUGH)
  seeds = run_flags.parse_seeds(FLAGS.seeds if FLAGS["seeds"].present else "0,1,2")
  os.makedirs(os.path.join(FLAGS.out, CACHE), exist_ok=True)
  t0 = time.perf_counter()
  claims = {"quadratic": quadratic, "bias": bias, "mnist": mnist}[FLAGS.experiment](seeds)
  log(f"done in {time.perf_counter() - t0:.0f}s; {sum(c['holds'] for c in claims)}/{len(claims)} "
      "claims hold")
  return 1 if any(not c["holds"] for c in claims) else 0


if __name__ == "__main__":
  cli.run_script(main)
