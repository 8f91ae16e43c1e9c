"""Runs an algorithm: blocks of rounds fused in lax.scan, jitted evaluation, seeds and grids
as one vmapped program sharded over devices.

Every (grid point, seed) pair is one *run*; runs are a leading axis of every state leaf.
Run r = g * num_seeds + s. A run's key is `keys.root(seed)`; its initialization draws from
`keys.init_key`, round t from `keys.round_key(run_key, t)` (core/keys.py), so a run draws
the same random numbers whatever the other runs and the devices. Its float results still
follow the device layout (`devices`: how the runs and each cohort are split changes the
order of additions and the shapes XLA vectorizes): the same layout gives the same bits,
another agrees to float tolerance (`host_devices.py`).
"""

import dataclasses
import functools
import os
import time
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from fedjax_bench import settings
from fedjax_bench.config.run_settings import RunSettings
from fedjax_bench.core import cohort, keys
from fedjax_bench.core.types import (FederatedAlgorithm, Personal, count_name, is_count,
                                     params_to_evaluate)
from fedjax_bench.engine import checkpoint as checkpoint_lib
from fedjax_bench.engine import compile_cache
from fedjax_bench.errors import UsageError
from fedjax_bench.output.results import History
from fedjax_bench.task import run_data as run_data_lib
from fedjax_bench.task.task import Task

# build(hp) -> FederatedAlgorithm; with per-run data (`run(..., run_data=)`),
# build(hp, one run's RunData).
Builder = Callable[..., FederatedAlgorithm]


@dataclasses.dataclass
class RunOutput:
  history: History
  timing: dict      # rounds_per_second, wall_seconds, compile_seconds
  state: tuple      # final (server, clients, t), run axis first
  # [G, S]: the round after which a run's parameters were first non-finite (0: never).
  diverged: np.ndarray = None


_RUN_DEFAULTS = settings.specs(RunSettings)


@dataclasses.dataclass
class Checkpointing:
  """Where and how often `run` saves the whole simulation, and whether it resumes.

  A checkpoint is written after every `every` evaluations (atomically, `checkpoint.py`);
  `resume` continues from `path` when it exists, bit-identically to a run never stopped.
  `fingerprint` (JSON-able) identifies the configuration; a checkpoint of another one is
  refused. `on_save(history)` is called after each save (the CLI writes metrics.csv so far).

  `max_share` caps the time spent saving: a save that is due is skipped while the wall
  time since the end of the last one is under that save's cost (fetch, write, `on_save`)
  divided by `max_share`, so saves take at most about that share of a run (the first one
  aside). A kill then loses the rounds since the last save, which may be more than one
  block; what is saved is unchanged, so resuming stays bit-identical. 0 (also with several
  processes): every due save is written. The defaults are `RunSettings`'s.

  A checkpoint also records `data_digest` (the data's, `run_dir.data_digest`) and the device
  layout (backend, devices of the run's mesh); a resume on other data or another layout,
  whose numbers would follow another trajectory, is refused. `on_history(history)` is
  called after every evaluation with the history so far (TensorBoard's event files).

  `run` keeps `round` (the last completed one), `saved_round` (the last one saved) and
  `pending` (a call that saves the last completed block, None once it is saved): what an
  interrupt saves (`api.execute`).
  """
  path: str
  every: int = _RUN_DEFAULTS["checkpoint_every"].default
  fingerprint: dict = dataclasses.field(default_factory=dict)
  resume: bool = False
  on_save: Optional[Callable[[History], None]] = None
  max_share: float = _RUN_DEFAULTS["checkpoint_max_share"].default
  data_digest: Optional[str] = None
  on_history: Optional[Callable[[History], None]] = None
  round: int = 0
  saved_round: Optional[int] = None
  pending: Optional[Callable[[], None]] = None


