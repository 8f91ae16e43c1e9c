"""JAX's persistent compilation cache, under the suite's cache directory.

Most of a short run is compilation (a reference run: 21 of 24 s), and a second identical
invocation used to compile everything again. With the cache, compiled programs are kept
in CACHE/xla (CACHE: --cache_dir, else $FEDJAX_BENCH_CACHE, else ~/.cache/fedjax_bench;
$FEDJAX_BENCH_COMPILE_CACHE names another directory, or "off") and a second invocation
loads them. A cached program is the program the compiler would produce (keyed by the
computation, the compile options, the devices and the jax version), so no number changes.

Every code or jax version adds entries, so the directory is pruned when a process turns
the cache on: above MAX_GB ($FEDJAX_BENCH_COMPILE_CACHE_GB overrides; "none": never) the
least recently used entries go until it holds 3/4 of that. A pruned entry only costs the
next run that needs it its compilation.
"""

import logging
import os

from fedjax_bench.data.tfds_data import resolve_cache_dir
from fedjax_bench.errors import UsageError
from fedjax_bench.settings import can_be_directory

ENV = "FEDJAX_BENCH_COMPILE_CACHE"
MAX_GB = 4.0  # the pruning threshold
MAX_GB_ENV = "FEDJAX_BENCH_COMPILE_CACHE_GB"


def directory(cache_dir: str | None = None) -> str | None:
  """Where compiled programs are kept, or None when $FEDJAX_BENCH_COMPILE_CACHE is "off";
  UsageError when a file is in the way."""
  env = os.environ.get(ENV)
  if env in ("off", "0", "false"):
    return None
  path = env or str(resolve_cache_dir(cache_dir) / "xla")
  if not can_be_directory(path):
    data_env = os.environ.get("FEDJAX_BENCH_CACHE")
    given = (f"${ENV}={env}" if env else f"--cache_dir={cache_dir}" if cache_dir else
             f"$FEDJAX_BENCH_CACHE={data_env}" if data_env else f"the cache directory {path}")
    raise UsageError(f"{given} names a file, not a directory; give a directory"
                     + (", or 'off'" if env else ""))
  return path


def enable(cache_dir: str | None = None) -> str | None:
  """Turns the cache on for every program compiled from now on, even the fastest to
  compile (a run's many small programs add up); returns its directory."""
  import jax
  path = directory(cache_dir)
  if path is None:
    return None
  limit = max_bytes()  # a bad $FEDJAX_BENCH_COMPILE_CACHE_GB fails before anything is set
  jax.config.update("jax_compilation_cache_dir", path)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
  prune(path, limit)
  return path


def max_bytes() -> float:
  """The pruning threshold in bytes (inf: never prune)."""
  raw = os.environ.get(MAX_GB_ENV, "").strip()
  if raw.lower() == "none":
    return float("inf")
  try:
    gb = float(raw) if raw else MAX_GB
  except ValueError:
    gb = -1.0
  if not gb > 0:
    raise UsageError(f"${MAX_GB_ENV}={raw!r}: expected a positive number of GB or 'none'")
  return gb * 2**30


def prune(path: str, limit: float) -> int:
  """Removes the least recently used entries of ``path`` (by access time, else
  modification time) until it holds 3/4 of ``limit`` bytes, when it holds more than
  ``limit``; returns how many were removed. Entries another process removes meanwhile
  are skipped."""
  if limit == float("inf"):
    return 0
  entries = []
  try:
    with os.scandir(path) as it:
      for e in it:
        try:
          st = e.stat(follow_symlinks=False)
        except OSError:
          continue
        if e.is_file(follow_symlinks=False):
          entries.append((max(st.st_atime, st.st_mtime), st.st_size, e.path))
  except FileNotFoundError:
    return 0
  total = sum(size for _, size, _ in entries)
  if total <= limit:
    return 0
  removed = 0
  for _, size, file in sorted(entries):
    if total <= 0.75 * limit:
      break
    try:
      os.remove(file)
    except OSError:
      continue
    total -= size
    removed += 1
  return removed


def compile(lower):
  """``lower().compile()`` (``lower``: a thunk that lowers the program). JAX trusts its cache's entries: one that does not fit the
  program it is filed under (damaged, or swapped by hand) fails inside JAX, or would
  compute another program. A compile that fails with the cache on is tried again without
  it; if that works, the cache is at fault: one line naming it instead of a traceback."""
  import jax
  path = jax.config.jax_compilation_cache_dir
  try:
    return lower().compile()
  except Exception:
    if not path or not jax.config.jax_enable_compilation_cache:
      raise
    from jax.experimental.compilation_cache import compilation_cache
    quiet = logging.getLogger("jax._src.compilation_cache")
    level = quiet.level
    quiet.setLevel(logging.WARNING)  # no "Resetting cache" lines
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()  # JAX decides once whether to use it
    jax.clear_caches()  # and keeps what it loaded in memory
    try:
      lower().compile()
    except Exception:
      raise  # not the cache's fault
    finally:
      jax.config.update("jax_enable_compilation_cache", True)
      compilation_cache.reset_cache()
      quiet.setLevel(level)
    raise UsageError(f"the compilation cache {path} holds a program that does not fit the "
                     f"one it is filed under (damaged or edited); delete {path}, or run "
                     "with --nocompile_cache") from None


def disable() -> None:
  import jax
  jax.config.update("jax_compilation_cache_dir", None)
