"""python benchmarks/run.py --algo=fedavg --dataset=mnist [flags]; --helpfull lists them."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # noqa: E402

from fedjax_bench import cli  # noqa: E402

if __name__ == "__main__":
  app.run(cli.main, flags_parser=cli.parse_argv)
