"""A paper's setting is a named preset (`fedjax_bench.config.presets`), declared once: a run
takes it for the flags a user does not give, records it in the configuration, announces it
on the command line and keeps it in config.json; the flagfiles and the paper declarations
do not restate its values."""

import ast
import glob
import json
import shlex
import subprocess
import sys

import pytest

from tests.conftest import REPO
from fedjax_bench import algorithms, config, settings
from fedjax_bench.claims import Run
from fedjax_bench.config import presets
from fedjax_bench.errors import UsageError


def test_the_preset_holds_what_the_papers_setting_changed_and_no_flag_given():
  cfg = config.resolve(algo="area", dataset="mnist", client_lr=1.0)
  preset = dict(cfg.preset)
  assert preset["num_clients"] == 128 and preset["alpha"] == 0.1  # AREA's Section 5.1
  assert "client_lr" not in preset and cfg.hparams.client_lr == 1.0  # given: the user's
  assert config.resolve(algo="fedavg", dataset="synthetic").preset == ()
  assert dict(config.resolve(algo="fedalign", dataset="synthetic").preset)["weighting"] == \
      "data_size"
  # A setting replaced by name is the user's from then on.
  assert "num_clients" not in dict(config.replace(cfg, num_clients=64).preset)


def test_the_command_line_says_which_papers_setting_it_takes(tmp_path):
  out = tmp_path / "out"
  r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "run.py"), "--algo=area",
                      "--dataset=quadratic", "--rounds=4", "--eval_every=2", "--seeds=1",
                      "--host_devices=1", f"--output_dir={out}"],
                     capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-2000:]
  (line,) = [x for x in r.stdout.splitlines() if " sets --" in x]
  assert line.startswith("AREA's quadratic setting (Iakovidou & Kim, Section 5.1) sets ")
  assert "--num_clients=50" in line and line.endswith("(a flag given overrides it)")
  assert "--rounds" not in line  # given
  recorded = json.loads((out / "config.json").read_text())["preset"]
  assert recorded["num_clients"] == 50


def test_each_preset_is_one_record_of_valid_settings():
  assert list(presets.PRESETS) == [p.name for p in presets.PRESETS.values()]
  for preset in presets.PRESETS.values():
    algos = [a for a in algorithms.ALGORITHMS if preset.applies(a, (preset.datasets or [""])[0])]
    assert algos, preset.name
    assert set(preset.per_algo) <= set(algos), preset.name
    for algo in algos:
      specs = config.specs(algo)
      for name, value in preset.settings(algo).items():
        assert specs[name].convert(value) == value, (preset.name, algo, name)
  assert presets.preset_name("area", "mnist") == presets.AREA_MNIST.label() == \
      "AREA's mnist setting (Iakovidou & Kim, Section 5.1)"
  assert presets.preset_name("fedavg", "mnist") is None
  assert presets.preset_name("area", "synthetic") is None  # only the event budget, ours
  cfg = config.resolve(algo="sfedavg", dataset="mnist", num_clients=4)
  assert cfg.hparams.client_lr == 100 * 4 / 128  # the preset's stepsize, scaled by n / 128
  assert dict(cfg.preset)["zero_init"] is True and cfg.eval.rounds > 0
  assert config.resolve(algo="mifa_async", dataset="mnist", num_clients=4).hparams.client_lr == 1


# --- declared once: the flagfiles and the paper declarations do not restate a preset ------

def _flag_values(args) -> dict:
  """{name: value} of flagfile lines or arguments (``--name=v``, ``--name``, ``--noname``)."""
  names, out = settings.all_names(), {}
  for arg in args:
    arg = arg.strip()
    if not arg.startswith("--"):
      continue
    name, sep, value = arg[2:].partition("=")
    if not sep:
      value = not (name.startswith("no") and name[2:] in names)
      name = name if value else name[2:]
    out[name] = value
  return out


def _value(spec, value):
  """A flag's text or a Python value as the setting's value."""
  if isinstance(value, str) and spec.kind in (bool, int, float):
    value = value.lower() in ("true", "1") if spec.kind is bool else spec.kind(value)
  return spec.convert(value)


