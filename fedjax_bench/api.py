"""The Python API: one call runs what the command line runs.

    import fedjax_bench
    result = fedjax_bench.run(algo="fedavg", dataset="synthetic", seeds=3, rounds=50,
                              client_lr=0.05)
    result.summary["final"]["test_accuracy"]["mean"]
    result.metrics          # one row per (evaluation, grid point, seed); a DataFrame with pandas

Settings are the command line's flag names as keyword arguments (``Config`` objects work
too: ``fedjax_bench.run(cfg)``); ``output_dir=`` also writes the run's files
(config.json, metrics.csv, summary.json, curves.png; TensorBoard with ``tensorboard=True``):
a directory holding another configuration's results is refused (``overwrite=True``
replaces them), and one holding this configuration's finished run is not run again.
No absl parsing is involved.
"""

import dataclasses
import datetime
import json
import os
import sys
from typing import Mapping, Sequence

import numpy as np

from fedjax_bench import config as config_lib
from fedjax_bench import settings
from fedjax_bench.config import Config, flags, presets
from fedjax_bench.engine import checkpoint, compile_cache, host_devices
from fedjax_bench.errors import UsageError
from fedjax_bench.output import console, results


@dataclasses.dataclass
class Result:
  config: Config
  seeds: list[int]
  grid: list[dict]
  summary: dict            # the summary.json contract
  history: results.History  # None where output_dir already held this run's results
  output_dir: str | None
  diverged: list[dict]     # [{"hparams", "seed", "round"}] of the runs that diverged

  @property
  def status(self) -> int:
    """The command line's exit status: 1 if a run diverged, else 0."""
    return 1 if self.diverged else 0

  @property
  def curves(self) -> dict[str, np.ndarray]:
    """{"round": [E], metric: [E, grid points (1 without a grid), seeds]}."""
    return {"round": np.asarray(self.history.rounds), **self.history.metrics}

  def rows(self) -> list[dict]:
    """The per-evaluation metrics, one dict per (round, grid point, seed): metrics.csv."""
    return self.history.to_rows()

  @property
  def metrics(self):
    """`rows` as a pandas DataFrame when pandas is installed, else the list of dicts."""
    try:
      import pandas
    except ImportError:
      return self.rows()
    return pandas.DataFrame(self.rows())


def run(cfg: Config | None = None, *, seeds: int | str | Sequence[int] = config_lib.DEFAULT_SEEDS,
        sweep: Mapping[str, Sequence[float]] | Sequence[str] | None = None,
        progress: bool = True, **settings) -> Result | None:
  """Runs ``cfg`` (or the defaults) with ``settings`` (flag names) on top, for ``seeds``
  (a count, a list, or "5,7") and the product grid of ``sweep`` ({name: values}, or
  the command line's ["name:v1,v2"]), all in one program. Returns None with
  ``check_only=True`` (after every check a run makes)."""
  return execute(*prepare(cfg, seeds=seeds, sweep=sweep, **settings), progress=progress)


def prepare(cfg: Config | None = None, *, seeds=config_lib.DEFAULT_SEEDS, sweep=None,
            **settings) -> tuple[Config, list[int], list[dict]]:
  """(the resolved configuration, the seeds, the sweep grid) of `run`'s arguments, every
  check made that needs no data; the command line's flags go through here too."""
  seeds = flags.parse_seeds(seeds)
  if cfg is None:
    cfg = config_lib.resolve(settings, seeds=seeds)
  else:
    cfg = config_lib.complete(cfg, seeds=seeds)
    if settings:
      cfg = config_lib.replace(cfg, **settings)
  axes = flags.parse_sweep(sweep) if isinstance(sweep, (list, tuple)) else dict(sweep or {})
  config_lib.check_sweep(cfg, axes)
  run_name(cfg)  # a --name that is a path is refused here
  return cfg, seeds, flags.grid(axes)


def check(cfg: Config, seeds: list[int], dataset=None):
  """Every check a run makes before it trains; the experiment. ``dataset`` stands in for
  loading the configured one (checks of flagfiles whose data is not here)."""
  from fedjax_bench import experiment
  return experiment.setup(cfg, dataset=dataset, seeds=seeds)


