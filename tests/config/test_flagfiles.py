"""Every shipped flagfile, in every combination its comments document, passes every check a
run makes before training (parse, resolve, load, build, flags the algorithm does not read)
and resolves to the configuration it resolved to before the settings became typed
declarations (tests/config/flagfile_configs.json, written by the flag-dict code they
replaced: every setting the run reads has its old value, and so has the algorithm's).

A flagfile documents its combinations in lines ``# with: ARGS`` (each one combination, ARGS
appended to it); one marked ``# fragment:`` is only ever used inside another's combination.
Image data that is not installed here (SVHN, CIFAR-10, CINIC-10) is replaced by random
images of the same shape, so the partition, availability and model are still built.
"""

import glob
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_CHECK_ALL = r"""
import glob, json, shlex, sys
import numpy as np
from fedjax_bench import api, cli, data, models, settings
from fedjax_bench.engine import run_dir
from fedjax_bench.errors import UsageError

before = json.load(open("tests/config/flagfile_configs.json"))

def norm(value):
  if isinstance(value, str) and value in models.MODELS_BY_NAME:
    return models.MODELS_BY_NAME[value].name  # a model alias is recorded as its model's name
  return tuple(str(v) for v in value) if isinstance(value, (list, tuple)) else value

# Settings added since the configurations were recorded (and those left out of run
# fingerprints at their default for that reason).
NEW = ("tensorboard", "compile_cache", "checkpoint_max_share", "local_optimum", "overwrite",
       "local_optimum_steps") + run_dir.OMITTED_AT_DEFAULT

def compare(key, cfg, grid, exp):
  old = before["combinations"].get(key)
  if old is None:
    return [f"{key}: no recorded configuration"]
  values = {**before["defaults"], **old["changed"]}
  new = cfg.flat()
  bad = [f"{n}={new[n]!r} (was {values.get(n, 'absent')!r})" for n in new
         if n not in NEW and (n not in values or norm(new[n]) != norm(values[n]))]
  hp = {**values, **old["hparams_changed"]}
  bad += [f"hparams {n}={v!r} (was {hp.get(n)!r})"
          for n, v in settings.as_dict(exp.hparams).items()
          if n not in NEW and norm(v) != norm(hp.get(n))]
  if grid != old["grid"]:
    bad.append(f"grid {grid} (was {old['grid']})")
  return [f"{key}: " + "; ".join(bad)] if bad else []

real_load = data.load_arrays

def load_or_stand_in(name, **kw):
  try:
    return real_load(name, **kw)
  except UsageError as e:
    if "not prepared" not in str(e) and "not found" not in str(e):
      raise
    rng = np.random.default_rng(0)
    img = lambda n: rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
    return {"train_x": img(3000), "train_y": rng.integers(0, 10, 3000),
            "test_x": img(50), "test_y": rng.integers(0, 10, 50), "num_classes": 10}

data.load_arrays = load_or_stand_in
part, parts = int(sys.argv[1]), int(sys.argv[2])
checked, failures, index = 0, [], -1
for path in sorted(glob.glob("benchmarks/configs/*/*.flags")):
  lines = open(path).read().splitlines()
  if any(l.startswith("# fragment:") for l in lines):
    continue
  combos = [l[len("# with:"):].strip() for l in lines if l.startswith("# with:")] or [""]
  for extra in combos:
    index += 1
    if index % parts != part:
      continue
    cli.FLAGS.unparse_flags()
    args = ["--flagfile=" + path, *shlex.split(extra)]
    try:
      cli.parse_argv(["x", *args])
      cfg, seeds, grid = cli.resolve_flags()
      exp = api.check(cfg, seeds)
      failures += [f"FAILED (configuration changed) {d}" for d in
                   compare(" ".join(args), cfg, grid, exp)]
    except (UsageError, SystemExit) as e:
      failures.append(f"FAILED {path} {extra}: {e}")
    checked += 1
print("\n".join(failures))
print("checked", checked)
"""


def _documented_combinations() -> int:
  count = 0
  for path in glob.glob(str(REPO / "benchmarks/configs/*/*.flags")):
    lines = Path(path).read_text().splitlines()
    if not any(l.startswith("# fragment:") for l in lines):
      count += max(1, sum(l.startswith("# with:") for l in lines))
  return count


def test_every_documented_flagfile_combination_passes_the_run_checks():
  expected = _documented_combinations()
  assert expected >= 200
  parts = 2  # two processes, one a core
  procs = [subprocess.Popen([sys.executable, "-c", _CHECK_ALL, str(i), str(parts)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for i in range(parts)]
  checked, failures = 0, []
  for proc in procs:
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    lines = out.strip().splitlines()
    assert lines[-1].startswith("checked "), out[-3000:]
    checked += int(lines[-1].split()[1])
    failures += [l for l in lines if l.startswith("FAILED ")]
  assert checked == expected
  assert not failures, "\n".join(failures)


def test_a_flag_the_algorithm_does_not_read_fails_the_combination_check():
  """The check above can fail: the toyfl files once held --fedawe_clip=0 for every
  algorithm, which 7 of the 8 do not read."""
  code = ("from fedjax_bench import cli\n"
          "cli.parse_argv(['x', '--flagfile=benchmarks/configs/fedawe/toyfl_paper_sine.flags',"
          " '--algo=fedavg', '--fedawe_clip=0'])\n"
          "cli.check_flags()\n")
  r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                     timeout=300)
  assert r.returncode != 0 and "--fedawe_clip has no effect" in r.stderr, r.stderr[-2000:]
