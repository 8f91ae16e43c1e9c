"""A run's CPU device layout: how many XLA CPU devices its runs and cohorts are split over.

XLA:CPU runs the small per-client dots of local training on one core; with several CPU
devices, the engine's ("runs", "clients") mesh puts several cores to work
(docs/performance.md, "Several CPU devices"). The split also changes which float additions
happen in which order and which shapes XLA vectorizes, and chaotic configurations amplify
those last-digit differences (SCAFFOLD on synthetic data differs by up to 11% in a seed's
test loss at round 30 between 1 and 2 devices). So the layout is a setting of the run
(`--host_devices`, `RunSettings`), with the same default on every machine and recorded
with the run, never the machine's core count: the same command gives the same numbers on
a 2-core and a 64-core machine.
"""

import os
import sys

from fedjax_bench.errors import UsageError

_FLAG = "--xla_force_host_platform_device_count"
ENV = "FEDJAX_BENCH_HOST_DEVICES"  # the speed benchmarks' device count (`use_all_cores`)


def cores() -> int:
  """The cores this process may run on."""
  if hasattr(os, "sched_getaffinity"):
    return len(os.sched_getaffinity(0))
  return os.cpu_count() or 1


def count(host_devices: int) -> int:
  """The CPU devices of a layout setting: ``host_devices``, or one per core for 0."""
  return host_devices if host_devices > 0 else cores()


def _forced() -> bool:
  return _FLAG in os.environ.get("XLA_FLAGS", "")


def request(host_devices: int) -> None:
  """Asks JAX for the layout's CPU devices, if its backends have not started yet and
  XLA_FLAGS does not force a count of its own; afterwards, nothing changes."""
  import jax
  from jax._src import xla_bridge
  if _forced() or xla_bridge.backends_are_initialized():
    return
  jax.config.update("jax_num_cpu_devices", count(host_devices))


def devices(host_devices: int) -> list:
  """The devices a run is laid out on: the first ``count(host_devices)`` CPU devices when
  JAX computes on the CPU (extra devices stay idle), every device on GPU and TPU.
  A process whose CPU backend started with fewer devices is refused: its numbers would
  be another layout's."""
  import jax
  request(host_devices)
  have = jax.devices()
  if jax.default_backend() != "cpu":
    return have
  n = count(host_devices)
  if len(have) < n:
    why = " (XLA_FLAGS forces the count)" if _forced() else ""
    raise UsageError(
        f"--host_devices={host_devices} lays the run out on {n} CPU devices, but JAX "
        f"started in this process with {len(have)}{why}; pass host_devices={len(have)} (a "
        f"different layout, so different last digits), or call "
        f"fedjax_bench.engine.host_devices.request({host_devices}) before anything uses JAX")
  return have[:n]


def describe(devs) -> str:
  """'2 cpu devices' for the record of a run."""
  platform = devs[0].platform if devs else "cpu"
  return f"{len(devs)} {platform} device{'' if len(devs) == 1 else 's'}"


def use_all_cores() -> None:
  """For the speed benchmarks (not runs, whose layout is `--host_devices`): one CPU device
  per core, or $FEDJAX_BENCH_HOST_DEVICES, unless XLA_FLAGS already sets a count. Must run
  before JAX starts its backends."""
  if _forced():
    return
  text = os.environ.get(ENV, "").strip()
  if text:
    try:
      n = int(text)
    except ValueError:
      n = 0
    if n < 1:  # called at a script's import, before its error handling: exit here
      sys.stderr.write(f"error: ${ENV}={text!r} must be a positive integer (CPU devices)\n")
      sys.exit(2)
  else:
    n = cores()
  flags = os.environ.get("XLA_FLAGS", "")
  os.environ["XLA_FLAGS"] = f"{flags} {_FLAG}={n}".strip()
