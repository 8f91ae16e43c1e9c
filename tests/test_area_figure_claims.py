"""benchmarks/area_cpu.py: the per-figure claims of spec 002 §6.3 on hand-made analyses.

The script defines absl flags of its own, so it is imported in a subprocess."""

import json
import subprocess
import sys

from conftest import REPO

PROBE = r"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("area_cpu", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)

def entry(gap, acc, score):
  return {"alphas": [1.0], "chosen": 1.0, "score": [score], "diverged": [False],
          "time": [0.0, 1.0], "optimality_gap": {"mean": [2.0, gap], "min": [2.0, gap],
          "max": [2.0, gap]}, "test_accuracy": {"mean": [0.1, acc]}}

def setting(rows):  # algo -> (final gap, final accuracy, time-averaged log gap)
  return {a: entry(*v) for a, v in rows.items()}

cases = json.loads(sys.argv[2])
out = {}
for label, analyses in cases.items():
  analyses = {name: setting(rows) for name, rows in analyses.items()}
  out[label] = [[c["claim"].split(" (")[0], c["holds"]] for c in m.cross_claims(analyses)]
print(json.dumps({"figures": {n: m.figure(n) for n in (
    "mnist_n128_dir0.1_K1_uniform_T10", "mnist_n128_iid_K50_uniform_T1",
    "mnist_n4_iid_K1_normal_T20", "mnist_n4_dir0.1_K50_uniform_T10",
    "mnist_n4_iid_K50_normal_T10", "quadratic_n50_normal_T10")}, "claims": out}))
"""


def _run(cases):
  r = subprocess.run([sys.executable, "-c", PROBE, str(REPO / "benchmarks" / "area_cpu.py"),
                      json.dumps(cases)], capture_output=True, text=True, timeout=120)
  assert r.returncode == 0, r.stderr[-2000:]
  return json.loads(r.stdout.strip().splitlines()[-1])


def _verdicts(claims, prefix):
  return [holds for text, holds in claims if text.startswith(prefix)]


def test_figure_claims_pass_and_fail_on_constructed_rankings():
  # Fig. 6 / 10 twins: at K = 1 FedBuff and MIFA are the best two; at K = 50 they are last.
  k1 = {"area": (0.3, 0.85, -0.5), "fedbuff": (0.1, 0.89, -0.9), "asfedavg": (0.5, 0.83, -0.3),
        "mifa_async": (0.2, 0.88, -0.7), "sfedavg": (0.4, 0.84, -0.4)}
  k50_good = {"area": (0.1, 0.90, -0.8), "fedbuff": (0.6, 0.80, -0.2), "asfedavg": (0.05, 0.86, -1.0),
              "mifa_async": (0.7, 0.79, -0.1), "sfedavg": (0.2, 0.88, -0.6)}
  k50_bad = {**k50_good, "fedbuff": (0.01, 0.80, -2.0), "sfedavg": (0.2, 0.70, -0.6)}
  close = {"area": (0.15, 0.88, -0.8), "fedbuff": (0.1, 0.89, -0.9),
           "asfedavg": (0.18, 0.87, -0.7), "mifa_async": (0.12, 0.88, -0.8)}
  out = _run({
      "good": {"mnist_n4_dir0.1_K1_uniform_T20": k1, "mnist_n4_dir0.1_K50_uniform_T10": k50_good,
               "mnist_n4_iid_K1_uniform_T20": k1, "mnist_n4_iid_K50_uniform_T10": k50_good,
               "mnist_n128_iid_K1_uniform_T10": k1, "mnist_n128_iid_K50_uniform_T1": k50_good},
      "bad": {"mnist_n4_dir0.1_K1_uniform_T20": k1, "mnist_n4_dir0.1_K50_uniform_T10": k50_bad,
              "mnist_n128_iid_K1_uniform_T10": k1, "mnist_n128_iid_K50_uniform_T1": k50_bad},
      # Fig. 9: all within 2x passes; S-FedAvg 10x worse is excused only with N(10,5) rates.
      "fig9": {"mnist_n4_iid_K1_uniform_T20": {**close, "sfedavg": (3.0, 0.5, 0.5)},
               "mnist_n4_iid_K1_normal_T20": {**close, "sfedavg": (3.0, 0.5, 0.5)}},
  })
  assert out["figures"] == {"mnist_n128_dir0.1_K1_uniform_T10": 1,
                            "mnist_n128_iid_K50_uniform_T1": 8, "mnist_n4_iid_K1_normal_T20": 9,
                            "mnist_n4_dir0.1_K50_uniform_T10": 6,
                            "mnist_n4_iid_K50_normal_T10": 10, "quadratic_n50_normal_T10": None}
  good, bad, fig9 = out["claims"]["good"], out["claims"]["bad"], out["claims"]["fig9"]
  assert _verdicts(good, "Fig. 6: AREA has the best final test accuracy") == [True]
  assert _verdicts(bad, "Fig. 6: AREA has the best final test accuracy") == [False]
  assert _verdicts(good, "Figs. 6/10: local steps destabilize") == [True, True]
  assert _verdicts(bad, "Figs. 6/10: local steps destabilize") == [False]
  assert _verdicts(good, "Fig. 8: with K = 50 AS-FedAvg converges fastest") == [True]
  assert _verdicts(bad, "Fig. 8: with K = 50 AS-FedAvg converges fastest") == [False]
  assert _verdicts(good, "Fig. 8: AREA stays in a larger neighbourhood") == [True]
  assert _verdicts(good, "Figs. 8/10: local steps boost AS-FedAvg") == [True, True]
  assert sorted(_verdicts(fig9, "Fig. 9: at n = 4 with iid data")) == [False, True]
  assert _verdicts(fig9, "Figs. 1/5/9: S-FedAvg with N(10,5) rates is worse") == [False]
