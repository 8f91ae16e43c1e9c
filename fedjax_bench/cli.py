"""The command line: flags -> `config.resolve` -> `api.execute` -> results files.

    python benchmarks/run.py --algo=fedavg --dataset=mnist [flags]
    python -m fedjax_bench ...      fedjax-bench ...      (the same program)

Bad input exits with status 2 and one line on stderr, before anything is written; a run
that diverged, or a write that failed (disk full), exits with 1; Ctrl-C and SIGTERM save
the last completed block and exit with 130 and 143, each with one line.
"""

import logging
import os
import signal
import sys
from typing import Sequence

logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)  # no "no TPU" notice

from absl import flags as absl_flags  # noqa: E402

from fedjax_bench import api, config  # noqa: E402
from fedjax_bench.config import flags
from fedjax_bench.engine import run_dir  # noqa: E402
from fedjax_bench.errors import UsageError  # noqa: E402

FLAGS = flags.FLAGS


def parse_argv(argv: Sequence[str]) -> list[str]:
  """absl's parser, but a bad flag is one line and exit status 2, not a usage dump."""
  try:
    flags.import_modules(argv)
    return FLAGS(argv)
  except UsageError as e:
    sys.stderr.write(f"error: {e}\n")
    sys.exit(2)
  except absl_flags.Error as e:
    sys.stderr.write(f"error: {e}\n")
    sys.exit(2)
  except UnicodeDecodeError as e:  # absl reads each --flagfile as UTF-8 text
    sys.stderr.write(f"error: a --flagfile is not a text file ({e.reason} at byte {e.start})\n")
    sys.exit(2)


def resolve_flags() -> tuple[config.Config, list[int], list[dict]]:
  """(the configuration, the seeds, the sweep grid) of the parsed flags."""
  return api.prepare(seeds=FLAGS.seeds, sweep=list(FLAGS.sweep), **flags.given_values())


def check_flags(dataset=None):
  """Every check a run makes of the parsed flags before it trains (`--check_only`)."""
  cfg, seeds, _ = resolve_flags()
  return api.check(cfg, seeds, dataset=dataset)


class Terminated(KeyboardInterrupt):
  """SIGTERM, raised where the run is, so that it ends as Ctrl-C does."""


def _terminate(signum, frame):
  raise Terminated()


def main(argv: Sequence[str]) -> int:
  try:  # SIGTERM ends a run as Ctrl-C does (the command line's, not the library's)
    previous = signal.signal(signal.SIGTERM, _terminate)
  except ValueError:  # not the main thread
    previous = None
  try:
    return _main(argv)
  finally:
    if previous is not None:
      signal.signal(signal.SIGTERM, previous)


def _main(argv: Sequence[str]) -> int:
  try:
    if len(argv) > 1:
      raise UsageError(f"unexpected arguments {' '.join(argv[1:])!r}; flags look like "
                       "--name=value")
    cfg, seeds, grid = resolve_flags()
    if cfg.run.output_dir is None and not cfg.run.check_only:  # the command line always writes
      cfg = config.replace(cfg, output_dir=os.path.join("results", "runs", run_dir.run_name(cfg)))
    result = api.execute(cfg, seeds, grid)
    return 0 if result is None else result.status
  except UsageError as e:
    sys.stderr.write(f"error: {e}\n")
    return 2
  except api.Fault as e:
    sys.stderr.write(f"error: {e}\n")
    return 1
  except KeyboardInterrupt as e:
    sys.stderr.write(f"{e if isinstance(e, api.Interrupted) else 'interrupted'}\n")
    terminated = isinstance(e, Terminated) or isinstance(e.__context__, Terminated)
    return 128 + (signal.SIGTERM if terminated else signal.SIGINT)


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
  from absl import app
  app.run(main, flags_parser=parse_argv)