@dataclasses.dataclass
class Progress:
  round: int
  rounds: int
  metrics: dict     # name -> [G] the mean over each grid point's seeds (NaN ones skipped)
  rounds_per_second: float
  eta_seconds: float
  grid: list = dataclasses.field(default_factory=lambda: [{}])  # the G points; [{}]: none


def _grid_arrays(grid: list[dict], num_seeds: int) -> dict:
  """{name: [G*S] values}, each grid point repeated for its seeds."""
  names = list(grid[0])
  return {k: jnp.repeat(jnp.asarray([g[k] for g in grid], jnp.float32), num_seeds)
          for k in names}


def _reduce_block(metrics: dict) -> dict:
  """A block's value of each per-round metric ([rounds] arrays): the last value of a
  cumulative one (``cum_*``, e.g. bits sent so far); for a metric with a count
  (`types.count_name`) the mean over the block's items, sum(m * count) / sum(count), NaN
  when there are none, and the count summed; else the mean over the rounds."""
  out = {}
  for name, values in metrics.items():
    count = metrics.get(count_name(name))
    if name.startswith("cum_"):
      out[name] = values[-1]
    elif is_count(name):
      out[name] = jnp.sum(values)
    elif count is not None:
      total = jnp.sum(count)
      weighted = jnp.sum(jnp.where(count > 0, values * count, 0.0))
      out[name] = jnp.where(total > 0, weighted / jnp.where(total > 0, total, 1.0), jnp.nan)
    else:
      out[name] = jnp.mean(values)
  return out


def over_runs(fn: Callable, sharding: NamedSharding, in_specs=None, out_specs=None,
              num_clients: Optional[int] = None, init: bool = False) -> Callable:
  """Maps `fn` over the leading run axis, each device mapping its own runs.

  Devices along the mesh's "clients" axis hold the same runs and split each
  cohort's local training between them (`client_map.map_clients`). With `num_clients`,
  the client states are sharded over that axis too (`in_specs`/`out_specs` give
  them PartitionSpec("runs", "clients"), `state_specs`): each device holds its rows
  and `cohort.gather`/`scatter`/`population_*` exchange only what a round needs.
  Everything else they compute redundantly, so their copies of it stay identical.
  `init`: `fn` returns (server, clients, ...) with whole populations (built outside
  the sharded context), and each device keeps its own rows of the clients.

  A device holding one run calls `fn` on it directly instead of vmapping over a
  size-1 axis: XLA:CPU lowers some dots with a degenerate batch dimension to
  kernels that round differently.
  """
  clients = sharding.mesh.shape["clients"]
  spec = PartitionSpec("runs")
  in_specs = spec if in_specs is None else in_specs
  out_specs = spec if out_specs is None else out_specs

  def one(*args):
    if init:
      with cohort.sharded_over("clients", clients):  # whole populations, not yet sharded
        out = fn(*args)
      if num_clients is not None and clients > 1:
        out = (out[0], cohort.own_rows(out[1], "clients", clients)) + tuple(out[2:])
      return out
    return fn(*args)

  def local(*args):
    with cohort.sharded_over("clients", clients, num_clients):
      if jax.tree.leaves(args)[0].shape[0] == 1:
        out = one(*jax.tree.map(lambda a: a[0], args))
        return jax.tree.map(lambda a: a[None], out)
      return jax.vmap(one)(*args)

  # check_vma=False: algorithm code need not annotate which values vary across runs.
  return jax.shard_map(local, mesh=sharding.mesh, in_specs=in_specs, out_specs=out_specs,
                       check_vma=False)


def state_specs(num_clients: Optional[int]):
  """PartitionSpecs of a state (server, clients, t, diverged): the client states sharded
  over the mesh's "clients" axis (when there are any), the rest over runs only."""
  runs = PartitionSpec("runs")
  return (runs, PartitionSpec("runs", "clients") if num_clients else runs, runs, runs)


