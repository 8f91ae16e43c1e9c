"""The Python API: one call runs what the command line runs.

    import fedjax_bench
    result = fedjax_bench.run(algo="fedavg", dataset="synthetic", seeds=3, rounds=50,
                              client_lr=0.05)
    result.summary["final"]["test_accuracy"]["mean"]
    result.metrics          # one row per (evaluation, grid point, seed); a DataFrame with pandas

Settings are the command line's flag names as keyword arguments (``Config`` objects work
too: ``fedjax_bench.run(cfg)``); ``output_dir=`` also writes the run's files
(config.json, metrics.csv, summary.json, curves.png; TensorBoard with ``tensorboard=True``).
No absl parsing is involved.
"""

import dataclasses
import datetime
import json
import os
import sys
from typing import Mapping, Sequence

import numpy as np

from fedjax_bench import checkpoint, compile_cache, config as config_lib, flags, results
from fedjax_bench import settings
from fedjax_bench.config import Config
from fedjax_bench.errors import UsageError


@dataclasses.dataclass
class Result:
  config: Config
  seeds: list[int]
  grid: list[dict]
  summary: dict            # the summary.json contract
  history: results.History
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
  return cfg, seeds, flags.grid(axes)


def check(cfg: Config, seeds: list[int], dataset=None):
  """Every check a run makes before it trains; the experiment. ``dataset`` stands in for
  loading the configured one (checks of flagfiles whose data is not here)."""
  from fedjax_bench import experiment
  return experiment.setup(cfg, dataset=dataset, seeds=seeds)


def execute(cfg: Config, seeds: list[int], grid: list[dict], *, progress: bool = True,
            argv: Sequence[str] | None = None) -> Result | None:
  """The run of a resolved configuration (what `run` and the command line call)."""
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
  lead = jax.process_index() == 0  # writes files and prints progress
  say = progress and lead
  name = run_name(cfg)
  out = out_cfg.output_dir
  if out is not None and lead:
    _check_writable(out)
  fingerprint = run_fingerprint(cfg, seeds, grid)
  ckpt_path = os.path.join(out, checkpoint.FILE) if out else None
  if out_cfg.resume and out is None:
    raise UsageError("--resume needs an output directory (output_dir=) to resume from")
  if out_cfg.resume and not os.path.exists(ckpt_path):
    finished = _finished_run(out, fingerprint)
    if finished is not None:
      if say:
        print(f"{out} already holds this run's results; nothing to do (--resume)")
      summary = results.read_summary(out)  # its history is in metrics.csv
      return Result(cfg, seeds, grid, summary, None, out, summary.get("diverged", []))
  elif ckpt_path and os.path.exists(ckpt_path) and not out_cfg.resume:
    raise UsageError(f"{out} holds the checkpoint of an unfinished run; add --resume to "
                     "continue it, or give another --output_dir")
  exp = check(cfg, seeds)
  dataset, task = exp.dataset, exp.task
  memory.check_run(exp.build, task, exp.hparams, exp.world, len(seeds) * max(len(grid), 1),
                   jax.device_count(), run_data=exp.run_data)
  report = dataset.report()  # with --data_per_seed: seed 0's
  partitions = report if exp.per_seed is None else exp.per_seed.report()

  if say:
    per_seed = f" (data per seed; sizes are seed {seeds[0]}'s)" if exp.per_seed else ""
    print(f"{name}: {cfg.algo} on {cfg.data.dataset} ({report['num_clients']} clients, "
          f"sizes {report['size_min']}..{report['size_max']}, "
          f"{report['mean_classes_per_client']:.1f} classes/client), {cfg.model.model}, "
          f"seeds {seeds}{per_seed}, {jax.device_count()} {jax.default_backend()} device(s)",
          flush=True)
    if grid:
      print(f"sweep: {len(grid)} grid points x {_count(len(seeds), 'seed')} = "
            f"{len(grid) * len(seeds)} runs in one program", flush=True)
  run_config = {"name": name, "flags": cfg.flat(), "seeds": seeds, "grid": grid,
                "argv": list(argv if argv is not None else sys.argv),
                "started": datetime.datetime.now().isoformat(timespec="seconds"),
                "fingerprint": fingerprint,
                "environment": results.environment_info(),
                "dataset": _short(report) if exp.per_seed is None else
                           [_short(r) for r in partitions["seeds"]]}
  ckpt = None
  if out and (out_cfg.checkpoint_every or out_cfg.resume):
    if say and out_cfg.resume and os.path.exists(ckpt_path):
      print(f"resuming from {ckpt_path}", flush=True)
    on_save = (lambda history: results.write_metrics_csv(
        os.path.join(out, results.METRICS_FILE), history)) if lead else None
    ckpt = engine.Checkpointing(ckpt_path, every=out_cfg.checkpoint_every or 1 << 30,
                                fingerprint=fingerprint, resume=out_cfg.resume,
                                on_save=on_save, max_share=out_cfg.checkpoint_max_share)
  if out and lead and not (out_cfg.resume and os.path.exists(ckpt_path)):
    results.atomic_write_json(os.path.join(out, results.CONFIG_FILE), run_config)
  _with_privacy(None, cfg.algo, exp)  # a sampling it cannot account for fails now
  output = engine.run(exp.build, task, exp.hparams, seeds=seeds, rounds=cfg.eval.rounds,
                      eval_every=cfg.eval.eval_every, grid=grid or None,
                      on_eval=_print_progress if say else None, checkpoint=ckpt,
                      run_data=exp.run_data)
  output = dataclasses.replace(output, history=_with_privacy(output.history, cfg.algo, exp))
  diverged = _diverged_list(output, grid)
  extra = {"diverged": diverged}
  if out and lead:
    results.atomic_write_json(os.path.join(out, "partition.json"), partitions)
    summary = results.write_run(out, config=run_config, history=output.history,
                                final_window=cfg.eval.final_window, timing=output.timing,
                                extra=extra)
    if out_cfg.tensorboard:
      from fedjax_bench import tensorboard
      tensorboard.write(out, output.history)
    if os.path.exists(ckpt_path):
      os.remove(ckpt_path)  # the results now hold everything it did
  else:
    summary = results.make_summary(run_config, output.history, cfg.eval.final_window,
                                   output.timing, extra)
  result = Result(cfg, seeds, grid, summary, output.history, out, diverged)
  if say:
    _print_final(result, output.timing)
  if lead and diverged:
    _report_divergence(output, grid, out)
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


