"""A paper's runs, cached as JSON by configuration and by the code that produced them.

A `Run` is settings by flag name (what `fedjax_bench.run` takes), seeds and an optional
sweep. Its record holds every evaluated metric per round, grid point and seed, the key
of its resolved configuration and the hashes of the library code it ran (`code.py`: the
functions it called and every loaded module's top level). A record is fresh when both
still match: a changed configuration or changed code makes it stale, and a stale record
is rerun, never reported (`status`, `benchmarks/claims.py`).
"""

import dataclasses
import hashlib
import json
import os
import re
import subprocess
import threading
import time
from typing import Any, Mapping, Optional

from fedjax_bench.output import results
from fedjax_bench.claims import code as code_lib
from fedjax_bench.claims.code import PACKAGE_DIR

HEARTBEAT_SECONDS = 600.0  # how often a run in progress says it still is


@dataclasses.dataclass(frozen=True)
class Run:
  name: str                       # unique within its paper, also its file name
  settings: Mapping[str, Any]     # flag name -> value, as fedjax_bench.run takes them
  seeds: tuple[int, ...] = (0, 1, 2)
  sweep: Mapping[str, tuple] = dataclasses.field(default_factory=dict)
  x64: bool = False               # run in float64 (jax_enable_x64)

  def command(self) -> str:
    """The command line that makes this run."""
    args = [f"--{k}={_flag_value(v)}" for k, v in self.settings.items()]
    args.append(f"--seeds={','.join(map(str, self.seeds))}")
    args += [f"--sweep={k}:{','.join(map(str, v))}" for k, v in self.sweep.items()]
    return (("JAX_ENABLE_X64=1 " if self.x64 else "") + "python benchmarks/run.py "
            + " ".join(args))


def _flag_value(v) -> str:
  if isinstance(v, bool):
    return "true" if v else "false"
  if isinstance(v, (list, tuple)):
    return ",".join(map(str, v))
  return str(v)


def prepare(run: Run):
  """(config, seeds, grid) of ``run``, resolved and checked as the command line would."""
  from fedjax_bench import api
  return api.prepare(seeds=list(run.seeds), sweep=dict(run.sweep), **run.settings)


def config_key(run: Run, prepared=None) -> str:
  """Hash of every setting that shapes the run's numbers (run_dir.run_fingerprint, rounds
  included), its seeds and grid: equal keys, equal numbers. ``prepared``: `prepare(run)`,
  when the caller has it."""
  from fedjax_bench.engine import run_dir
  cfg, seeds, grid = prepared or prepare(run)
  fp = {**run_dir.run_fingerprint(cfg, seeds, grid), "rounds": cfg.eval.rounds,
        "eval_every": cfg.eval.eval_every, **({"x64": True} if run.x64 else {})}
  return hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()[:16]


def path(runs_dir: str, run: Run) -> str:
  return os.path.join(runs_dir, re.sub(r"[^A-Za-z0-9_.=-]+", "_", run.name) + ".json")


def load(runs_dir: str, run: Run) -> Optional[dict]:
  p = path(runs_dir, run)
  if not os.path.exists(p):
    return None
  with open(p) as f:
    return json.load(f)


def status(record: Optional[dict], run: Run, key: Optional[str] = None) -> str:
  """"fresh", "missing", "configuration changed" or "code changed: FILES"."""
  if record is None:
    return "missing"
  if record["key"] != (key or config_key(run)):
    return "configuration changed"
  if record.get("code_kind") != code_lib.KIND:
    return (f"code changed: recorded under an older rule (code_kind "
            f"{record.get('code_kind')!r}, now {code_lib.KIND!r})")
  changed = code_lib.changed(record["code"])
  if changed:
    return "code changed: " + ", ".join(changed)
  return "fresh"