def client_count(client_shapes) -> Optional[int]:
  """The population N of run-first client states ([runs, N, ...] leaves); None without
  any. Every leaf must have the client axis first (the contract, `core/types.py`)."""
  sizes = {leaf.shape[1] if len(leaf.shape) > 1 else None
           for leaf in jax.tree.leaves(client_shapes)}
  if not sizes:
    return None
  if len(sizes) != 1 or None in sizes:
    raise UsageError(f"every leaf of an algorithm's client states must have the client axis "
                     f"first, of one length; got leading sizes {sorted(map(str, sizes))}")
  return sizes.pop()


def run_sharding(num_runs: int, devices=None) -> NamedSharding:
  """A ("runs", "clients") mesh: runs over the most devices that divide their number,
  the devices left over (a multiple) splitting each run's cohort."""
  devices = list(devices if devices is not None else jax.devices())
  d_runs = max(k for k in range(1, len(devices) + 1) if num_runs % k == 0)
  d_clients = len(devices) // d_runs
  grid = np.array(devices[:d_runs * d_clients]).reshape(d_runs, d_clients)
  return NamedSharding(Mesh(grid, ("runs", "clients")), PartitionSpec("runs"))


def run(build: Builder, task: Task, hparams: dict, *, seeds: list[int], rounds: int,
        eval_every: int, grid: Optional[list[dict]] = None,
        on_eval: Optional[Callable[[Progress], None]] = None, devices=None,
        checkpoint: Optional[Checkpointing] = None,
        run_data: Optional[run_data_lib.RunData] = None,
        shard_client_state: bool = True) -> RunOutput:
  """Runs rounds 1..`rounds`, evaluating at round 0, every `eval_every` rounds and at the end.

  `grid` is a list of {hparam: value} points varied in one program; their values
  override `hparams` and must be scalars.

  `run_data` (--data_per_seed): each seed's own data and world, rows in the order of
  `seeds`; every run gets its seed's row, is built as ``build(hp, row)`` and evaluated
  on ``task.for_run(row.task)``. A task holding per-seed views needs it.

  `shard_client_state`: the client states are sharded over the mesh's "clients" axis;
  False replicates them on every device of that axis (benchmarks/speed/sharded_state.py
  compares the two).

  Divergence: a run whose server parameters (checked every round) or evaluated losses
  become non-finite is recorded with the round
  (`RunOutput.diverged`) and its metrics from then on are NaN; the other runs go on. Its
  row keeps computing inside the vectorized program (taking it out would recompile), and
  the loop ends early once every run has diverged.
  """
  start = time.perf_counter()
  _check_grid(hparams, grid)
  grid = grid or [{}]
  num_seeds, num_runs = len(seeds), len(grid) * len(seeds)
  sharding = run_sharding(num_runs, devices)
  put = lambda tree: _put(tree, sharding)
  swept = put(_grid_arrays(grid, num_seeds))
  seed_keys = put(jnp.stack([keys.root(s) for s in seeds] * len(grid)))
  # (per-run data,) or (): the functions below take it as a trailing argument.
  extra = _per_run_data(run_data, task, seeds, len(grid), put)

  def algorithm(hp_run, *data):
    return build(with_point(hparams, hp_run), *data)

  # A run's state: (server, clients, t, diverged); `diverged` is 0 or the first round
  # after which the server's parameters were non-finite.
  def init_one(hp_run, seed_key, *data):
    server, clients = algorithm(hp_run, *data).init(keys.init_key(seed_key))
    return server, clients, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32)

  def block_one(hp_run, seed_key, state, length, *data):
    alg = algorithm(hp_run, *data)

    def step(carry, _):
      server, clients, t, diverged = carry
      server, clients, metrics = alg.round(server, clients, keys.round_key(seed_key, t))
      finite = _all_finite(server.params)
      diverged = jnp.where((diverged == 0) & ~finite, t + 1, diverged)
      return (server, clients, t + 1, diverged), metrics

    state, metrics = jax.lax.scan(step, state, None, length=length)
    return state, _reduce_block(metrics)

  def eval_one(hp_run, seed_key, state, *data):
    server, clients, t = state[:3]
    scored = task.for_run(data[0].task) if data else task
    alg = algorithm(hp_run, *data)
    params = params_to_evaluate(alg, server, clients)
    out = scored.evaluate(params)
    if alg.personal_params is not None and scored.client_test is not None:
      personal = alg.personal_params(server, clients)
      if isinstance(personal, Personal):  # only the per-client parts are gathered
        personal = personal._replace(rows=cohort.population(personal.rows))
      else:
        personal = cohort.population(personal)
      out.update(scored.evaluate_clients(personal, "personal_test", per_client=True))
    if scored.finetune is not None and scored.client_test is not None:
      lr = scored.finetune.lr or _setting(with_point(hparams, hp_run), "client_lr")
      key = keys.for_purpose(keys.eval_key(seed_key, t), "finetune")
      out.update(scored.evaluate_finetuned(params, key, lr))
    return out

  compile_seconds = 0.0

  def compiled(fn, out_shardings, *args):
    nonlocal compile_seconds
    t0 = time.perf_counter()
    exe = compile_cache.compile(lambda: jax.jit(fn, out_shardings=out_shardings).lower(*args))
    compile_seconds += time.perf_counter() - t0
    return exe

  # The client states are sharded over the mesh's "clients" axis (their population N
  # comes from the shapes of an unsharded init).
  whole = jax.eval_shape(over_runs(init_one, sharding, init=True), swept, seed_keys, *extra)
  num_clients = client_count(whole[1]) if shard_client_state else None
  specs = state_specs(num_clients)
  shard = lambda tree: jax.tree.map(lambda p: NamedSharding(sharding.mesh, p), tree)
  state_sharding = shard(specs)
  runs_in = lambda *rest: (PartitionSpec("runs"),) * 2 + rest
  init_exe = compiled(over_runs(init_one, sharding, out_specs=specs, num_clients=num_clients,
                                init=True), state_sharding, swept, seed_keys, *extra)
  state = init_exe(swept, seed_keys, *extra)
  eval_exe = compiled(
      over_runs(eval_one, sharding, in_specs=(PartitionSpec("runs"),) * 2 + (specs,)
                + (PartitionSpec("runs"),) * len(extra), num_clients=num_clients),
      sharding, swept, seed_keys, state, *extra)
  block_exes = {}

  def block_exe(length):
    if length not in block_exes:
      fn = over_runs(lambda hp, k, s, *data: block_one(hp, k, s, length, *data), sharding,
                     in_specs=runs_in(specs, *(PartitionSpec("runs"),) * len(extra)),
                     out_specs=(specs, PartitionSpec("runs")), num_clients=num_clients)
      block_exes[length] = compiled(fn, (state_sharding, sharding), swept, seed_keys, state,
                                    *extra)
    return block_exes[length]

  resumed = None
  layout = {"backend": jax.default_backend(), "devices": int(sharding.mesh.devices.size)}
  if checkpoint is not None and checkpoint.resume and os.path.exists(checkpoint.path):
    resumed = _restore(checkpoint, state, state_sharding, num_clients, layout, num_runs)
  # Per run, 0 or the round from which it diverged: its parameters (checked every round
  # on the device, state[3]) or its evaluated losses (checked here) were not finite.
  if resumed is None:
    eval_rounds, records = [0], [(_fetch(eval_exe(swept, seed_keys, state, *extra)), {})]
    done, run_seconds = 0, 0.0
    diverged = _diverged(np.zeros(num_runs, np.int32), _fetch(state[3]), records[0][0], 0)
    records[0] = _mask_diverged(records[0], diverged)
  else:
    state, eval_rounds, records, run_seconds, diverged = resumed
    done = eval_rounds[-1]
    if done > rounds:
      raise UsageError(f"checkpoint {checkpoint.path} is at round {done}, past "
                       f"--rounds={rounds}")
  start_done, start_seconds = done, run_seconds
  if checkpoint is not None:
    checkpoint.round, checkpoint.saved_round = done, None if resumed is None else done
  last_save = None  # (perf_counter at its end, its seconds)
  while done < rounds and not np.all(diverged > 0):
    length = min(eval_every, rounds - done)
    exe = block_exe(length)
    t0 = time.perf_counter()
    state, block_metrics = exe(swept, seed_keys, state, *extra)
    evals = eval_exe(swept, seed_keys, state, *extra)
    evals, block_metrics, on_device = _fetch((evals, block_metrics, state[3]))
    run_seconds += time.perf_counter() - t0
    done += length
    diverged = _diverged(diverged, on_device, evals, done)
    eval_rounds.append(done)
    records.append(_mask_diverged((evals, block_metrics), diverged))
    if checkpoint is not None:
      save = functools.partial(_save, checkpoint, state, list(records), list(eval_rounds),
                               run_seconds, diverged, seeds, grid, num_clients, layout)
      last_save = _after_block(checkpoint, save, last_save, done, len(records) - 1,
                               lambda: _history(eval_rounds, records, seeds, grid))
    if on_eval is not None:
      rps = (done - start_done) / max(run_seconds - start_seconds, 1e-9)
      means = {k: _point_means(v, len(grid)) for k, v in {**evals, **block_metrics}.items()}
      on_eval(Progress(done, rounds, means, rps, (rounds - done) / rps, grid))
  wall_seconds = time.perf_counter() - start

  history = _history(eval_rounds, records, seeds, grid)
  timing = {"rounds_per_second": done / max(run_seconds, 1e-9),
            "wall_seconds": wall_seconds, "compile_seconds": compile_seconds}
  return RunOutput(history, timing, _unpadded(state[:3], num_clients),
                   np.asarray(diverged).reshape(len(grid), num_seeds))