class Interrupted(KeyboardInterrupt):
  """A run stopped by Ctrl-C (or the command line's SIGTERM) after saving what was due;
  its text is the one line that says where it stopped and how to go on."""


class Fault(RuntimeError):
  """A write that failed during a run (disk full, a read-only remount, the directory
  removed): a fault, not bad input; its text is one line saying what is still intact."""


def execute(cfg: Config, seeds: list[int], grid: list[dict], *, progress: bool = True,
            argv: Sequence[str] | None = None) -> Result | None:
  """The run of a resolved configuration (what `run` and the command line call).

  The output directory is claimed (created, locked for the run's life) only after every
  check has passed; an interrupt saves the last completed block (`Interrupted`), a failed
  write says which checkpoint is intact (`Fault`)."""
  claim = _Claim()
  try:
    return _execute(cfg, seeds, grid, progress, argv, claim)
  except KeyboardInterrupt:
    raise claim.interrupted() from None
  except OSError as e:
    if claim.lock is None:
      raise
    raise Fault(claim.fault(e)) from e
  finally:
    claim.release()


def _execute(cfg: Config, seeds: list[int], grid: list[dict], progress: bool, argv,
             claim: "_Claim") -> Result | None:
  # Heavy imports wait until the settings are known to be good.
  import jax
  from fedjax_bench import engine
  from fedjax_bench.core import memory

  out_cfg = cfg.run
  if out_cfg.compile_cache:
    compile_cache.enable(cfg.data.cache_dir)
  if out_cfg.check_only:
    check(cfg, seeds)
    if progress:
      print("ok: the settings are valid for this run")
    return None
  if out_cfg.distributed:
    _initialize_distributed(jax, out_cfg)
  devices = jax.devices() if out_cfg.distributed else host_devices.devices(
      out_cfg.host_devices)
  lead = jax.process_index() == 0  # writes files and prints progress
  say = progress and lead
  name = run_name(cfg)
  out = out_cfg.output_dir
  fingerprint = run_fingerprint(cfg, seeds, grid)
  ckpt_path = os.path.join(out, checkpoint.FILE) if out else None
  if out_cfg.resume and out is None:
    raise UsageError("--resume needs an output directory (output_dir=) to resume from")
  if out_cfg.resume and out_cfg.overwrite:
    raise UsageError("--resume and --overwrite contradict each other: --resume continues the "
                     "run in OUTPUT_DIR, --overwrite starts it over; give one")
  if out_cfg.tensorboard and out is not None:
    from fedjax_bench.output import tensorboard
    tensorboard.check_installed()
  if out is not None:
    _inspect_output(out, cfg, fingerprint)  # its refusals come before the data loads
  exp = check(cfg, seeds)
  dataset, task = exp.dataset, exp.task
  memory.check_run(exp.build, task, exp.hparams, exp.world, len(seeds) * max(len(grid), 1),
                   len(devices), run_data=exp.run_data)
  _with_privacy(None, cfg.algo, exp)  # a sampling it cannot account for fails now
  digest = data_digest(exp)
  if out is not None:
    # Every check has passed: only now is the directory created (and locked).
    if lead:
      claim.take(out, cfg.data.cache_dir)
    finished = _inspect_output(out, cfg, fingerprint, digest)
    if finished is not None:
      if say:
        print(f"{out} already holds this run's results; nothing to do (--overwrite runs it "
              "again)")
      return Result(cfg, seeds, grid, finished, None, out, finished.get("diverged", []))
    if out_cfg.overwrite and lead:
      _clear(out)
  report = dataset.report()  # with --data_per_seed: seed 0's
  partitions = report if exp.per_seed is None else exp.per_seed.report()

  if say:
    per_seed = f" (data per seed; sizes are seed {seeds[0]}'s)" if exp.per_seed else ""
    print(f"{name}: {cfg.algo} on {cfg.data.dataset} ({report['num_clients']} clients, "
          f"sizes {report['size_min']}..{report['size_max']}, "
          f"{report['mean_classes_per_client']:.1f} classes/client), {cfg.model.model}, "
          f"seeds {seeds}{per_seed}, {host_devices.describe(devices)}",
          flush=True)
    if cfg.preset:
      print(console.preset_line(presets.preset_name(cfg.algo, cfg.data.dataset),
                                cfg.preset), flush=True)
    if grid:
      print(f"sweep: {len(grid)} grid points x {console.count(len(seeds), 'seed')} = "
            f"{len(grid) * len(seeds)} runs in one program", flush=True)
    from fedjax_bench import experiment
    for note in experiment.notes(exp):
      sys.stderr.write(f"warning: {note}\n")
  run_config = {"name": name, "flags": cfg.flat(), "seeds": seeds, "grid": grid,
                "argv": list(argv if argv is not None else sys.argv),
                "started": datetime.datetime.now().isoformat(timespec="seconds"),
                "fingerprint": fingerprint,
                "preset": dict(cfg.preset),
                "data_digest": digest,
                "environment": results.environment_info(),
                "layout": host_devices.describe(devices),
                "dataset": _short(report) if exp.per_seed is None else
                           [_short(r) for r in partitions["seeds"]]}
  ckpt = None
  if out:
    if say and out_cfg.resume and os.path.exists(ckpt_path):
      print(f"resuming from {ckpt_path}", flush=True)
    on_save = (lambda history: results.write_metrics_csv(
        os.path.join(out, results.METRICS_FILE), history)) if lead else None
    live = None
    if out_cfg.tensorboard and lead:
      live = tensorboard.LiveWriter(out)
      claim.closers.append(live.close)
    # With --checkpoint_every=0 it only keeps count of the rounds (and feeds TensorBoard).
    ckpt = engine.Checkpointing(ckpt_path, every=out_cfg.checkpoint_every or 1 << 30,
                                fingerprint=fingerprint, resume=out_cfg.resume,
                                on_save=on_save, max_share=out_cfg.checkpoint_max_share,
                                data_digest=digest,
                                on_history=live.update if live is not None else None)
    claim.ckpt = ckpt
    claim.save_on_interrupt = bool(out_cfg.checkpoint_every or out_cfg.resume)
  if out and lead and not (out_cfg.resume and os.path.exists(ckpt_path)):
    results.atomic_write_json(os.path.join(out, results.CONFIG_FILE), run_config)
  output = engine.run(exp.build, task, exp.hparams, seeds=seeds, rounds=cfg.eval.rounds,
                      eval_every=cfg.eval.eval_every, grid=grid or None,
                      on_eval=console.print_progress if say else None, checkpoint=ckpt,
                      run_data=exp.run_data, devices=devices)
  output = dataclasses.replace(output, history=_with_privacy(output.history, cfg.algo, exp))
  diverged = _diverged_list(output, grid)
  extra = {"diverged": diverged}
  if out and lead:
    results.atomic_write_json(os.path.join(out, "partition.json"), partitions)
    summary = results.write_run(out, config=run_config, history=output.history,
                                final_window=cfg.eval.final_window, timing=output.timing,
                                extra=extra)
    if out_cfg.tensorboard:
      live.close()
      tensorboard.write(out, output.history)
    if os.path.exists(ckpt_path):
      os.remove(ckpt_path)  # the results now hold everything it did
  else:
    summary = results.make_summary(run_config, output.history, cfg.eval.final_window,
                                   output.timing, extra)
  result = Result(cfg, seeds, grid, summary, output.history, out, diverged)
  if say:
    console.print_final(result, output.timing)
  if lead and diverged:
    console.report_divergence(diverged, output.diverged.size, out)
  return result