def _heartbeat(name: str, t0: float, log) -> threading.Event:
  """Logs every HEARTBEAT_SECONDS that run ``name`` is still going, until the returned
  event is set: a paper's run can take an hour, and api.run prints nothing for it."""
  stop = threading.Event()

  def beat():
    while not stop.wait(HEARTBEAT_SECONDS):
      log(f"  {name}: still running after {(time.perf_counter() - t0) / 60:.0f} min")

  threading.Thread(target=beat, daemon=True).start()
  return stop


def execute(runs_dir: str, run: Run, log=print) -> dict:
  """Runs ``run`` and writes its record (atomically: an interrupted run leaves the old)."""
  import contextlib

  import jax

  from fedjax_bench import api
  t0, cpu0, load0 = time.perf_counter(), time.process_time(), os.getloadavg()[0]
  alive = _heartbeat(run.name, t0, log)  # started outside the trace: not the run's code
  try:
    with code_lib.Trace() as trace, (jax.enable_x64(True) if run.x64
                                     else contextlib.nullcontext()):
      result = api.run(seeds=list(run.seeds), sweep=dict(run.sweep) or None, progress=False,
                       **run.settings)
  finally:
    alive.set()
  seconds = time.perf_counter() - t0
  curves = result.curves
  record = {
      "name": run.name, "key": config_key(run), "settings": dict(run.settings),
      "seeds": list(run.seeds), "grid": result.grid,
      "rounds": [int(r) for r in curves["round"]],
      "metrics": {k: _rounded(v) for k, v in curves.items() if k != "round"},
      "diverged": result.diverged, "seconds": round(seconds, 1),
      # What the wall-clock seconds ran beside: this process's CPU seconds (all its
      # threads) and the 1-minute load average when the run started and ended.
      "cpu_seconds": round(time.process_time() - cpu0, 1),
      "load_average": [round(load0, 2), round(os.getloadavg()[0], 2)],
      "code_kind": code_lib.KIND, "code": code_lib.digest(trace), "commit": _commit(),
      "environment": _environment(),
  }
  os.makedirs(runs_dir, exist_ok=True)
  results.atomic_write_json(path(runs_dir, run), record)
  log(f"  ran {run.name} ({seconds:.0f} s)")
  return record


# Float results differ between CPUs in their last digits: FedAWE's toyfl runs, made on an
# AVX2 machine and rerun on an AVX-512 one, differ by up to 2.6e-7 relative in every loss
# (2 units of the 7 significant digits a record keeps), accuracies not at all. A rerun
# within this relative tolerance of a record has the same numbers; bit for bit is only
# for what one machine computes twice.
SAME_NUMBERS_RTOL = 1e-5


def same_numbers(new: dict, old: dict) -> bool:
  """Whether two records of one run hold the same numbers: the same key, grid, rounds,
  metrics and divergences, each metric within `SAME_NUMBERS_RTOL` (NaN where NaN)."""
  import numpy as np
  if any(new[k] != old.get(k) for k in ("key", "grid", "rounds", "diverged")):
    return False
  if set(new["metrics"]) != set(old.get("metrics", {})):
    return False
  for name, values in new["metrics"].items():
    a = np.asarray(values, np.float64)
    b = np.asarray(old["metrics"][name], np.float64)
    if a.shape != b.shape or not np.allclose(a, b, rtol=SAME_NUMBERS_RTOL, atol=0,
                                             equal_nan=True):
      return False
  return True


def _rounded(values) -> list:
  """[E, G, S] floats as JSON (non-finite as None), to 7 significant digits."""
  import numpy as np
  arr = np.asarray(values, dtype=np.float64)
  return [[[float(f"{x:.7g}") if np.isfinite(x) else None for x in point] for point in row]
          for row in arr]


def _commit() -> str:
  try:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True, cwd=PACKAGE_DIR, timeout=10)
    return out.stdout.strip()
  except (OSError, subprocess.SubprocessError):
    return ""


def _environment() -> dict:
  info = results.environment_info()
  return {k: info[k] for k in ("jax", "jaxlib", "platform", "devices") if k in info}