def with_point(hparams, point: dict):
  """The hyperparameters with a grid point's (traced) values: a settings object's fields
  replaced, or a plain dict's keys."""
  if settings.is_settings(hparams):
    return settings.replace(hparams, point)
  return {**hparams, **point}


def _setting(hparams, name: str):
  """A setting's value in the hyperparameters (a settings object or a plain dict)."""
  value = hparams.get(name) if isinstance(hparams, dict) else getattr(hparams, name, None)
  if value is None:
    raise UsageError(f"the hyperparameters hold no {name}; give --finetune_lr")
  return value


def _check_grid(hparams, grid: list[dict]) -> None:
  """A grid may vary only settings declared sweepable (`settings.setting(sweep=True)`)."""
  if not grid or not settings.is_settings(hparams):
    return
  own = settings.specs(type(hparams))
  bad = [n for n in grid[0] if n not in own or not own[n].sweep]
  if bad:
    raise UsageError(f"grid: {', '.join(bad)} cannot be swept in one program (not a "
                     f"sweepable setting of {type(hparams).__qualname__}); sweepable: "
                     f"{', '.join(n for n, s in own.items() if s.sweep)}")


def _per_run_data(data, task: Task, seeds, num_points: int, put) -> tuple:
  """(the run-sharded rows of ``data``, one per run,) or () without per-run data."""
  if data is None:
    if task.view is not None:
      raise UsageError("this task holds one partition per seed (--data_per_seed); pass the "
                       "experiment's run_data to engine.run")
    return ()
  if np.asarray(data.seed).tolist() != list(seeds):
    raise UsageError(f"run_data was made for seeds {np.asarray(data.seed).tolist()}, not "
                     f"{list(seeds)}; set up the experiment with the seeds it runs")
  return (put(run_data_lib.for_runs(data, num_points)),)