def _count(n: int, noun: str) -> str:
  return f"{n} {noun}{'' if n == 1 else 's'}"


def run_name(cfg: Config) -> str:
  return cfg.run.name or f"{cfg.algo}_{cfg.data.dataset}_{cfg.model.model}"


def _check_writable(out: str) -> None:
  try:
    os.makedirs(out, exist_ok=True)
    probe = os.path.join(out, ".write_probe")
    with open(probe, "w"):
      pass
    os.remove(probe)
  except OSError as e:
    raise UsageError(f"--output_dir={out!r} is not writable ({e.strerror})") from None


def _short(report: dict) -> dict:
  """A partition report without its per-client lists (for config.json)."""
  return {k: v for k, v in report.items() if k not in ("client_sizes", "label_histograms")}


# Settings that change neither the numbers nor which runs there are: a checkpoint written
# with other values of these still resumes. (--rounds may grow to extend a run.)
_NOT_IN_FINGERPRINT = ("output_dir", "name", "resume", "check_only", "checkpoint_every",
                       "checkpoint_max_share",
                       "data_dir", "cache_dir", "distributed", "coordinator_address",
                       "num_processes", "process_id", "rounds", "tensorboard",
                       "compile_cache")


# Shared settings added after runs were recorded, whose declared default is "off" (the
# behaviour from before they existed): at that default they are left out of the
# fingerprint, so a run made before keeps its key (`claims.store.config_key`). Their
# defaults must stay "off".
_OMITTED_AT_DEFAULT = ("holdout_fraction", "lstm_hidden", "min_samples", "test_examples")


