"""The persistent compilation cache: on by default, off by flag, numbers unchanged."""

import os
import subprocess
import sys

from conftest import REPO

ARGS = ["--rounds=2", "--eval_every=1", "--seeds=1", "--num_clients=10"]


def _run(tmp_path, cache, name, *extra):
  env = dict(os.environ, FEDJAX_BENCH_COMPILE_CACHE=str(cache),
             FEDJAX_BENCH_CACHE=str(tmp_path / "data"))
  r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "run.py"), *ARGS, *extra,
                      f"--output_dir={tmp_path / name}"], env=env, capture_output=True,
                     text=True, timeout=300, cwd=tmp_path)
  assert r.returncode == 0, r.stderr[-2000:]
  return (tmp_path / name / "metrics.csv").read_text()


def test_a_second_run_loads_what_the_first_compiled_and_computes_the_same(tmp_path):
  cache = tmp_path / "xla"
  first = _run(tmp_path, cache, "first")
  entries = set(os.listdir(cache))
  assert entries  # the first run wrote its programs
  assert _run(tmp_path, cache, "second") == first
  assert set(os.listdir(cache)) == entries  # nothing new to compile: all loaded
  off = tmp_path / "unused"
  assert _run(tmp_path, off, "off", "--compile_cache=false") == first
  assert not off.exists()
