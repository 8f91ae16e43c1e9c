"""What the speed benchmarks share: the machine and its load, timed blocks of one engine run,
the median, and the JSON record and Markdown table a benchmark writes.

A benchmark calls `environment()` before it measures and `finish(env)` after (the 1-minute
load average at both ends: another job on the machine shows there), times `blocks`, several
runs taking turns (`interleaved`) or its own sides, takes the `median` of the repeats, and
writes NAME.json (the record, with the environment) and NAME.md (its table, ending with the
`machine` line) with `write`.
Nothing here imports JAX at module level: a benchmark sets its CPU devices
(`host_devices.use_all_cores`) before JAX starts.
"""

import os
import resource
import statistics
import sys
import threading
import time
from typing import Callable, Optional, Sequence

from fedjax_bench.output import results


def cpu_model() -> str:
  """The CPU's model name from /proc/cpuinfo, or "unknown"."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return "unknown"


def environment(**extra) -> dict:
  """The machine before a measurement: versions, platform and devices
  (`results.environment_info`), the CPU count and model, the 1-minute load average
  ("loadavg_before"), and ``extra``."""
  return {**results.environment_info(), "cpu_count": os.cpu_count(),
          "cpu_model": cpu_model(), "loadavg_before": os.getloadavg(), **extra}


def finish(env: dict) -> dict:
  """``env`` with the load average after the measurement ("loadavg_after")."""
  env["loadavg_after"] = os.getloadavg()
  return env


def machine(env: dict, software: str = "", note: str = "") -> str:
  """The closing line of a table: the machine, the software (default: jax and the
  devices) and the load before and after (``note`` follows it)."""
  model = env.get("cpu_model")
  cpus = f"{env['cpu_count']} CPUs" + (f" ({model})" if model else "")
  software = software or f"jax {env['jax']}, devices {env['devices']}"
  return (f"Machine: {cpus}, {env.get('platform', '?')}; {software}; 1-minute load average "
          f"{env['loadavg_before'][0]:.2f} before, {env['loadavg_after'][0]:.2f} after{note}.")


def median(values: Sequence[float]) -> float:
  """The statistic every speed benchmark reports over its repeats."""
  return statistics.median(values)


def best_seconds(call: Callable[[], object], repeats: int) -> float:
  """The fewest wall seconds of ``repeats`` calls of ``call`` (a jitted computation; its
  result is waited for) after one untimed call that compiles it."""
  import jax  # noqa: PLC0415  (benchmarks set their CPU devices before JAX starts)
  jax.block_until_ready(call())
  best = float("inf")
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(call())
    best = min(best, time.perf_counter() - t0)
  return best


def peak_rss_mib() -> float:
  """The process's peak resident memory so far, MiB."""
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def blocks(build, task, hparams, seeds: Sequence[int], rounds: int, repeats: int,
           between: Optional[Callable[[], None]] = None) -> dict:
  """One `engine.run` of ``rounds * (repeats + 1)`` rounds with an evaluation every
  ``rounds``: one untimed warm-up block (compilation), then ``repeats`` timed blocks, each
  ``rounds`` rounds and one evaluation by the engine's own clock.

  ``between`` runs after each timed block, outside the engine's timed region (so another
  side can take its turn under the same machine load). Returns {"seconds": [per timed
  block], "warmup_block_seconds", "compile_seconds", "output": the engine's output}.
  """
  import numpy as np  # noqa: PLC0415
  from fedjax_bench import engine  # noqa: PLC0415  (after the caller set its devices)

  elapsed = []  # the engine's cumulative seconds after each block

  def on_eval(progress):
    elapsed.append(progress.round / progress.rounds_per_second)
    if between is not None and len(elapsed) > 1:
      between()

  out = engine.run(build, task, hparams, seeds=list(seeds), rounds=rounds * (repeats + 1),
                   eval_every=rounds, on_eval=on_eval)
  return {"seconds": np.diff(elapsed).tolist(), "warmup_block_seconds": elapsed[0],
          "compile_seconds": out.timing["compile_seconds"], "output": out}


