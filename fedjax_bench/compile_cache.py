"""JAX's persistent compilation cache, under the suite's cache directory.

Most of a short run is compilation (a reference run: 21 of 24 s), and a second identical
invocation used to compile everything again. With the cache, compiled programs are kept
in CACHE/xla (CACHE: --cache_dir, else $FEDJAX_BENCH_CACHE, else ~/.cache/fedjax_bench;
$FEDJAX_BENCH_COMPILE_CACHE names another directory, or "off") and a second invocation
loads them. A cached program is the program the compiler would produce (keyed by the
computation, the compile options, the devices and the jax version), so no number changes.
"""

import os

from fedjax_bench.data.tfds_data import resolve_cache_dir

ENV = "FEDJAX_BENCH_COMPILE_CACHE"


def directory(cache_dir: str | None = None) -> str | None:
  """Where compiled programs are kept, or None when $FEDJAX_BENCH_COMPILE_CACHE is "off"."""
  env = os.environ.get(ENV)
  if env in ("off", "0", "false"):
    return None
  return env or str(resolve_cache_dir(cache_dir) / "xla")


def enable(cache_dir: str | None = None) -> str | None:
  """Turns the cache on for every program compiled from now on, even the fastest to
  compile (a run's many small programs add up); returns its directory."""
  import jax
  path = directory(cache_dir)
  if path is None:
    return None
  jax.config.update("jax_compilation_cache_dir", path)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
  return path


def disable() -> None:
  import jax
  jax.config.update("jax_compilation_cache_dir", None)
