"""The FedAWE spec's CPU-scale claims (000 §9.3) on toyfl, stress phi, sine, 3 seeds.

Slow (about 2 minutes on 2 cores): excluded from the default run. Run it with
``python -m pytest -m slow tests/test_fedawe_claims.py``, or run the whole comparison,
which checks the same claims and writes results/fedawe/, with
``python benchmarks/fedawe_cpu.py --experiment=toyfl``.
"""

import importlib.util
import os

import pytest

from conftest import REPO


def _script():
  path = os.path.join(REPO, "benchmarks", "fedawe_cpu.py")
  spec = importlib.util.spec_from_file_location("fedawe_cpu", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@pytest.mark.slow
def test_toyfl_stress_sine_claims():
  script = _script()
  res = script.run_comparison(dict(script.TOYFL), "sine", [0, 1, 2], log=lambda *a: None)
  failed = [c for c in script.claims_toyfl(res) if not c["holds"]]
  assert not failed, failed