def _all_finite(tree) -> jax.Array:
  leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
            if jnp.issubdtype(x.dtype, jnp.inexact)]
  return jnp.all(jnp.stack(leaves)) if leaves else jnp.array(True)


def _point_means(values, num_points: int) -> np.ndarray:
  """[G] the mean over each grid point's runs (its seeds; the run axis is grid-major) of
  the non-NaN values, NaN where there are none, without warnings."""
  v = np.asarray(values, np.float64).reshape(num_points, -1)
  kept = ~np.isnan(v)
  n = kept.sum(axis=1)
  return np.where(n > 0, np.where(kept, v, 0.0).sum(axis=1) / np.maximum(n, 1), np.nan)


def _diverged(diverged, on_device, evals, done: int) -> np.ndarray:
  """Runs that diverged so far: as before, else at the device's round, else at `done`
  if an evaluated loss is not finite."""
  losses = [np.asarray(evals[k]) for k in ("train_loss", "test_loss") if k in evals]
  bad_loss = np.any([~np.isfinite(v) for v in losses], axis=0) if losses else False
  now = np.where(np.asarray(on_device) > 0, on_device, np.where(bad_loss, done, 0))
  return np.where(diverged > 0, diverged, now).astype(np.int32)


def _mask_diverged(record, diverged):
  """A diverged run's metrics are NaN from the evaluation after it diverged on."""
  bad = np.asarray(diverged) > 0
  if not bad.any():
    return record
  return tuple({k: np.where(bad, np.nan, np.asarray(v, np.float64)) for k, v in part.items()}
               for part in record)


