"""Reruns reference configs (benchmarks/tools/reference.py) and saves their curves as JSON (for
the subprocess tests of tests/algorithms/test_reference_curves.py, which set the device count).

usage: reference_probe.py OUT.json [--repeat=N] [--cache_dir=DIR] [--first_device] [NAME ...]

Every algorithm (or the NAMEs) runs N times (default 1) on all of this process's devices;
OUT.json is {"devices": D, "runs": [{name: curves}, ...]}, one dict per repetition. With
--first_device, each also runs once laid out on the first device alone ("first_device":
{name: curves}), the layout of a one-device process.
With --cache_dir, JAX's persistent compilation cache lives there: a repetition then reuses
the first one's XLA executables (everything else, from the config to the traced program,
is rebuilt), which keeps "same seed, same curves" cheap for every algorithm.
"""

import json
import os
import sys
import time


def main(argv):
  out, repeat, cache_dir, first_device, names = argv[0], 1, None, False, []
  for arg in argv[1:]:
    if arg == "--first_device":
      first_device = True
    elif arg.startswith("--repeat="):
      repeat = int(arg.split("=", 1)[1])
    elif arg.startswith("--cache_dir="):
      cache_dir = arg.split("=", 1)[1]
    else:
      names.append(arg)
  import jax
  from benchmarks.tools import reference
  from fedjax_bench.engine import compile_cache
  if cache_dir:
    os.environ[compile_cache.ENV] = cache_dir
    compile_cache.enable()
  runs = []
  for i in range(repeat):
    t0 = time.perf_counter()
    runs.append(reference.compute_all(names or None))
    print(f"repetition {i}: {time.perf_counter() - t0:.1f}s", flush=True)
  result = {"devices": jax.device_count(), "runs": runs}
  if first_device:
    result["first_device"] = reference.compute_all(names or None, jax.devices()[:1])
  with open(out, "w") as f:
    json.dump(result, f)


if __name__ == "__main__":
  main(sys.argv[1:])
