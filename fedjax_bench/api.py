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
import os
import sys
from typing import Mapping, Sequence

import numpy as np

from fedjax_bench import config as config_lib
from fedjax_bench.config import Config, flags, presets
from fedjax_bench.engine import checkpoint, compile_cache, host_devices, run_dir
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
  run_dir.run_name(cfg)  # a --name that is a path is refused here
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
  claim = run_dir.Claim()
  try:
    return _execute(cfg, seeds, grid, progress, argv, claim)
  except KeyboardInterrupt:
    raise Interrupted(claim.interrupted()) from None
  except OSError as e:
    if claim.lock is None:
      raise
    raise Fault(claim.fault(e)) from e
  finally:
    claim.release()


def _execute(cfg: Config, seeds: list[int], grid: list[dict], progress: bool, argv,
             claim: run_dir.Claim) -> Result | None:
  # Heavy imports wait until the settings are known to be good.
  import jax
  from fedjax_bench import engine, experiment
  from fedjax_bench.core import device_memory
  from fedjax_bench.engine import distributed

  out_cfg = cfg.run
  if out_cfg.compile_cache:
    compile_cache.enable(cfg.data.cache_dir)
  if out_cfg.check_only:
    check(cfg, seeds)
    if progress:
      print("ok: the settings are valid for this run")
    return None
  if out_cfg.distributed:
    distributed.initialize(out_cfg)
  devices = jax.devices() if out_cfg.distributed else host_devices.devices(
      out_cfg.host_devices)
  lead = jax.process_index() == 0  # writes files and prints progress
  say = progress and lead
  name = run_dir.run_name(cfg)
  out = out_cfg.output_dir
  fingerprint = run_dir.run_fingerprint(cfg, seeds, grid)
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
    run_dir.inspect(out, cfg, fingerprint)  # its refusals come before the data loads
  exp = check(cfg, seeds)
  dataset, task = exp.dataset, exp.task
  device_memory.check_run(exp.build, task, exp.hparams, exp.world, len(seeds) * max(len(grid), 1),
                   len(devices), run_data=exp.run_data)
  experiment.with_privacy(None, exp)  # a sampling it cannot account for fails now
  digest = run_dir.data_digest(exp)
  if out is not None:
    # Every check has passed: only now is the directory created (and locked).
    if lead:
      claim.take(out, cfg.data.cache_dir)
    finished = run_dir.inspect(out, cfg, fingerprint, digest)
    if finished is not None:
      if say:
        print(f"{out} already holds this run's results; nothing to do (--overwrite runs it "
              "again)")
      return Result(cfg, seeds, grid, finished, None, out, finished.get("diverged", []))
    if out_cfg.overwrite and lead:
      run_dir.clear(out)
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
  output = dataclasses.replace(output, history=experiment.with_privacy(output.history, exp))
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


def _short(report: dict) -> dict:
  """A partition report without its per-client lists (for config.json)."""
  return {k: v for k, v in report.items() if k not in ("client_sizes", "label_histograms")}


def _diverged_list(output, grid) -> list:
  """[{"hparams", "seed", "round"}] for every run that diverged (summary.json)."""
  seeds = output.history.seeds
  return [{"hparams": grid[g] if grid else {}, "seed": seeds[s], "round": int(r)}
          for (g, s), r in np.ndenumerate(output.diverged) if r > 0]
