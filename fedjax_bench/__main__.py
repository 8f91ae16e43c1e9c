"""python -m fedjax_bench [flags]: the command line (benchmarks/run.py)."""

from fedjax_bench import host_devices

host_devices.use_all_cores()

from fedjax_bench import cli  # noqa: E402

if __name__ == "__main__":
  cli.entry()
