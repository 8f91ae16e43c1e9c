"""A run's results directory: what identifies the run (its name, its fingerprint, the
digest of its data), and the directory's claim (created and locked for the run's life),
inspection (what it holds for this run, before anything is created) and clearing
(--overwrite)."""

import json
import os

import numpy as np

from fedjax_bench import config as config_lib
from fedjax_bench import settings
from fedjax_bench.config import Config
from fedjax_bench.engine import checkpoint
from fedjax_bench.errors import UsageError
from fedjax_bench.output import results


def run_name(cfg: Config) -> str:
  name = cfg.run.name
  if name is not None and (name in ("", ".", "..") or "/" in name or os.sep in name
                           or (os.altsep and os.altsep in name)):
    raise UsageError(f"--name={name!r} must be a plain name, without a path separator or "
                     "'..' (it names a directory under results/runs/; --output_dir gives any "
                     "path)")
  return name or f"{cfg.algo}_{cfg.data.dataset}_{cfg.model.model}"


# Settings that change neither the numbers nor which runs there are: a checkpoint written
# with other values of these still resumes. (--rounds may grow to extend a run.)
NOT_IN_FINGERPRINT = ("output_dir", "name", "resume", "overwrite", "check_only",
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
# The client optimizer's settings (core/local.py's ClientOptimizer): --client_opt=sgd and
# --client_grad_clip=0 are the local SGD of every run before; the others act only with
# another --client_opt, which the fingerprint then holds. --finetune_steps=0 evaluates no
# fine-tuned model (--finetune_lr acts only with steps). --rotation_clusters=0 rotates
# nothing (the data of every run before it). --fused_logreg=true trains logistic
# regression's plain SGD by the fused CPU kernel: the arithmetic of the runs before, its
# sums in another order (their code records, not their keys, mark them stale).
OMITTED_AT_DEFAULT = ("holdout_fraction", "rotation_clusters", "lstm_hidden", "min_samples",
                      "test_examples", "host_devices", "finetune_steps", "finetune_lr",
                      "client_opt", "client_momentum", "client_beta1", "client_beta2",
                      "client_eps", "client_weight_decay", "client_grad_clip",
                      "fused_logreg")
# Likewise an algorithm's settings added after its runs were recorded, at the value that
# was its behaviour before (SCAFFOLD and FedDyn averaged uniformly before --weighting).
OMITTED_FOR = {"scaffold": {"weighting": "uniform"}, "feddyn": {"weighting": "uniform"}}


def run_fingerprint(cfg: Config, seeds: list[int], grid: list[dict]) -> dict:
  """What identifies a run for --resume: every setting that shapes its numbers, the seeds
  and the grid (a JSON round trip, so it compares equal to the one read back from a file)."""
  defaults = {name: spec.default for cls in config_lib.classes(cfg.algo)
              for name, spec in settings.specs(cls).items() if name in OMITTED_AT_DEFAULT}
  defaults.update(OMITTED_FOR.get(cfg.algo, {}))
  fp = {k: v for k, v in sorted(cfg.flat().items()) if k not in NOT_IN_FINGERPRINT
        and not (k in defaults and v == defaults[k])}
  fp.update(seeds=list(seeds), grid=list(grid))
  return json.loads(json.dumps(fp))


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


LOCK_FILE = ".lock"
# What --overwrite removes besides config.json (rewritten): the files a run writes.
_RUN_FILES = (results.SUMMARY_FILE, results.METRICS_FILE, results.CURVES_FILE, "partition.json",
              checkpoint.FILE)


class Claim:
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

  def interrupted(self) -> str:
    """Saves the last completed block if it is due; the line that says where the run
    stopped."""
    ck = self.ckpt
    if ck is None:
      return "interrupted before the first round; nothing was saved"
    note = ""
    if self.save_on_interrupt and ck.pending is not None:
      try:
        ck.pending()
      except OSError as e:
        note = f" (the save of round {ck.round} failed: {e.strerror or e})"
    if self.save_on_interrupt and ck.saved_round is not None and os.path.exists(ck.path):
      return (f"interrupted at round {ck.saved_round}{note}; rerun the same command "
              "with --resume to continue")
    why = "" if self.save_on_interrupt else " (--checkpoint_every=0)"
    return f"interrupted at round {ck.round}; nothing was saved{why}{note}"

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


def inspect(out: str, cfg: Config, fingerprint: dict, digest: str | None = None):
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


def clear(out: str) -> None:
  """--overwrite: the files of whatever run was there (config.json is rewritten)."""
  import shutil
  for name in _RUN_FILES:
    path = os.path.join(out, name)
    if os.path.lexists(path):
      os.remove(path)
  shutil.rmtree(os.path.join(out, "tensorboard"), ignore_errors=True)