def _save_affordable(checkpoint: Checkpointing, last_save) -> bool:
  """Whether the time since the last save is long enough for another (`max_share`)."""
  # Several processes must agree on every save (its fetch is collective): no budget.
  if last_save is None or checkpoint.max_share <= 0 or jax.process_count() > 1:
    return True
  end, cost = last_save
  return time.perf_counter() - end >= cost / checkpoint.max_share


def _after_block(checkpoint: Checkpointing, save, last_save, done: int, evaluations: int,
                 history):
  """Marks the block just completed as what an interrupt saves, saves it if due and
  affordable, and feeds `on_history`; returns `last_save`."""
  checkpoint.round, checkpoint.pending = done, save
  if checkpoint.on_history is not None:
    checkpoint.on_history(history())
  if evaluations % max(checkpoint.every, 1) == 0 and _save_affordable(checkpoint, last_save):
    t_save = time.perf_counter()
    save()
    last_save = (time.perf_counter(), time.perf_counter() - t_save)
  return last_save


def _save(checkpoint: Checkpointing, state, records, eval_rounds, run_seconds, diverged,
          seeds, grid, num_clients=None, layout=None) -> None:
  # The client states without the padding of their sharding: a checkpoint does not
  # depend on the number of devices.
  host = _unpadded(tuple(_fetch(tuple(state))), num_clients)
  leaves = [np.asarray(leaf) for leaf in jax.tree.leaves(host)]
  if jax.process_index() != 0:
    return
  checkpoint_lib.save(checkpoint.path, leaves=leaves, records=records,
                      eval_rounds=eval_rounds,
                      meta={"fingerprint": checkpoint.fingerprint, "run_seconds": run_seconds,
                            "diverged": [int(r) for r in diverged], "layout": layout,
                            "data_digest": checkpoint.data_digest})
  checkpoint.saved_round, checkpoint.pending = int(eval_rounds[-1]), None
  if checkpoint.on_save is not None:
    checkpoint.on_save(_history(eval_rounds, records, seeds, grid))


