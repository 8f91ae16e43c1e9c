"""python benchmarks/run.py --algo=fedavg --dataset=mnist [flags]; --helpfull lists them.
(`python -m benchmarks.run` is the same.)"""

import os
import sys

if not __package__:
  # Run as a file, Python puts benchmarks/ first on sys.path; the repository root takes its
  # place, so that this checkout's `fedjax_bench` is the one imported (an installed copy
  # otherwise could be), as with `python -m benchmarks.run` from the root.
  sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from absl import app  # noqa: E402

from fedjax_bench import cli  # noqa: E402

if __name__ == "__main__":
  app.run(cli.main, flags_parser=cli.parse_argv)
