"""The command line: flags -> `config.resolve` -> `api.execute` -> results files.

    python benchmarks/run.py --algo=fedavg --dataset=mnist [flags]
    python -m fedjax_bench ...      fedjax-bench ...      (the same program)

Bad input exits with status 2 and one line on stderr, before anything is written; a run
that diverged exits with 1.
"""

import logging
import os
import sys
from typing import Sequence

logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)  # no "no TPU" notice

from absl import flags as absl_flags  # noqa: E402

from fedjax_bench import api, config, flags  # noqa: E402
from fedjax_bench.errors import UsageError  # noqa: E402

FLAGS = flags.FLAGS


def parse_argv(argv: Sequence[str]) -> list[str]:
  """absl's parser, but a bad flag is one line and exit status 2, not a usage dump."""
  try:
    return FLAGS(argv)
  except absl_flags.Error as e:
    sys.stderr.write(f"error: {e}\n")
    sys.exit(2)


def resolve_flags() -> tuple[config.Config, list[int], list[dict]]:
  """(the configuration, the seeds, the sweep grid) of the parsed flags."""
  return api.prepare(seeds=FLAGS.seeds, sweep=list(FLAGS.sweep), **flags.given_values())


def check_flags(dataset=None):
  """Every check a run makes of the parsed flags before it trains (`--check_only`)."""
  cfg, seeds, _ = resolve_flags()
  return api.check(cfg, seeds, dataset=dataset)


def main(argv: Sequence[str]) -> int:
  try:
    if len(argv) > 1:
      raise UsageError(f"unexpected arguments {' '.join(argv[1:])!r}; flags look like "
                       "--name=value")
    cfg, seeds, grid = resolve_flags()
    if cfg.run.output_dir is None and not cfg.run.check_only:  # the command line always writes
      cfg = config.replace(cfg, output_dir=os.path.join("results", "runs", api.run_name(cfg)))
    result = api.execute(cfg, seeds, grid)
    return 0 if result is None else result.status
  except UsageError as e:
    sys.stderr.write(f"error: {e}\n")
    return 2


def run_script(main) -> None:
  """app.run for a benchmark script: its flags parsed as the command line's, and a
  UsageError one line on stderr with exit status 2; else main's return value."""
  from absl import app

  def guarded(argv):
    try:
      sys.exit(main(argv))
    except UsageError as e:
      sys.stderr.write(f"error: {e}\n")
      sys.exit(2)

  app.run(guarded, flags_parser=parse_argv)


def entry() -> None:
  """The ``fedjax-bench`` console script and ``python -m fedjax_bench``."""
  from fedjax_bench import host_devices
  host_devices.use_all_cores()
  from absl import app
  app.run(main, flags_parser=parse_argv)
