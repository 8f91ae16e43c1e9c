"""Reference convergence curves: every algorithm's small fixed run
(benchmarks/tools/reference.py) against the curves committed in results/reference/.

* One CPU device, in this process: within reference.RTOL / ATOL of the committed curves.
* The committed curves of a run started from parameters perturbed by
  reference.PERTURBATION (made by update_references.py with the curves) are within
  reference.RTOL / ATOL of them: the configuration is not chaotic, so another CPU's
  rounding cannot push it outside either.
* Four CPU devices, in one subprocess that runs every algorithm twice (the 2 seeds' runs
  on 2 devices, each cohort split over the other 2):
  - same seed, same curves: the two passes are bitwise equal, for every algorithm;
  - within reference.CROSS_DEVICE_RTOL of this session's 1-device curves
    (docs/design.md, "Devices and reproducibility": layouts agree to ~1e-6, not bitwise);
  - and once more laid out on its first device alone: bitwise this session's 1-device
    curves (the same layout in a process of 4 devices).

The subprocess starts with the first 1-device test and runs beside them (one core each).
After an intended change of the numbers: python -m benchmarks.tools.update_references
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from tests.conftest import REPO
from benchmarks.tools import reference
from fedjax_bench import algorithms
from fedjax_bench.engine import compile_cache

PROBE = Path(__file__).parents[1] / "scripts" / "reference_probe.py"
NAMES = list(algorithms.ALGORITHMS)
PROBE_TIMEOUT = 900
REGENERATE = ("regenerate with `python -m benchmarks.tools.update_references --algos={}` if "
              "the change is intended")

FOUR_DEVICE_TESTS = ("test_same_seed_same_curves_on_four_devices",
                     "test_four_devices_match_one_device",
                     "test_the_one_device_layout_is_bitwise_the_same_in_a_four_device_process")
_one_device = {}


def one_device(name: str) -> dict:
  """``name``'s curves on one CPU device, computed once per session."""
  if name not in _one_device:
    _one_device[name] = reference.compute(name, devices=jax.devices("cpu")[:1])
  return _one_device[name]


@pytest.fixture(scope="module")
def four_devices(request, tmp_path_factory):
  """Starts the 4-device subprocess (for the algorithms of the selected tests); calling the
  fixture's value waits for its curves."""
  names = sorted({item.callspec.params["name"] for item in request.session.items
                  if item.module is request.module and item.originalname in FOUR_DEVICE_TESTS})
  if not names:  # only 1-device tests were selected
    yield None
    return
  tmp = tmp_path_factory.mktemp("reference_4dev")
  out, log_path = tmp / "curves.json", tmp / "log.txt"
  env = {k: v for k, v in os.environ.items() if k != "FEDJAX_BENCH_HOST_DEVICES"}
  env.update(XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu",
             PYTHONPATH=str(REPO))  # the probe imports benchmarks.tools.reference
  log = open(log_path, "w")
  # The suite's compilation cache when it has one (a warm suite loads the probe's programs
  # too), else one of its own: either way the second pass loads the first one's executables.
  cache = compile_cache.directory() or tmp / "xla_cache"
  proc = subprocess.Popen([sys.executable, str(PROBE), str(out), "--repeat=2",
                           f"--cache_dir={cache}", "--first_device", *names],
                          cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
  result = {}

  def curves() -> dict:
    if not result:
      try:
        rc = proc.wait(timeout=PROBE_TIMEOUT)
      except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"the 4-device probe ran past {PROBE_TIMEOUT}s")
      log.flush()
      if rc != 0:
        pytest.fail(f"the 4-device probe exited {rc}:\n{log_path.read_text()[-3000:]}")
      result.update(json.loads(out.read_text()))
    return result

  yield curves
  if proc.poll() is None:
    proc.kill()
    proc.wait()
  log.close()


def _outside(diffs: dict) -> dict:
  return {m: d for m, d in diffs.items() if not d["ok"]}


# --- the committed files and the comparison itself (no JAX runs) ------------------------------

def test_every_algorithm_has_a_config_and_a_committed_reference():
  assert set(reference.CONFIGS) <= set(NAMES)  # overrides are optional: defaults otherwise
  committed = sorted(p.stem for p in reference.REFERENCE_DIR.glob("*.json"))
  assert committed == sorted(NAMES), "results/reference/ must hold exactly one file per algorithm"
  for name in NAMES:
    ref = reference.load(name)
    assert ref["flags"] == reference.flags(name), (name, REGENERATE.format(name))
    assert ref["seeds"] == list(reference.SEEDS)
    curves = reference.expected_curves(ref)
    for metric in reference.METRICS:
      values = np.array(curves[metric], float)
      assert values.shape == (len(ref["rounds"]), len(reference.SEEDS)), (name, metric)
      assert np.isfinite(values).all(), (name, metric)
    last = np.array(curves["train_loss"])[-1]
    assert last[0] != last[1], f"{name}: the two seeds gave the same final train_loss"


