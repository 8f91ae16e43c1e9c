"""Compilation with and without the persistent compilation cache: the same command line
run three times in one invocation, in fresh processes: cache off, cache on and empty (the
first run of a configuration), cache on and filled (every later run). Prints each run's
compile seconds (summary.json) and wall seconds, and the ratios against the first.

    python -m benchmarks.speed.compile_time [-- run.py flags]   (default: the default job)
"""

import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def one(flags, out, cache):
  env = dict(os.environ, FEDJAX_BENCH_COMPILE_CACHE=cache)
  t0 = time.perf_counter()
  subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "run.py"), *flags,
                  f"--output_dir={out}"], check=True, env=env, capture_output=True)
  wall = time.perf_counter() - t0
  with open(os.path.join(out, "summary.json")) as f:
    return json.load(f)["compile_seconds"], wall


def main(argv):
  flags = argv[argv.index("--") + 1:] if "--" in argv else []
  with tempfile.TemporaryDirectory() as tmp:
    cache = os.path.join(tmp, "xla")
    rows = [("cache off", *one(flags, os.path.join(tmp, "a"), "off")),
            ("cache on, empty", *one(flags, os.path.join(tmp, "b"), cache)),
            ("cache on, filled", *one(flags, os.path.join(tmp, "c"), cache))]
  base_c, base_w = rows[0][1], rows[0][2]
  print(f"run.py {' '.join(flags) or '(the default job)'}")
  print("| run | compile s | wall s | compile ratio | wall ratio |")
  print("|---|---:|---:|---:|---:|")
  for name, c, w in rows:
    print(f"| {name} | {c:.2f} | {w:.2f} | {c / base_c:.2f} | {w / base_w:.2f} |")


if __name__ == "__main__":
  main(sys.argv)
