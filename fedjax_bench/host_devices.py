"""One XLA CPU device per core, so the engine can split cohorts over the cores.

XLA:CPU runs the small per-client dots of local training on one core; with a CPU
device per core, the engine's ("runs", "clients") mesh puts every core to work
(BUILD_NOTES.md, "Speed"). Must run before JAX initializes its backends; it only
affects the CPU platform, so GPU and TPU runs are unchanged.
"""

import os

_FLAG = "--xla_force_host_platform_device_count"


def use_all_cores() -> None:
  """Sets the CPU device count to $FEDJAX_BENCH_HOST_DEVICES or the core count,
  unless XLA_FLAGS already sets it."""
  flags = os.environ.get("XLA_FLAGS", "")
  if _FLAG in flags:
    return
  count = int(os.environ.get("FEDJAX_BENCH_HOST_DEVICES", 0) or len(os.sched_getaffinity(0)))
  os.environ["XLA_FLAGS"] = f"{flags} {_FLAG}={max(count, 1)}".strip()