def unknown(flag: str, asked: Sequence[str], valid: Sequence[str]) -> bool:
  """Whether ``asked`` names something not in ``valid`` (then the error is on stderr and
  the benchmark exits 2)."""
  bad = [a for a in asked if a not in valid]
  if bad:
    sys.stderr.write(f"error: unknown --{flag} {bad}; valid: {', '.join(valid)}\n")
  return bool(bad)


def comma_list(parser, flag: str, value: str, valid: Sequence[str]) -> list[str]:
  """The names of an argparse comma-list flag ``--flag=value``, in their order; one not in
  ``valid`` is a usage error naming the valid ones (``parser.error``: exit status 2)."""
  names = value.split(",")
  bad = sorted(set(names) - set(valid))
  if bad:
    parser.error(f"unknown --{flag} {bad}; valid: {', '.join(valid)}")
  return names


def target_cells(target: Optional[float], met: Optional[bool], fmt: str = "{:g}x") -> tuple:
  """The "target" and "met?" cells of a row: dashes where the row has no target."""
  if target is None:
    return "—", "—"
  return fmt.format(target), "yes" if met else "no"


def write(output_dir: str, name: str, record: Optional[dict] = None,
          markdown: Optional[str] = None) -> list[str]:
  """Writes OUTPUT_DIR/NAME.json (``record``) and OUTPUT_DIR/NAME.md (``markdown``),
  each when given, atomically; returns the paths written."""
  os.makedirs(output_dir, exist_ok=True)
  paths = []
  if record is not None:
    paths.append(os.path.join(output_dir, f"{name}.json"))
    results.atomic_write_json(paths[-1], record)
  if markdown is not None:
    paths.append(os.path.join(output_dir, f"{name}.md"))
    results.atomic_write_text(paths[-1], markdown if markdown.endswith("\n") else markdown + "\n")
  return paths


def interleaved(sides: dict, rounds: int, repeats: int) -> dict:
  """{side: {"wall": [seconds], "cpu": [seconds]}} of each timed block: one engine.run per
  side (``sides``: name -> (build, task, hp), build(hp) -> FederatedAlgorithm), in threads
  that take turns block by block after every side's warm-up block. A block is timed from the end of the side's previous evaluation callback to the start of
  its next: its rounds, its evaluation and the engine's bookkeeping. "cpu" is the
  process's CPU time over the block (every other side is waiting then), which a loaded
  machine disturbs less than the wall clock."""
  from fedjax_bench import engine  # noqa: PLC0415
  runs, sides = sides, list(sides)
  turn = threading.Condition()
  state = {"turn": 0, "ready": 0, "failed": False}
  seconds = {s: {"wall": [], "cpu": []} for s in sides}
  errors = []

  def side(i, name):
    calls = []
    start = []

    def on_eval(progress):
      del progress
      now = (time.perf_counter(), time.process_time())
      if start:
        seconds[name]["wall"].append(now[0] - start[0])
        seconds[name]["cpu"].append(now[1] - start[1])
      calls.append(now)
      with turn:
        if len(calls) == 1:  # warm-up done: wait for every side's warm-up
          state["ready"] += 1
          turn.notify_all()
          turn.wait_for(lambda: state["failed"] or (state["ready"] == len(sides)
                                                    and state["turn"] == i))
        else:
          state["turn"] = (i + 1) % len(sides)
          turn.notify_all()
          if len(calls) <= repeats:
            turn.wait_for(lambda: state["failed"] or state["turn"] == i)
      start[:] = (time.perf_counter(), time.process_time())

    try:
      build, task, hp = runs[name]
      engine.run(build, task, hp, seeds=[0],
                 rounds=rounds * (repeats + 1), eval_every=rounds, on_eval=on_eval)
    except Exception as e:  # noqa: BLE001  (re-raised in the main thread)
      errors.append(e)
      with turn:
        state["failed"] = True
        turn.notify_all()

  threads = [threading.Thread(target=side, args=(i, s)) for i, s in enumerate(sides)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  if errors:
    raise errors[0]
  return seconds
