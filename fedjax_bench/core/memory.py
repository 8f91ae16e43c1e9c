"""Refusing, with a clear message, state that would not fit on the device."""

import os

import jax

from fedjax_bench.errors import UsageError

FRACTION = 0.8  # of the device's memory a single state array may claim


def device_bytes() -> int:
  """Memory of the first device: the allocator's limit on GPU/TPU, physical RAM on CPU."""
  device = jax.devices()[0]
  stats = device.memory_stats() if hasattr(device, "memory_stats") else None
  if stats and stats.get("bytes_limit"):
    return int(stats["bytes_limit"])
  return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_fits(nbytes: int, what: str, hint: str) -> None:
  limit = device_bytes()
  if nbytes > FRACTION * limit:
    raise UsageError(f"{what} needs {nbytes / 2**30:.2f} GiB per run, more than "
                     f"{FRACTION:.0%} of the device's {limit / 2**30:.1f} GiB; {hint}")
