"""What one collective costs between the host's CPU devices, inside a jitted loop.

  python -m benchmarks.speed.collective_latency

Each of 1,000 loop iterations runs a psum (or all-gather, ppermute) over the mesh's
devices, against the same loop without one; prints microseconds per iteration. On a
2-core CPU VM a psum of one float costs about 48 µs, which a round split over the two
devices pays at least once (docs/performance.md, "Small cohorts").
"""

import os
import time

from fedjax_bench.engine import host_devices

host_devices.use_all_cores()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, PartitionSpec as P  # noqa: E402

from benchmarks.speed import harness  # noqa: E402

ITERATIONS = 1000


def per_iteration_us(body, x, mesh) -> float:
  loop = lambda x: jax.lax.fori_loop(0, ITERATIONS, lambda i, x: body(x), x)
  f = jax.jit(jax.shard_map(loop, mesh=mesh, in_specs=P(), out_specs=P(), check_vma=False))
  f(x).block_until_ready()
  times = []
  for _ in range(5):
    t0 = time.perf_counter()
    f(x).block_until_ready()
    times.append((time.perf_counter() - t0) / ITERATIONS * 1e6)
  return harness.median(times)


def main():
  devices = jax.devices()
  mesh = Mesh(np.array(devices), ("c",))
  pairs = [(i, (i + 1) % len(devices)) for i in range(len(devices))]
  cases = [("no collective, 7,850 floats", lambda x: x * 0.5 + 1, 7850)]
  for n in (1, 7850, 78500):
    cases.append((f"psum of {n:,} floats", lambda x: jax.lax.psum(x * 0.5, "c"), n))
  cases.append(("all_gather of 7,850 floats",
                lambda x: jax.lax.all_gather(x, "c")[0] * 0.5, 7850))
  cases.append(("ppermute of 7,850 floats",
                lambda x: jax.lax.ppermute(x, "c", pairs) * 0.5, 7850))
  print(f"{len(devices)} {jax.default_backend()} devices, {ITERATIONS} iterations a call, "
        f"median of 5 calls; load {os.getloadavg()[0]:.2f}")
  for name, body, n in cases:
    print(f"  {name:<30} {per_iteration_us(body, jnp.ones(n), mesh):8.1f} µs an iteration")


if __name__ == "__main__":
  main()
