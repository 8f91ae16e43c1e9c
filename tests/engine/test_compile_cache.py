"""The persistent compilation cache: on by default, off by flag, numbers unchanged."""

import os
import subprocess
import sys

from tests.conftest import REPO
from fedjax_bench.engine import compile_cache

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


def _entry(path, name, size, age):
  f = path / name
  f.write_bytes(b"x" * size)
  os.utime(f, (1_000_000 - age, 1_000_000 - age))
  return f


def test_the_cache_is_pruned_to_three_quarters_least_recently_used_first(tmp_path):
  from fedjax_bench.engine import compile_cache
  files = [_entry(tmp_path, f"e{i}", 100, age=i) for i in range(10)]  # e9 the oldest
  assert compile_cache.prune(str(tmp_path), limit=1000) == 0  # at the limit: kept
  assert compile_cache.prune(str(tmp_path), limit=float("inf")) == 0  # "none": not scanned
  assert compile_cache.prune(str(tmp_path), limit=999) == 3  # down to 750 bytes
  assert [f.exists() for f in files] == [True] * 7 + [False] * 3
  assert compile_cache.prune(str(tmp_path / "absent"), limit=1) == 0


def test_the_pruning_threshold_comes_from_the_environment(monkeypatch):
  import pytest

  from fedjax_bench.engine import compile_cache
  from fedjax_bench.errors import UsageError
  monkeypatch.delenv(compile_cache.MAX_GB_ENV, raising=False)
  assert compile_cache.max_bytes() == compile_cache.MAX_GB * 2**30
  monkeypatch.setenv(compile_cache.MAX_GB_ENV, "0.5")
  assert compile_cache.max_bytes() == 2**29
  monkeypatch.setenv(compile_cache.MAX_GB_ENV, "none")
  assert compile_cache.max_bytes() == float("inf")
  for bad in ("0", "-1", "lots"):
    monkeypatch.setenv(compile_cache.MAX_GB_ENV, bad)
    with pytest.raises(UsageError, match="FEDJAX_BENCH_COMPILE_CACHE_GB"):
      compile_cache.max_bytes()


def test_turning_the_cache_on_prunes_it(tmp_path, monkeypatch):
  from fedjax_bench.engine import compile_cache
  files = [_entry(tmp_path, f"e{i}", 100, age=i) for i in range(4)]
  monkeypatch.setenv(compile_cache.ENV, str(tmp_path))
  monkeypatch.setenv(compile_cache.MAX_GB_ENV, str(300 / 2**30))
  try:
    assert compile_cache.enable() == str(tmp_path)
  finally:
    monkeypatch.undo()
    compile_cache.enable() or compile_cache.disable()  # the suite's cache again
  assert [f.exists() for f in files] == [True, True, False, False]  # 400 -> 200 bytes


def test_swapped_cache_entries_are_one_line_not_a_traceback(tmp_path):
  cache = tmp_path / "xla"
  env = {**os.environ, compile_cache.ENV: str(cache), "JAX_PLATFORMS": "cpu"}
  cmd = [sys.executable, str(REPO / "benchmarks" / "run.py"), "--rounds=2",
         "--eval_every=1", "--seeds=1", "--host_devices=1", "--num_clients=8",
         "--clients_per_round=2"]
  first = subprocess.run(cmd + [f"--output_dir={tmp_path / 'a'}"], env=env,
                         capture_output=True, text=True, timeout=300)
  assert first.returncode == 0, first.stderr[-2000:]
  # The two largest programs of the run (its round blocks and its evaluation), swapped.
  a, b = sorted(cache.iterdir(), key=lambda p: p.stat().st_size)[-2:]
  data_a, data_b = a.read_bytes(), b.read_bytes()
  a.write_bytes(data_b)
  b.write_bytes(data_a)
  second = subprocess.run(cmd + [f"--output_dir={tmp_path / 'b'}"], env=env,
                          capture_output=True, text=True, timeout=300)
  assert second.returncode == 2, second.stderr[-2000:]
  assert second.stderr.splitlines()[-1] == (
      f"error: the compilation cache {cache} holds a program that does not fit the one it is "
      f"filed under (damaged or edited); delete {cache}, or run with --nocompile_cache")
  assert "Traceback" not in second.stderr
