"""Hand-fused CPU kernels, XLA FFI targets compiled from the C++ beside this file.

A kernel is built the first time a process needs it, with the machine's C++ compiler
($CXX, else c++ or g++) for the CPU at hand (-march=native), into
CACHE/kernels (CACHE: $FEDJAX_BENCH_CACHE, else ~/.cache/fedjax_bench, the suite's cache
directory), keyed by the source, the jax version, the compiler and the CPU, so later
processes load it. Where it cannot be built (no compiler, a failed build), `target`
returns None after one line on stderr, and the caller runs XLA's program instead.
"""

import ctypes
import hashlib
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile
import threading

import jax

FLAGS = ("-O3", "-march=native", "-fPIC", "-shared", "-std=c++17", "-w")
DISABLE_ENV = "FEDJAX_BENCH_KERNELS"  # "off": never build or use a kernel

_lock = threading.Lock()
_targets: dict = {}  # (source, symbol) -> registered target name, or None


def cache_dir() -> pathlib.Path:
  root = os.environ.get("FEDJAX_BENCH_CACHE")
  return (pathlib.Path(root) if root
          else pathlib.Path.home() / ".cache" / "fedjax_bench") / "kernels"


def compiler() -> str | None:
  return os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")


def _cpu() -> str:
  """What -march=native compiles for: the CPU's model and feature flags."""
  try:
    with open("/proc/cpuinfo") as f:
      lines = [l for l in f if l.startswith(("model name", "flags"))]
    return "".join(sorted(set(lines)))
  except OSError:
    return platform.processor() or platform.machine()


def _build(source: pathlib.Path, cxx: str) -> pathlib.Path:
  text = source.read_bytes()
  key = hashlib.sha256(b"\0".join([text, jax.__version__.encode(), cxx.encode(),
                                   " ".join(FLAGS).encode(), _cpu().encode()])).hexdigest()
  out = cache_dir() / f"{source.stem}-{key[:16]}.so"
  if out.exists():
    return out
  out.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
  os.close(fd)
  try:
    done = subprocess.run([cxx, *FLAGS, f"-I{jax.ffi.include_dir()}", str(source), "-o", tmp],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
      lines = [l for l in done.stderr.splitlines() if "error" in l] or done.stderr.splitlines()
      raise RuntimeError(lines[0] if lines else f"{cxx} exited {done.returncode}")
    os.replace(tmp, out)  # atomic: a concurrent build of the same key writes the same file
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)
  return out


def target(source: str, symbol: str) -> str | None:
  """The name of the CPU FFI target ``symbol`` of ``source`` (a .cc file beside this one),
  built and registered on first use; None when kernels are off ($FEDJAX_BENCH_KERNELS=off)
  or it cannot be built."""
  if os.environ.get(DISABLE_ENV, "").lower() in ("off", "0", "false"):
    return None
  with _lock:
    if (source, symbol) in _targets:
      return _targets[(source, symbol)]
    name = None
    cxx = compiler()
    try:
      if cxx is None:
        raise RuntimeError("no C++ compiler (set $CXX, or install g++)")
      lib = ctypes.cdll.LoadLibrary(str(_build(pathlib.Path(__file__).with_name(source), cxx)))
      name = f"fedjax_bench_{symbol}"
      jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(lib, symbol)),
                                  platform="cpu")
    except (OSError, RuntimeError, subprocess.SubprocessError, AttributeError) as e:
      print(f"fedjax_bench: kernel {source}:{symbol} not available ({e}); XLA's loop runs "
            "instead", file=sys.stderr)
      name = None
    _targets[(source, symbol)] = name
    return name