def restated(given: dict) -> list[str]:
  """The values in ``given`` (a run's settings by name) that a preset the run takes sets
  to the same value anyway."""
  algo = given.get("algo", config.DEFAULT_ALGO)
  specs = config.specs(algo)
  dataset = given.get("dataset", specs["dataset"].default)
  return [f"--{name}={given[name]} ({preset.name})"
          for preset in presets.matching(algo, dataset)
          for name, value in preset.settings(algo).items()
          if name in given and _value(specs[name], given[name]) == value]


def flagfile_restatements(text: str) -> list[str]:
  lines = text.splitlines()
  combos = [l[len("# with:"):] for l in lines if l.startswith("# with:")] or [""]
  own = _flag_values(lines)
  return [r for extra in combos for r in restated({**own, **_flag_values(shlex.split(extra))})]


def _literals(source: str):
  """(name, value, line) of every keyword argument and string-keyed dict entry in
  ``source`` whose value is a literal."""
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Call):
      pairs = [(k.arg, k.value) for k in node.keywords if k.arg]
    elif isinstance(node, ast.Dict):
      pairs = [(k.value, v) for k, v in zip(node.keys, node.values)
               if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    else:
      continue
    for name, value in pairs:
      try:
        yield name, ast.literal_eval(value), value.lineno
      except ValueError:
        pass


def paper_restatements(source: str, runs) -> list[str]:
  """The literals in a paper declaration's ``source`` that restate a preset's value: a
  setting that every one of its ``runs`` giving that value would take from a preset."""
  from_preset = {}  # (name, value) -> every run that gives it takes it from a preset
  for run in runs:
    algo = run.settings.get("algo", config.DEFAULT_ALGO)
    specs = config.specs(algo)
    taken = {}
    for preset in presets.matching(algo, run.settings.get("dataset",
                                                           specs["dataset"].default)):
      taken.update(preset.settings(algo))
    for name, value in run.settings.items():
      if name in specs:
        value = specs[name].convert(value)
        key = (name, repr(value))
        from_preset[key] = from_preset.get(key, True) and name in taken and taken[name] == value
  specs = {n: s for a in algorithms.ALGORITHMS for n, s in config.specs(a).items()}
  out = []
  for name, value, line in _literals(source):
    try:
      value = specs[name].convert(value) if name in specs else None
    except UsageError:
      continue
    if from_preset.get((name, repr(value))):
      out.append(f"line {line}: {name}={value!r}")
  return out


@pytest.mark.parametrize("path", sorted(glob.glob(str(REPO / "benchmarks/configs/*/*.flags"))),
                         ids=lambda p: "/".join(p.split("/")[-2:]))
def test_a_flagfile_states_only_what_differs_from_its_preset(path):
  with open(path) as f:
    assert not flagfile_restatements(f.read())


def test_a_paper_declaration_takes_a_presets_values_from_the_preset():
  from benchmarks import papers
  for name, paper in papers.PAPERS.items():
    source = (REPO / "benchmarks" / "papers" / f"{name}.py").read_text()
    assert not paper_restatements(source, paper.claim_runs()), name


def test_a_restated_preset_value_fails_the_checks():
  text = "# with: --algo=area\n# with: --algo=fedbuff\n--dataset=mnist\n--nologreg_bias\n" \
         "--num_clients=64\n"
  assert flagfile_restatements(text) == ["--logreg_bias=False (area_mnist)"] * 2
  assert flagfile_restatements("--algo=fedalign\n--participation=full\n") == [
      "--participation=full (fedalign_protocol)"]
  assert not flagfile_restatements("--algo=fedavg\n--dataset=mnist\n--num_clients=128\n")
  runs = [Run("a", {"algo": "fedmax", "dataset": "mnist", "num_clients": 50, "rounds": 50}),
          Run("b", {"algo": "fedavg", "dataset": "mnist", "rounds": 50})]
  source = "SETTING = {}\nBASE = dict(num_clients=50, rounds=50)\n" \
           "OURS = dict(num_clients=SETTING['num_clients'])\n"
  # rounds=50 is the preset's for fedmax but fedavg's own choice: not restated.
  assert paper_restatements(source, runs) == ["line 2: num_clients=50"]