def _restore(checkpoint: Checkpointing, state, shardings, num_clients=None, layout=None,
             num_runs=None):
  """(state, eval_rounds, records, run_seconds, diverged) from the checkpoint file, checked against
  the configuration, the data, the device layout and the shapes of a freshly initialized
  state."""
  path = checkpoint.path
  leaves, records, eval_rounds, meta = checkpoint_lib.load(path)
  checkpoint_lib.check_matches(path, meta, checkpoint.fingerprint)
  there = meta.get("data_digest")
  if checkpoint.data_digest and there and there != checkpoint.data_digest:
    raise UsageError(f"checkpoint {path} was made from other data (data digest {there} "
                     f"there, {checkpoint.data_digest} now: --data_dir or the data files "
                     "changed); give the same data, or --overwrite to start over")
  saved = meta.get("layout")
  if layout is not None and isinstance(saved, dict) and saved != layout:
    raise UsageError(
        f"checkpoint {path} was written on {saved.get('devices')} {saved.get('backend')} "
        f"device(s) and this run has {layout['devices']} {layout['backend']} device(s), "
        "so it would go on along another trajectory; resume on the recorded layout (on "
        f"CPU: run with the same --host_devices (recorded: {saved.get('devices')})), or "
        "--overwrite to start over")
  if num_runs is not None and len(meta["diverged"]) != num_runs:
    raise checkpoint_lib.corrupt(path, f"diverged has {len(meta['diverged'])} entries for "
                                 f"{num_runs} runs")
  shapes = jax.eval_shape(lambda s: _unpadded(s, num_clients), tuple(state))
  fresh, treedef = jax.tree.flatten(shapes)
  if len(leaves) != len(fresh) or any(
      a.shape != b.shape or a.dtype != b.dtype for a, b in zip(leaves, fresh)):
    raise UsageError(f"checkpoint {path} does not hold this run's state "
                     "(its arrays have other shapes); delete it to start over")
  host = jax.tree.unflatten(treedef, leaves)
  padded = jax.tree.map(lambda a, like: _pad_to(np.asarray(a), like.shape[1]),
                        host[1], state[1])
  state = _put((host[0], padded) + tuple(host[2:]), shardings)
  diverged = np.asarray(meta["diverged"], np.int32)
  return state, list(eval_rounds), records, float(meta["run_seconds"]), diverged


def _unpadded(state, num_clients):
  """A state (server, clients, ...) with its client leaves ([runs, N padded, ...]) cut
  back to the N clients."""
  if num_clients is None:
    return state
  clients = jax.tree.map(lambda a: a[:, :num_clients] if a.shape[1] != num_clients else a,
                         state[1])
  return (state[0], clients) + tuple(state[2:])


def _pad_to(a: np.ndarray, rows: int) -> np.ndarray:
  """Zero client rows appended up to ``rows`` (the sharding's padding, as `cohort.own_rows`)."""
  pad = [(0, 0), (0, rows - a.shape[1])] + [(0, 0)] * (a.ndim - 2)
  return np.pad(a, pad) if rows > a.shape[1] else a


def _put(tree, sharding):
  """Host arrays onto the run mesh, by one sharding or a tree of them (a prefix of
  ``tree``). With several processes (`jax.distributed`), every process holds the same
  host values and contributes the shards of its own devices."""
  if jax.process_count() == 1:
    return jax.device_put(tree, sharding)
  put = lambda s, sub: jax.tree.map(
      lambda a: jax.make_array_from_callback(np.shape(a), s,
                                             lambda idx, a=a: np.asarray(a)[idx]), sub)
  if isinstance(sharding, NamedSharding):
    return put(sharding, tree)
  return jax.tree.map(put, sharding, tree, is_leaf=lambda x: isinstance(x, NamedSharding))


def _fetch(tree):
  """Run-sharded device arrays to host NumPy arrays; across processes, all-gathered so
  that every process sees every run."""
  if jax.process_count() == 1:
    return jax.device_get(tree)
  from jax.experimental import multihost_utils
  return multihost_utils.process_allgather(tree, tiled=True)


def _history(eval_rounds, records, seeds, grid) -> History:
  names = list(records[0][0]) + [k for k in records[-1][1] if k not in records[0][0]]
  shape = (len(grid), len(seeds))
  metrics = {}
  for name in names:
    rows = []
    for evals, block in records:
      value = evals.get(name, block.get(name))
      rows.append(np.full(shape, np.nan) if value is None
                  else np.asarray(value, np.float64).reshape(shape))
    metrics[name] = np.stack(rows)
  return History(rounds=np.asarray(eval_rounds), metrics=metrics, seeds=list(seeds),
                 grid=list(grid))