def run_fingerprint(cfg: Config, seeds: list[int], grid: list[dict]) -> dict:
  """What identifies a run for --resume: every setting that shapes its numbers, the seeds
  and the grid (a JSON round trip, so it compares equal to the one read back from a file)."""
  defaults = {name: spec.default for cls in config_lib.classes(cfg.algo)
              for name, spec in settings.specs(cls).items() if name in _OMITTED_AT_DEFAULT}
  fp = {k: v for k, v in sorted(cfg.flat().items()) if k not in _NOT_IN_FINGERPRINT
        and not (k in defaults and v == defaults[k])}
  fp.update(seeds=list(seeds), grid=list(grid))
  return json.loads(json.dumps(fp))


def _finished_run(out: str, fingerprint: dict):
  """The exit status of the finished run of this configuration in `out`, or None if there is
  none; a finished run of another configuration there is an error."""
  path = os.path.join(out, results.SUMMARY_FILE)
  if not os.path.exists(path):
    return None
  try:
    summary = results.read_summary(out)
  except (OSError, ValueError, UsageError):
    return None  # a damaged summary: run again, overwriting it
  saved = summary.get("config", {}).get("fingerprint")
  if saved != fingerprint:
    raise UsageError(f"--resume: {out} holds the results of another configuration; give "
                     "the same flags, or another --output_dir")
  return 1 if summary.get("diverged") else 0


def _diverged_list(output, grid) -> list:
  """[{"hparams", "seed", "round"}] for every run that diverged (summary.json)."""
  seeds = output.history.seeds
  return [{"hparams": grid[g] if grid else {}, "seed": seeds[s], "round": int(r)}
          for (g, s), r in np.ndenumerate(output.diverged) if r > 0]


def _point_label(hparams: dict) -> str:
  return " ".join(f"{k}={v:g}" for k, v in hparams.items())


def _run_label(hparams: dict, seed: int) -> str:
  return f"{_point_label(hparams)} seed {seed}" if hparams else f"seed {seed}"


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


def _fmt(stat, spec: str = ".4f") -> str:
  if stat["mean"] is None:
    return "nan"
  return f"{stat['mean']:{spec}} ± {stat['std']:{spec}}"


def _print_progress(p) -> None:
  m = p.metrics
  shown = " ".join(f"{k} {m[k]:.4g}" for k in ("test_accuracy", "test_loss", "train_loss",
                                               "optimality_gap", "cum_time") if k in m)
  eta = datetime.timedelta(seconds=round(p.eta_seconds))
  print(f"round {p.round:>6}/{p.rounds} | {shown} | {rate(p.rounds_per_second)} | ETA {eta}",
        flush=True)


def _print_final(result: Result, timing: dict) -> None:
  final = result.summary["final"]
  points = ([(f"{_point_label(p['hparams'])}: ", i)
             for i, p in enumerate(final["test_accuracy"])] if result.grid else [("", None)])
  for label, i in points:
    pick = lambda stat: stat if i is None else stat[i]
    gap = (f", optimality_gap {_fmt(pick(final['optimality_gap']), '.3e')}"
           if "optimality_gap" in final else "")
    print(f"{label}test_accuracy {_fmt(pick(final['test_accuracy']))}, train_loss "
          f"{_fmt(pick(final['train_loss']))}{gap}")
  where = f"; results in {result.output_dir}" if result.output_dir else ""
  print(f"done: {rate(timing['rounds_per_second'])}, "
        f"compile {timing['compile_seconds']:.1f}s{where}")


def rate(rounds_per_second: float) -> str:
  if rounds_per_second >= 1:
    return f"{rounds_per_second:.1f} rounds/s"
  return f"{1 / max(rounds_per_second, 1e-12):.1f} s/round"


def _report_divergence(output, grid, out) -> None:
  """One line on stderr naming the runs that diverged and where."""
  bad = _diverged_list(output, grid)
  runs = output.diverged.size
  shown = ", ".join(f"{_run_label(d['hparams'], d['seed'])} at round {d['round']}"
                    for d in bad[:4]) + (", ..." if len(bad) > 4 else "")
  rest = "the others ran to the end; " if len(bad) < runs else ""
  where = f"results up to the divergence were written to {out}" if out else \
      "results up to the divergence are in the result"
  sys.stderr.write(f"error: {len(bad)} of {runs} runs diverged (non-finite parameters or loss): "
                   f"{shown}; {rest}{where}\n")
