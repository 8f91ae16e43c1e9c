"""A claim's runs of two algorithms take the same values of every setting a preset shares."""

from fedjax_bench.claims import Claim, Difference, Metric, Paper, Run, pairs
from fedjax_bench.config import presets


def _paper(*runs):
  return Paper("p", "A paper", "spec.md", runs=runs, claims=(
      Claim("better", "FedSoftMax beats FedAvg", "—",
            Difference(Metric("soft"), Metric("avg"))),))


def test_a_preset_given_to_one_side_of_a_comparison_is_named():
  base = dict(dataset="mnist", model="mlp", rounds=2)
  found = pairs.unequal_presets(_paper(Run("soft", dict(base, algo="fedsoftmax")),
                                       Run("avg", dict(base, algo="fedavg"))))
  named = {line.split("--")[1].split("=")[0] for line in found}
  assert {"local_epochs", "lr_decay_per_round"} <= named, found
  assert all(line.startswith("claim better: run soft takes") for line in found), found


def test_settings_given_to_both_sides_are_equal_terms():
  base = dict(presets.HETERO_AGG_MNIST.values, dataset="mnist")
  runs = (Run("soft", dict(base, algo="fedsoftmax")), Run("avg", dict(base, algo="fedavg")))
  assert pairs.unequal_presets(_paper(*runs)) == []


def test_every_declared_paper_compares_equals():
  from benchmarks import papers
  for p in papers.PAPERS.values():
    assert pairs.unequal_presets(p) == [], p.name


def test_check_fails_and_making_refuses_a_comparison_on_unequal_terms(tmp_path):
  import os
  import subprocess
  import sys
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  setup = ("from benchmarks import papers; from fedjax_bench.claims import *; "
           "base = dict(dataset='mnist', model='mlp', rounds=2); "
           "papers.PAPERS['p'] = Paper('p', 't', 's', runs=(Run('soft', dict(base, "
           "algo='fedsoftmax')), Run('avg', dict(base, algo='fedavg'))), claims=(Claim('better', "
           "'s', '-', Difference(Metric('soft'), Metric('avg'))),)); ")

  def cli(*args):
    code = (setup + "import runpy, sys; sys.argv = ['claims.py', *" + repr(list(args)) + "]; "
            "runpy.run_module('benchmarks.claims', run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root,
                          timeout=300)

  p = cli("--check", "p", f"--results_dir={tmp_path}")
  assert p.returncode == 1 and "p: claim better: run soft takes --local_epochs=2.0" in p.stdout, (
      p.stdout + p.stderr)
  p = cli("p", f"--results_dir={tmp_path}")
  assert p.returncode == 2 and "run soft takes --" in p.stderr, p.stdout + p.stderr
  assert not list(tmp_path.iterdir())  # refused before anything was written