def _with_privacy(history, algo: str, exp):
  """The history with `dp_epsilon`, the privacy an algorithm that declares it (DP-FedAvg)
  has spent by each evaluated round, per grid point (host-side, from its settings); with
  ``history`` None, only checks that the run's sampling can be accounted for."""
  from fedjax_bench import algorithms, engine
  privacy = algorithms.get(algo).privacy
  if privacy is None:
    return history
  n = exp.dataset.train.num_clients
  if history is None:
    privacy(exp.hparams, exp.config.world, n, np.zeros(1))
    return None
  eps = np.stack([np.asarray(privacy(engine.with_point(exp.hparams, point), exp.config.world, n,
                                     history.rounds), np.float64)
                  for point in history.grid], axis=1)
  eps = np.repeat(eps[:, :, None], len(history.seeds), axis=2)
  return dataclasses.replace(history, metrics={**history.metrics, "dp_epsilon": eps})


def run_name(cfg: Config) -> str:
  name = cfg.run.name
  if name is not None and (name in ("", ".", "..") or "/" in name or os.sep in name
                           or (os.altsep and os.altsep in name)):
    raise UsageError(f"--name={name!r} must be a plain name, without a path separator or "
                     "'..' (it names a directory under results/runs/; --output_dir gives any "
                     "path)")
  return name or f"{cfg.algo}_{cfg.data.dataset}_{cfg.model.model}"


