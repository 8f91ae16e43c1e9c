"""Multi-host start-up (--distributed): this process joins the job's other processes."""

import jax

from fedjax_bench.errors import UsageError


def initialize(run_cfg) -> None:
  """Joins the job as `run_cfg` (the run settings) says; with no --coordinator_address,
  `jax.distributed.initialize` finds its peers itself (TPU pods, SLURM, Open MPI)."""
  kwargs = {}
  if run_cfg.coordinator_address:
    if run_cfg.num_processes < 1 or run_cfg.process_id < 0:
      raise UsageError("--coordinator_address needs --num_processes and --process_id")
    kwargs = dict(coordinator_address=run_cfg.coordinator_address,
                  num_processes=run_cfg.num_processes, process_id=run_cfg.process_id)
  # CPU processes need a collective implementation to exchange runs (GPUs/TPUs bring theirs).
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(**kwargs)