@pytest.mark.parametrize("name", NAMES)
def test_a_perturbed_start_stays_within_the_tolerance(name):
  ref = reference.load(name)
  assert ref["perturbed_start"]["relative"] == reference.PERTURBATION, (name,
                                                                         REGENERATE.format(name))
  diffs = reference.differences(reference.expected_curves(ref),
                                 reference.expected_curves(ref["perturbed_start"]))
  assert _outside(diffs) == {}, (f"{name} is chaotic: a start perturbed by "
                                 f"{reference.PERTURBATION:g} moves it outside rtol "
                                 f"{reference.RTOL:g}: {_outside(diffs)}")
  # The perturbation reached the run: some number moved.
  assert max(d["max_abs"] for d in diffs.values()) > 0, name


def test_the_comparison_flags_a_perturbed_curve():
  ref = reference.expected_curves(reference.load("fedavg"))
  same = reference.differences(ref, ref)
  assert all(d["ok"] and d["max_abs"] == 0 for d in same.values())

  def perturbed(metric, e, s, factor=None, value=None):
    curves = json.loads(json.dumps(ref))
    old = curves[metric][e][s]
    curves[metric][e][s] = value if value is not None else old * factor
    return curves

  # Inside the tolerance (a fifth of rtol), then outside it (ten times rtol).
  assert _outside(reference.differences(ref, perturbed("train_loss", 2, 1,
                                                       1 + reference.RTOL / 5))) == {}
  bad = _outside(reference.differences(ref, perturbed("train_loss", 2, 1,
                                                      1 + 10 * reference.RTOL)))
  assert list(bad) == ["train_loss"]
  assert bad["train_loss"]["max_rel"] == pytest.approx(10 * reference.RTOL, rel=1e-3)
  # One test example more classified right (1/344) is far outside.
  acc = ref["test_accuracy"][-1][0]
  assert list(_outside(reference.differences(
      ref, perturbed("test_accuracy", -1, 0, value=acc + 1 / 344)))) == ["test_accuracy"]
  # A NaN where a number was, other rounds, a missing evaluation.
  assert "test_loss" in _outside(reference.differences(
      ref, perturbed("test_loss", 1, 0, value=float("nan"))))
  assert len(_outside(reference.differences(ref, {**ref, "rounds": [0, 3, 6, 9]}))) == 3
  short = {k: v[:-1] for k, v in ref.items()}
  assert len(_outside(reference.differences(ref, short))) == 3
  # The cross-device tolerance is tighter: 5e-5 relative passes RTOL but not it.
  nudged = perturbed("test_loss", 3, 0, 1 + 5e-5)
  assert _outside(reference.differences(ref, nudged)) == {}
  assert list(_outside(reference.differences(ref, nudged, rtol=reference.CROSS_DEVICE_RTOL,
                                             atol=reference.CROSS_DEVICE_ATOL))) == ["test_loss"]


# --- reruns ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_one_device_matches_the_committed_curves(name, four_devices):
  curves = one_device(name)
  diffs = reference.differences(reference.expected_curves(reference.load(name)), curves)
  assert _outside(diffs) == {}, (f"{name}: outside rtol {reference.RTOL:g}, atol "
                                 f"{reference.ATOL:g}: {_outside(diffs)}; "
                                 + REGENERATE.format(name))


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_curves_on_four_devices(name, four_devices):
  probe = four_devices()
  assert probe["devices"] == 4
  first, second = (run[name] for run in probe["runs"])
  assert first["rounds"] == second["rounds"]
  for metric in reference.METRICS:
    assert first[metric] == second[metric], (name, metric)  # bitwise: floats from JSON


@pytest.mark.parametrize("name", NAMES)
def test_the_one_device_layout_is_bitwise_the_same_in_a_four_device_process(name,
                                                                            four_devices):
  # A run's numbers follow its layout, not the machine's device count (host_devices.py).
  there = four_devices()["first_device"][name]
  here = one_device(name)
  assert there["rounds"] == here["rounds"]
  for metric in reference.METRICS:
    assert there[metric] == here[metric], (name, metric)  # bitwise: floats from JSON


@pytest.mark.parametrize("name", NAMES)
def test_four_devices_match_one_device(name, four_devices):
  four = four_devices()["runs"][0][name]
  diffs = reference.differences(one_device(name), four, rtol=reference.CROSS_DEVICE_RTOL,
                                atol=reference.CROSS_DEVICE_ATOL)
  assert _outside(diffs) == {}, (name, _outside(diffs))
