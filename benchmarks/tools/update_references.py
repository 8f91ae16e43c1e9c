"""Regenerates the reference convergence curves, results/reference/NAME.json.

  python -m benchmarks.tools.update_references          # every algorithm, then overwrite
  python -m benchmarks.tools.update_references --algos=fedavg,area
  python -m benchmarks.tools.update_references --check  # compare only; exit 1 if outside

Each algorithm's reference config (benchmarks/tools/reference.py) runs on one CPU device. Before
anything is written, every algorithm and metric prints the largest absolute and relative
difference against the committed file and whether it is within reference.RTOL / ATOL, and
how far a start perturbed by reference.PERTURBATION moves the new curves (a configuration
that moves past the tolerance is chaotic and must be changed; nothing is written then). The
perturbed curves are written beside the curves, where the tests compare them.
--check writes nothing and exits 1 when some difference is outside the tolerance (or a
file is missing); without it, the new curves replace the committed ones.
"""

import argparse
import os
import sys
import tempfile

from benchmarks.tools import reference
from fedjax_bench import algorithms
from fedjax_bench.engine import compile_cache
from fedjax_bench.output import results


def parse(argv):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--algos", default="", help="comma list of algorithms (default: all)")
  p.add_argument("--check", action="store_true",
                 help="only compare with the committed files; exit 1 if outside tolerance")
  p.add_argument("--dir", default=str(reference.REFERENCE_DIR),
                 help="where the reference files are (default: results/reference)")
  args = p.parse_args(argv)
  names = [n for n in args.algos.split(",") if n.strip()] or list(algorithms.ALGORITHMS)
  unknown = [n for n in names if n not in algorithms.ALGORITHMS]
  if unknown:  # every registered algorithm has a reference run (its defaults without CONFIGS)
    p.error(f"unknown algorithms {', '.join(unknown)}; valid: "
            f"{', '.join(algorithms.ALGORITHMS)}")
  return args, names


def report(name, curves, directory) -> bool:
  """Prints the differences to the committed file; True when within tolerance."""
  try:
    old = reference.load(name, directory)
  except FileNotFoundError:
    print(f"{name:22s} (no committed file)  {curves['seconds']:.1f}s", flush=True)
    return False
  flags_changed = old.get("flags") != reference.flags(name)
  diffs = reference.differences(reference.expected_curves(old), curves)
  ok = all(d["ok"] for d in diffs.values()) and not flags_changed
  cells = "  ".join(f"{m} abs {d['max_abs']:.2e} rel {d['max_rel']:.2e}"
                    f"{'' if d['ok'] else ' OUTSIDE'}" for m, d in diffs.items())
  note = "  (config changed)" if flags_changed else ""
  print(f"{name:22s} {cells}{note}  {curves['seconds']:.1f}s", flush=True)
  return ok


def perturbed(name, curves, device):
  """``name``'s curves from a start perturbed by reference.PERTURBATION, and whether they
  stay within the tolerance of ``curves`` (printed with how far they moved)."""
  moved = reference.compute(name, devices=device, perturbation=reference.PERTURBATION)
  diffs = reference.differences(curves, moved)
  ok = all(d["ok"] for d in diffs.values())
  worst = max(d["max_rel"] for d in diffs.values())
  print(f"{'':22s} perturbed start ({reference.PERTURBATION:g}): max rel {worst:.2e}"
        f"{'' if ok else ' OUTSIDE: chaotic, change its configuration'}", flush=True)
  return moved, ok


def main(argv=None) -> int:
  args, names = parse(argv)
  import jax
  device = jax.devices("cpu")[:1]  # the references are one CPU device's float32 numbers
  print(f"tolerance: rtol {reference.RTOL:g}, atol {reference.ATOL:g}; jax {jax.__version__}, "
        f"{len(names)} algorithm(s) on {device[0]}", flush=True)
  # The perturbed start compiles the plain run's round and evaluation programs again.
  os.environ[compile_cache.ENV] = tempfile.mkdtemp(prefix="xla_cache_")
  compile_cache.enable()
  new, moved, within, stable = {}, {}, True, True
  for name in names:
    new[name] = reference.compute(name, devices=device)
    within &= report(name, new[name], args.dir)
    moved[name], ok = perturbed(name, new[name], device)
    stable &= ok
  if not stable:
    print("some configurations are chaotic; nothing written")
    return 1
  if args.check:
    print("all within tolerance" if within else "some curves are OUTSIDE the tolerance")
    return 0 if within else 1
  os.makedirs(args.dir, exist_ok=True)
  for name, curves in new.items():
    results.atomic_write_json(reference.path(name, args.dir),
                              reference.record(name, curves, moved[name]))
  print(f"wrote {len(new)} file(s) to {args.dir}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
