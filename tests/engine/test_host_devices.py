"""A run's CPU device layout (`--host_devices`, fedjax_bench/engine/host_devices.py): the same
command gives bit-identical numbers whatever the machine's device and core count, the
layout is recorded, and a process that cannot hold it is refused in one line."""

import json
import os
import subprocess
import sys

import jax
import pytest

from tests.conftest import REPO, one_line
import fedjax_bench
from fedjax_bench import config
from fedjax_bench.errors import UsageError

RUN = str(REPO / "benchmarks" / "run.py")
# 3 seeds do not divide over 2 devices: each cohort is split between them, the layout's
# most order-sensitive case. SCAFFOLD on synthetic data is chaotic: a layout of 1 device
# instead of 2 moves a seed's test loss by 11% at round 30 (FedAvg's by 1e-5).
ARGS = ["--dataset=synthetic", "--rounds=6", "--eval_every=3", "--seeds=3"]


def _run(out, algo, devices=None, one_core: bool = False) -> str:
  """metrics.csv of a run in a process of ``devices`` forced CPU devices (None: as the
  command line chooses), on one core if ``one_core``."""
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  env["JAX_PLATFORMS"] = "cpu"
  if devices is not None:
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
  args = [f"--algo={algo}", *ARGS, f"--output_dir={out}"]
  cmd = [sys.executable, RUN, *args]
  if one_core:  # the child pins itself before JAX starts (no fork of this threaded process)
    core = min(os.sched_getaffinity(0))
    cmd = [sys.executable, "-c", "import os, runpy, sys; os.sched_setaffinity(0, {%d}); "
           "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')" % core,
           RUN, *args]
  r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-2000:]
  recorded = json.loads((out / "config.json").read_text())
  assert recorded["layout"] == "2 cpu devices"
  if one_core:
    assert recorded["environment"]["cores"] == 1
  return (out / "metrics.csv").read_text()


@pytest.mark.parametrize("algo", ["fedavg", "scaffold"])
def test_the_default_layout_gives_the_same_numbers_on_any_device_or_core_count(tmp_path, algo):
  two = _run(tmp_path / "two", algo, devices=2)
  assert _run(tmp_path / "four", algo, devices=4) == two
  assert _run(tmp_path / "one_core", algo, one_core=True) == two


def test_a_process_without_the_layouts_devices_is_refused_in_one_line():
  assert jax.device_count() == 1  # the test processes start JAX with one CPU device
  with pytest.raises(UsageError) as e:
    fedjax_bench.run(dataset="synthetic", rounds=1, seeds=1, progress=False)
  assert "--host_devices=2 lays the run out on 2 CPU devices, but JAX started in this " \
         "process with 1; pass host_devices=1" in one_line(e)


def test_host_devices_is_checked_and_has_no_effect_on_a_distributed_run():
  with pytest.raises(UsageError, match="--host_devices must be >= 0"):
    config.resolve(host_devices=-1)
  with pytest.raises(UsageError, match="--host_devices has no effect"):
    config.resolve(host_devices=4, distributed=True)


def test_the_speed_scripts_device_count_variable_is_checked():
  code = "from fedjax_bench.engine import host_devices; host_devices.use_all_cores()"
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  r = subprocess.run([sys.executable, "-c", code], env={**env, "FEDJAX_BENCH_HOST_DEVICES": "abc"},
                     capture_output=True, text=True, timeout=60, cwd=REPO)
  assert r.returncode == 2
  assert r.stderr == "error: $FEDJAX_BENCH_HOST_DEVICES='abc' must be a positive integer " \
                     "(CPU devices)\n"
