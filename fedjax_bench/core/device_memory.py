"""Refusing, with a clear message, state that would not fit on the device."""

import math
import os

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_bench.errors import UsageError

FRACTION = 0.8  # of the device's memory a single state array may claim


def device_bytes() -> int:
  """Memory of the first device: the allocator's limit on GPU/TPU, physical RAM on CPU;
  $FEDJAX_BENCH_DEVICE_BYTES overrides both (a shared device, a test)."""
  if os.environ.get("FEDJAX_BENCH_DEVICE_BYTES"):
    return int(float(os.environ["FEDJAX_BENCH_DEVICE_BYTES"]))
  device = jax.local_devices()[0]  # jax.devices()[0] belongs to process 0 (--distributed)
  stats = device.memory_stats() if hasattr(device, "memory_stats") else None
  if stats and stats.get("bytes_limit"):
    return int(stats["bytes_limit"])
  return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_fits(nbytes: int, what: str, hint: str) -> None:
  limit = device_bytes()
  if nbytes > FRACTION * limit:
    raise UsageError(f"{what} needs {nbytes / 2**30:.2f} GiB per run, more than "
                     f"{FRACTION:.0%} of the device's {limit / 2**30:.1f} GiB; {hint}")


def tree_bytes(tree) -> int:
  """Bytes of a pytree of arrays or ShapeDtypeStructs."""
  return sum(math.prod(a.shape) * jnp.dtype(a.dtype).itemsize for a in jax.tree.leaves(tree))


def estimate(build, task, hparams: dict, world, num_runs: int, num_devices: int,
             run_data=None) -> dict:
  """What a run needs on one device, in bytes, from the shapes alone (`jax.eval_shape`):

  * ``data``: the task's arrays (training examples, test and scored training sets),
    replicated on every device;
  * ``state_per_run``: the server and client states (`init`), which the engine keeps for
    every run (seed x grid point) on the device that owns it, and with --data_per_seed
    the run's own index maps and world arrays (``run_data``, `task/run_data.py`). The
    client states count only the rows one device holds: the engine shards them over the
    devices that runs leave over (``client_devices``, `engine.run_sharding`), ceil(N / d)
    rows each (``client_state_per_run``);
  * ``round_per_run``: the round's working set: the cohort's deltas (cap x parameters)
    and, for the clients trained at once, parameters, optimizer state, gradients and a
    minibatch, all as float32, and the minibatches and positions read ahead of local
    training (each at most `local.GATHER_BUDGET`); an estimate, not a measurement of
    XLA's buffers.
  """
  from fedjax_bench.core import client_map, cohort, local
  run_devices = max(k for k in range(1, num_devices + 1) if num_runs % k == 0)
  runs_here = num_runs // run_devices
  client_devices = num_devices // run_devices
  # Built as the engine builds it, under the mesh axis that its client states are split
  # over (a build's own check of its client state then counts one device's rows).
  with cohort.sharded_over("clients", client_devices):
    alg = build(hparams)
    server, clients = jax.eval_shape(alg.init, jax.random.PRNGKey(0))
  params = tree_bytes(server.params)
  arrays = [task.x, task.y, task.test_x, task.test_y, task.train_eval_x,
            task.train_eval_y, task.offsets, task.counts]
  data = tree_bytes(list({id(a): a for a in arrays}.values()))  # a view's x is train_eval_x
  cap = world.participation.cap
  width = client_map.resolve_width(hparams.client_width) or cap
  example = math.prod(task.feature_shape) * 4
  spec = local.LocalSpec(world.max_steps, hparams.batch_size)
  ahead = (min(local.GATHER_BUDGET, min(width, cap) * spec.max_steps * spec.batch_size * example)
           + min(local.GATHER_BUDGET, local.positions_bytes(cap, spec)))
  working = 2 * cap * params + min(width, cap) * (4 * params
                                                  + hparams.batch_size * example) + ahead
  client_state = sum(
      cohort.rows_per_device(a.shape[0], client_devices) * math.prod(a.shape[1:])
      * jnp.dtype(a.dtype).itemsize for a in jax.tree.leaves(clients))
  state = tree_bytes(server) + client_state
  if run_data is not None:  # each run holds one row of its seed's data (--data_per_seed)
    rows = max(len(np.asarray(run_data.seed)), 1)
    state += sum(np.asarray(a).nbytes for a in jax.tree.leaves(run_data)) // rows
  return {"data": data, "state_per_run": state, "round_per_run": working,
          "runs_per_device": runs_here, "params": params,
          "client_state_per_run": client_state, "client_devices": client_devices,
          "total": data + runs_here * (state + working)}


def check_run(build, task, hparams: dict, world, num_runs: int, num_devices: int,
              run_data=None) -> dict:
  """`estimate`, refused with a one-line error above FRACTION of the device's memory; the
  message says how many runs per device would fit, if any."""
  e = estimate(build, task, hparams, world, num_runs, num_devices, run_data)
  limit = FRACTION * device_bytes()
  if e["total"] <= limit:
    return e
  per_run = e["state_per_run"] + e["round_per_run"]
  fit = int((limit - e["data"]) // per_run) if limit > e["data"] else 0
  gib = human
  advice = (f"at most {fit} runs per device fit: use fewer --seeds or --sweep points, or "
            "more devices" if fit >= 1 else
            "not even one run fits: use fewer clients, a smaller model or a device with "
            "more memory")
  raise UsageError(f"this run needs about {gib(e['total'])} per device (data "
                   f"{gib(e['data'])}, state {gib(e['state_per_run'])} and round "
                   f"{gib(e['round_per_run'])} per run, {e['runs_per_device']} runs), more "
                   f"than {FRACTION:.0%} of the device's {gib(device_bytes())}; {advice}")


def human(nbytes: float) -> str:
  for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
    if nbytes >= scale:
      return f"{nbytes / scale:.2f} {unit}"
  return f"{int(nbytes)} B"