LOCK_FILE = ".lock"
# What --overwrite removes besides config.json (rewritten): the files a run writes.
_RUN_FILES = (results.SUMMARY_FILE, results.METRICS_FILE, results.CURVES_FILE, "partition.json",
              checkpoint.FILE)


class _Claim:
  """The output directory a run holds: its lock (released when the run ends), and its
  checkpointing, for the one line that ends an interrupted or failed run."""

  def __init__(self):
    self.lock = None        # the open, flock-ed OUTPUT_DIR/.lock
    self.ckpt = None        # engine.Checkpointing, once made
    self.save_on_interrupt = False
    self.closers = []       # called when the run ends, before the lock is released

  def take(self, out: str, cache_dir: str | None) -> None:
    import fcntl
    try:
      os.makedirs(out, exist_ok=True)
      fd = os.open(os.path.join(out, LOCK_FILE),
                   os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as e:
      raise UsageError(f"--output_dir={out!r} is not writable ({e.strerror})") from None
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
      os.close(fd)
      raise UsageError(_in_use(out)) from None
    self.lock = fd
    # Temporary files of killed writes: ours to remove now that the directory is ours.
    results.remove_temporaries(out)
    from fedjax_bench.data.tfds_data import resolve_cache_dir
    results.remove_orphaned_temporaries(resolve_cache_dir(cache_dir))

  def release(self) -> None:
    for close in self.closers:
      try:
        close()
      except Exception:  # noqa: BLE001 (the run's own ending, or its error, comes first)
        pass
    if self.lock is not None:
      os.close(self.lock)
      self.lock = None

  def interrupted(self) -> Interrupted:
    """Saves the last completed block if it is due, and says where the run stopped."""
    ck = self.ckpt
    if ck is None:
      return Interrupted("interrupted before the first round; nothing was saved")
    note = ""
    if self.save_on_interrupt and ck.pending is not None:
      try:
        ck.pending()
      except OSError as e:
        note = f" (the save of round {ck.round} failed: {e.strerror or e})"
    if self.save_on_interrupt and ck.saved_round is not None and os.path.exists(ck.path):
      return Interrupted(f"interrupted at round {ck.saved_round}{note}; rerun the same command "
                         "with --resume to continue")
    why = "" if self.save_on_interrupt else " (--checkpoint_every=0)"
    return Interrupted(f"interrupted at round {ck.round}; nothing was saved{why}{note}")

  def fault(self, e: OSError) -> str:
    path = e.filename or (os.path.dirname(self.ckpt.path) if self.ckpt else "OUTPUT_DIR")
    ck = self.ckpt
    if ck is not None and ck.saved_round is not None and os.path.exists(ck.path):
      kept = f"the last checkpoint (round {ck.saved_round}) is intact"
    elif ck is not None and self.save_on_interrupt:
      kept = "no checkpoint had been written yet"
    else:
      kept = "nothing was saved"
    return f"could not write {path}: {e.strerror or e}; {kept}"


def _in_use(out: str) -> str:
  return (f"{out} is in use by another run (it holds {os.path.join(out, LOCK_FILE)} locked); "
          "wait for it to end, or give another --output_dir")


def _check_writable(out: str) -> None:
  """That `out` (or, where it does not exist yet, its nearest parent) is writable; creates
  nothing that stays. The probe is a new file (O_EXCL), never a planted link."""
  import tempfile
  if not os.path.isdir(out):
    parent = os.path.dirname(os.path.abspath(out))
    while not os.path.lexists(parent):
      parent = os.path.dirname(parent)
    if os.path.lexists(out) or not os.path.isdir(parent):
      raise UsageError(f"--output_dir={out!r} is not writable "
                       f"({out if os.path.lexists(out) else parent} is not a directory)")
    if not os.access(parent, os.W_OK | os.X_OK):
      raise UsageError(f"--output_dir={out!r} is not writable (cannot create it in {parent})")
    return
  try:
    fd, probe = tempfile.mkstemp(dir=out, prefix=".write_probe.", suffix=".tmp")
    os.close(fd)
    os.remove(probe)
  except OSError as e:
    raise UsageError(f"--output_dir={out!r} is not writable ({e.strerror})") from None


def _lock_held(out: str) -> bool:
  import fcntl
  try:
    fd = os.open(os.path.join(out, LOCK_FILE), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
  except OSError:
    return False
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return False
  except OSError:
    return True
  finally:
    os.close(fd)  # releases the probe's lock


def _inspect_output(out: str, cfg: Config, fingerprint: dict, digest: str | None = None):
  """What `out` holds for this run, creating nothing: None to go ahead (nothing of ours,
  this configuration's unfinished files, a checkpoint to --resume, or --overwrite), or the
  summary of this configuration's finished run (nothing to do). The results or checkpoint
  of another configuration (or other data), and a directory in use, are refused."""
  _check_writable(out)
  if not os.path.isdir(out):
    return None
  if digest is None and _lock_held(out):  # before the data loads; later the lock decides
    raise UsageError(_in_use(out))
  if cfg.run.overwrite:
    return None
  if os.path.exists(os.path.join(out, checkpoint.FILE)):
    if not cfg.run.resume:
      raise UsageError(f"{out} holds the checkpoint of an unfinished run; add --resume to "
                       "continue it, --overwrite to start over, or give another --output_dir")
    return None  # the engine checks its configuration, data and device layout
  summary = _read_json(out, results.SUMMARY_FILE)
  saved = summary if summary is not None else _read_json(out, results.CONFIG_FILE)
  if saved is None:
    return None
  what = "results" if summary is not None else "files"
  config = saved.get("config") if summary is not None else saved
  if not isinstance(config, dict) or not isinstance(config.get("fingerprint"), dict):
    raise _damaged(out, results.SUMMARY_FILE if summary is not None else results.CONFIG_FILE,
                   "no fingerprint")
  if config["fingerprint"] != fingerprint:
    raise UsageError(f"{out} holds the {what} of another configuration "
                     f"({checkpoint.difference(config['fingerprint'], fingerprint)}); give "
                     "another --output_dir (or --name), or --overwrite to replace them")
  there = config.get("data_digest")
  if digest is not None and there is not None and there != digest:
    raise UsageError(f"{out} holds the {what} of this configuration on other data (data "
                     f"digest {there} there, {digest} now: --data_dir or the data files "
                     "changed); give another --output_dir, or --overwrite to replace them")
  if summary is None:
    return None  # this configuration's unfinished files, without a checkpoint: start over
  rounds = config.get("flags", {}).get("rounds")
  if rounds != cfg.eval.rounds:
    extend = (" (a finished run keeps no state to extend)" if cfg.run.resume and
              rounds < cfg.eval.rounds else "")
    raise UsageError(f"{out} holds this configuration's finished run of --rounds={rounds}"
                     f"{extend}: rerun with --rounds={cfg.eval.rounds} and --overwrite to "
                     "replace it, or give another --output_dir")
  return summary


def _read_json(out: str, name: str):
  """The JSON object in OUT/NAME, None if there is no such file; a damaged one is an error."""
  path = os.path.join(out, name)
  if not os.path.lexists(path):
    return None
  try:
    with open(path, encoding="utf-8") as f:
      obj = json.load(f)
  except (OSError, ValueError) as e:
    raise _damaged(out, name, getattr(e, "strerror", None) or type(e).__name__) from None
  if not isinstance(obj, dict):
    raise _damaged(out, name, "not a JSON object")
  return obj


def _damaged(out: str, name: str, why: str) -> UsageError:
  return UsageError(f"{os.path.join(out, name)} is damaged ({why}); delete it or use "
                    "--overwrite to run again")


def _clear(out: str) -> None:
  """--overwrite: the files of whatever run was there (config.json is rewritten)."""
  import shutil
  for name in _RUN_FILES:
    path = os.path.join(out, name)
    if os.path.lexists(path):
      os.remove(path)
  shutil.rmtree(os.path.join(out, "tensorboard"), ignore_errors=True)


def data_digest(exp) -> str:
  """A digest of the data a run trains and is scored on (every example, label and client
  layout; with --data_per_seed the pooled examples), recorded in config.json and in the
  checkpoint: a resume must find the same data. Not in `run_fingerprint`."""
  import hashlib
  ds = exp.dataset if exp.per_seed is None else exp.per_seed.pool
  parts = [ds.train.x, ds.train.y, ds.train.offsets, ds.train.counts, ds.test_x, ds.test_y]
  if ds.client_test is not None:
    parts += [ds.client_test.x, ds.client_test.y, ds.client_test.offsets,
              ds.client_test.counts]
  h = hashlib.blake2b(digest_size=16)
  for a in parts:
    a = np.ascontiguousarray(a)
    h.update(f"{a.dtype.str}{a.shape};".encode())
    h.update(memoryview(a).cast("B"))
  return h.hexdigest()


def _short(report: dict) -> dict:
  """A partition report without its per-client lists (for config.json)."""
  return {k: v for k, v in report.items() if k not in ("client_sizes", "label_histograms")}


# Settings that change neither the numbers nor which runs there are: a checkpoint written
# with other values of these still resumes. (--rounds may grow to extend a run.)
_NOT_IN_FINGERPRINT = ("output_dir", "name", "resume", "overwrite", "check_only",
                       "checkpoint_every", "checkpoint_max_share",
                       "data_dir", "cache_dir", "distributed", "coordinator_address",
                       "num_processes", "process_id", "rounds", "tensorboard",
                       "compile_cache")


# Shared settings added after runs were recorded, whose declared default is "off" (the
# behaviour from before they existed): at that default they are left out of the
# fingerprint, so a run made before keeps its key (`claims.store.config_key`). Their
# defaults must stay "off".
# --host_devices's default, 2, is the layout every run recorded before it existed was made
# on (2-core machines, one CPU device per core).
_OMITTED_AT_DEFAULT = ("holdout_fraction", "lstm_hidden", "min_samples", "test_examples",
                       "host_devices")
# Likewise an algorithm's settings added after its runs were recorded, at the value that
# was its behaviour before (SCAFFOLD and FedDyn averaged uniformly before --weighting).
_OMITTED_FOR = {"scaffold": {"weighting": "uniform"}, "feddyn": {"weighting": "uniform"}}


def run_fingerprint(cfg: Config, seeds: list[int], grid: list[dict]) -> dict:
  """What identifies a run for --resume: every setting that shapes its numbers, the seeds
  and the grid (a JSON round trip, so it compares equal to the one read back from a file)."""
  defaults = {name: spec.default for cls in config_lib.classes(cfg.algo)
              for name, spec in settings.specs(cls).items() if name in _OMITTED_AT_DEFAULT}
  defaults.update(_OMITTED_FOR.get(cfg.algo, {}))
  fp = {k: v for k, v in sorted(cfg.flat().items()) if k not in _NOT_IN_FINGERPRINT
        and not (k in defaults and v == defaults[k])}
  fp.update(seeds=list(seeds), grid=list(grid))
  return json.loads(json.dumps(fp))


def _diverged_list(output, grid) -> list:
  """[{"hparams", "seed", "round"}] for every run that diverged (summary.json)."""
  seeds = output.history.seeds
  return [{"hparams": grid[g] if grid else {}, "seed": seeds[s], "round": int(r)}
          for (g, s), r in np.ndenumerate(output.diverged) if r > 0]


def _initialize_distributed(jax, run_cfg) -> None:
  kwargs = {}
  if run_cfg.coordinator_address:
    if run_cfg.num_processes < 1 or run_cfg.process_id < 0:
      raise UsageError("--coordinator_address needs --num_processes and --process_id")
    kwargs = dict(coordinator_address=run_cfg.coordinator_address,
                  num_processes=run_cfg.num_processes, process_id=run_cfg.process_id)
  # CPU processes need a collective implementation to exchange runs (GPUs/TPUs bring theirs).
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(**kwargs)

