"""python -m fedjax_bench [flags]: the command line (benchmarks/run.py)."""

from fedjax_bench import cli

if __name__ == "__main__":
  cli.entry()
