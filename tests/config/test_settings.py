"""The typed settings: one declaration per setting, read alike by the command line and the
Python API; unknown names and settings without effect refused; sweepable declarations
true; an algorithm added in three places (its module, one registration line, its test)."""

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import fedjax_bench
from fedjax_bench import algorithms, config, data, experiment, settings
from fedjax_bench.config import flags
from fedjax_bench.algorithms import fedavg
from fedjax_bench.core import rounds
from fedjax_bench.errors import UsageError
from fedjax_bench.settings import POSITIVE, section, setting

REPO = Path(__file__).resolve().parents[2]


_RESOLVE_EACH = """
import json, sys
from fedjax_bench import algorithms, cli
out = {}
for algo in sorted(algorithms.ALGORITHMS):
  cli.FLAGS.unparse_flags()
  cli.parse_argv(["x", f"--algo={algo}"])
  cfg = cli.resolve_flags()[0]
  out[algo] = {"flat": cfg.flat(), "given": sorted(cfg.given)}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def parsed_defaults():
  """Each algorithm's Config as the command line resolves ``--algo=NAME`` alone (in a
  fresh process: the global flags of this one may hold other modules' required flags)."""
  import json
  r = subprocess.run([sys.executable, "-c", _RESOLVE_EACH], cwd=REPO, capture_output=True,
                     text=True, timeout=120)
  assert r.returncode == 0, r.stderr[-2000:]
  return json.loads(r.stdout)


def test_each_flag_is_its_declaration():
  decl = flags.declarations()
  assert len(decl) >= 130
  for name, (spec, readers) in decl.items():
    flag = flags.FLAGS[name]
    default = flag.default if spec.kind is not tuple else tuple(int(v) for v in flag.default)
    assert default == spec.default, name
    assert spec.help and spec.help.replace("%%", "%")[:40] in flag.help, name
  # An algorithm's own settings say who reads them, grouped under their section.
  assert "[read by: fedawe]" in flags.FLAGS["fedawe_clip"].help
  assert {f.name for f in flags.FLAGS.get_flags_for_module("fedjax_bench (fedawe)")} == {
      "fedawe_clip", "fedawe_eval"}
  assert "data_size for fedalign" in flags.FLAGS["weighting"].help


def test_no_default_outside_the_declarations():
  """The algorithm layers read typed settings only: no `hp.get(name, default)` left."""
  pattern = re.compile(r"\bhp\.get\(|\bhp\[|\bhparams\.get\(|\bhparams\[")
  for path in [*(REPO / "fedjax_bench" / "algorithms").glob("*.py"),
               *(REPO / "fedjax_bench" / "core").glob("*.py")]:
    assert not pattern.search(path.read_text()), path


@pytest.mark.parametrize("algo", sorted(algorithms.ALGORITHMS))
def test_command_line_and_python_resolve_alike(algo, parsed_defaults):
  """With nothing but the algorithm given, the flags and the API's keywords give one Config
  (the FedAWE clip was 0 from Python and 0.5 from the command line)."""
  import json
  mine = config.resolve(algo=algo)
  assert parsed_defaults[algo] == {"flat": json.loads(json.dumps(mine.flat())), "given": []}
  assert algorithms.get(algo).Hparams() == settings.coerce(algorithms.get(algo).Hparams, {})


def test_fedawe_clip_is_the_authors_everywhere():
  assert config.resolve(algo="fedawe").hparams.fedawe_clip == 0.5
  assert settings.coerce(algorithms.get("fedawe").Hparams, {}).fedawe_clip == 0.5


@pytest.mark.parametrize("call,message", [
    (lambda: config.resolve(algo="fedawe", fedawe_clp=0.0),
     "unknown setting 'fedawe_clp'; closest: fedawe_clip"),
    (lambda: fedjax_bench.run(algo="fedavg", client_l=0.1), "closest: client_lr"),
    (lambda: fedavg.build(None, None, {"client_lr": 0.1, "severr_lr": 1.0}),
     "closest: server_lr"),
    (lambda: config.resolve(algo="fedavg", fedau_k=3),
     "--fedau_k has no effect on --algo=fedavg"),
    (lambda: config.resolve(algo="fedavg", server_beta1=0.5),
     "--server_beta1 has no effect on --algo=fedavg"),
    (lambda: config.resolve(algo="fedams", server_momentum=0.5),
     "--server_momentum has no effect on --algo=fedams"),
    (lambda: config.resolve(algo="fedalign", align_eps_gamma=0.5),
     "--align_eps_gamma has no effect"),
    (lambda: config.resolve(algo="fedavg", client_lr="fast"), "--client_lr='fast' must be a number"),
    (lambda: config.resolve(algo="fedavg", rounds=0), "--rounds must be positive"),
    (lambda: config.resolve(algo="fedavg", sampling="sorted"), "valid: shuffle, "),
    (lambda: config.resolve(algo="fedavg", clients_per_round=20, num_clients=10),
     "--clients_per_round=20 must not exceed --num_clients=10"),
    (lambda: config.check_sweep(config.resolve(), {"batch_size": [8, 16]}),
     "cannot be swept in one program"),
])
def test_bad_settings_are_one_line_errors(call, message):
  with pytest.raises(UsageError, match=re.escape(message)):
    call()


def test_settings_that_take_effect_are_accepted():
  assert config.resolve(algo="fedavg", server_opt="adam", server_beta1=0.5).hparams \
      .server_beta1 == 0.5
  assert config.resolve(algo="fedams", server_beta2=0.999).hparams.server_beta2 == 0.999
  assert config.resolve(algo="fedalign", align_eps_schedule="exp_decay",
                        align_eps_gamma=0.5).hparams.align_eps_gamma == 0.5
  assert config.resolve(algo="fedprox_priority").hparams.prox_mu == 1.0
  assert config.resolve(algo="fedalign").hparams.prox_mu == 0.0


def _small_experiment(algo, dataset):
  cfg = config.resolve(algo=algo, **{k: v for k, v in _SMALL.items()
                                     if k in config.specs(algo)}, **_MODELS.get(algo, {}))
  return experiment.setup(cfg, dataset=dataset)


# A head and a body need two layers (fedper, fedrep); fedbn's part is a model's batch norm.
_MODELS = {"fedper": dict(model="mlp", mlp_hidden=(4,)),
           "fedrep": dict(model="mlp", mlp_hidden=(4,)),
           "fedbn": dict(model="mlp_bn", mlp_hidden=(4,))}


_SMALL = dict(num_clients=12, local_steps=2, batch_size=4, train_eval_examples=0,
              clients_per_round=4, num_priority=2, test_mix="official",
              holdout_fraction=0.25,  # ditto is scored on per-client test data
              dp_clip_count_stddev=0.5)  # dp_fedavg_adaptive's z < 2 sigma_b at 4 a round


def test_every_declared_sweepable_setting_traces():
  """A setting declared sweepable must survive being a tracer: every algorithm is built,
  initialized and run for one round with all of them traced at once (a wrong declaration
  fails here, not in a user's sweep)."""
  dataset = data.load("synthetic", num_clients=12, partition_seed=0)
  for algo in sorted(algorithms.ALGORITHMS):
    exp = _small_experiment(algo, dataset)
    names = config.sweepable(exp.config)
    assert "client_lr" in names, algo

    def one_round(values, exp=exp, names=names):
      hp = settings.replace(exp.hparams, dict(zip(names, values)))
      alg = exp.build(hp)
      key = jax.random.PRNGKey(0)
      server, clients = alg.init(key)
      return alg.round(server, clients, key)

    jax.eval_shape(one_round, [np.float32(v) for v in
                               (getattr(exp.hparams, n) for n in names)])


# --- an algorithm in three places: this module, one register line, this test -------------
@section("toy")
class ToyHparams(rounds.Synchronous):
  toy_shrink: float = setting(0.5, "Toy: the server applies this fraction of FedAvg's step.",
                              check=POSITIVE, sweep=True)


def toy_build(task, world, hp):
  """FedAvg whose server step is scaled by toy_shrink: exactly fedavg at server_lr *
  toy_shrink (a reduction the test checks)."""
  hp = settings.coerce(ToyHparams, hp)
  plain = dataclasses.replace(fedavg.Hparams(), **{
      k: v for k, v in settings.as_dict(hp).items() if k != "toy_shrink"})
  return fedavg.build(task, world, dataclasses.replace(
      plain, server_lr=hp.server_lr * hp.toy_shrink))


def register_toy():
  if "toy" not in algorithms.ALGORITHMS:
    algorithms.register("toy", type("toy", (), {"Hparams": ToyHparams, "build": toy_build}))


_TOY_RUN = dict(dataset="synthetic", num_clients=10, clients_per_round=5, rounds=4,
                eval_every=2, local_steps=3, batch_size=8, host_devices=1)


def test_a_new_algorithm_runs_through_the_api_and_the_command_line(tmp_path):
  register_toy()
  try:
    toy = fedjax_bench.run(algo="toy", toy_shrink=0.5, seeds=2, progress=False, **_TOY_RUN)
    same = fedjax_bench.run(algo="fedavg", server_lr=0.5, seeds=2, progress=False,
                            **_TOY_RUN)
    np.testing.assert_array_equal(toy.curves["train_loss"], same.curves["train_loss"])
    with pytest.raises(UsageError, match="--toy_shrink has no effect on --algo=fedavg"):
      config.resolve(algo="fedavg", toy_shrink=0.5)
  finally:
    del algorithms.ALGORITHMS["toy"]
  code = ("import sys\n"
          "from tests.config import test_settings; test_settings.register_toy()\n"
          "from fedjax_bench import cli\n"
          "sys.exit(cli.main(cli.parse_argv(sys.argv)))\n")
  args = [f"--{k}={v}" for k, v in _TOY_RUN.items()]
  r = subprocess.run([sys.executable, "-c", code, "--algo=toy", "--toy_shrink=0.5",
                      "--seeds=2", f"--output_dir={tmp_path / 'toy'}", *args], cwd=REPO,
                     env=dict(os.environ, PYTHONPATH=str(REPO)),
                     capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-2000:]
  _assert_rows_equal(toy, tmp_path / "toy")


def _assert_rows_equal(result, out):
  """The API's per-evaluation metrics are the command line's metrics.csv, float32 for
  float32 ('%.9g' identifies a float32)."""
  import csv
  with open(out / "metrics.csv") as f:
    written = list(csv.DictReader(f))
  rows = result.rows()
  assert len(rows) == len(written) > 0
  for mine, theirs in zip(rows, written):
    assert set(mine) == set(theirs)
    for k, v in mine.items():
      assert (("%.9g" % v) if isinstance(v, float) else str(v)) == theirs[k], k


@pytest.mark.parametrize("algo,extra", [
    ("fedavg", dict(dataset="synthetic", num_clients=10, clients_per_round=5, rounds=4,
                    eval_every=2, local_steps=3, batch_size=8, server_opt="momentum")),
    ("area", dict(dataset="quadratic", sim_time=0.3, num_clients=8)),
    ("fedalign", dict(dataset="synthetic", num_clients=8, num_priority=2, rounds=4,
                      eval_every=2, local_steps=2, batch_size=8, warmup_rounds=1)),
])
def test_the_api_and_the_command_line_give_the_same_numbers(algo, extra, tmp_path):
  """One synchronous, one asynchronous and one prioritized algorithm: the same settings
  from Python and from flags, on one device each, give bit-identical metrics; the API
  writes the same files when given an output_dir (and TensorBoard's with tensorboard)."""
  out = tmp_path / "cli"
  args = [f"--{k}={v}" for k, v in extra.items()]
  r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "run.py"), f"--algo={algo}",
                      "--seeds=2", f"--output_dir={out}", "--host_devices=1", *args],
                     cwd=tmp_path,
                     capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-2000:]
  assert jax.device_count() == 1
  api_out = tmp_path / "api"
  result = fedjax_bench.run(algo=algo, seeds=2, output_dir=str(api_out), tensorboard=True,
                            progress=False, host_devices=1, **extra)
  _assert_rows_equal(result, out)
  assert (api_out / "summary.json").exists() and (api_out / "metrics.csv").exists()
  assert sorted(p.name for p in (api_out / "tensorboard").iterdir()) == ["seed_0", "seed_1"]
  import json
  written = json.loads((out / "summary.json").read_text())
  assert written["final"] == result.summary["final"]
  where = lambda flags_: {k: v for k, v in flags_.items() if k not in ("output_dir",
                                                                       "tensorboard")}
  assert where(written["config"]["flags"]) == where(result.summary["config"]["flags"])


def test_result_metrics_are_rows_or_a_dataframe(monkeypatch):
  result = fedjax_bench.run(seeds=1, progress=False, **_TOY_RUN)
  assert result.summary["final"]["test_accuracy"]["per_seed"][0] == result.rows()[-1][
      "test_accuracy"]
  assert result.curves["train_loss"].shape == (3, 1, 1)
  monkeypatch.setitem(sys.modules, "pandas", type("pandas", (), {
      "DataFrame": staticmethod(lambda rows: ("frame", rows))}))
  assert repr(result.metrics) == repr(("frame", result.rows()))  # NaN-safe
  monkeypatch.setitem(sys.modules, "pandas", None)  # not installed
  assert repr(result.metrics) == repr(result.rows())


def test_the_example_runs():
  r = subprocess.run([sys.executable, "examples/first_run.py"], cwd=REPO, capture_output=True,
                     text=True, timeout=300, env=dict(__import__("os").environ,
                                                      PYTHONPATH=str(REPO)))
  assert r.returncode == 0, r.stderr[-2000:]
  assert "fedavg: test accuracy" in r.stdout and "fedavgm, client_lr=0.1" in r.stdout


def test_flags_md_is_generated_from_the_declarations():
  assert (REPO / "docs" / "FLAGS.md").read_text() == flags.markdown(), (
      "docs/FLAGS.md is stale: python -m fedjax_bench.config.flags")


def test_prioritized_fl_on_a_dataset_without_labels_is_one_line():
  """It was a ValueError from deep inside the test-set resampling."""
  with pytest.raises(UsageError, match="--dataset=quadratic has no labels"):
    experiment.setup(config.resolve(algo="fedalign", dataset="quadratic"))


def test_a_config_built_by_hand_is_the_keywords_config():
  """The typed form: sections and Hparams objects, completed as the keywords are resolved
  (FedALIGN's warm-up becomes a tenth of the rounds in both)."""
  from fedjax_bench.algorithms import fedalign, fedawe
  from fedjax_bench.data.settings import DataSettings
  from fedjax_bench.config.run_settings import EvalSettings
  by_hand = config.Config(algo="fedawe", data=DataSettings(dataset="toyfl", num_clients=20),
                          hparams=fedawe.Hparams(fedawe_clip=0.0))
  keywords = config.resolve(algo="fedawe", dataset="toyfl", num_clients=20, fedawe_clip=0.0)
  assert config.complete(by_hand) == keywords
  pfl = config.complete(config.Config(algo="fedalign", eval=EvalSettings(rounds=50),
                                      hparams=fedalign.Hparams(align_epsilon=0.1)))
  assert pfl.hparams.warmup_rounds == 5 and pfl.world.participation == "full"
  assert pfl == config.resolve(algo="fedalign", rounds=50, align_epsilon=0.1)


def test_python_dash_m_is_the_command_line(tmp_path):
  r = subprocess.run([sys.executable, "-m", "fedjax_bench", "--check_only", "--algo=fedawe",
                      "--fedawe_clp=0"], cwd=tmp_path, capture_output=True, text=True,
                     timeout=120, env=dict(__import__("os").environ, PYTHONPATH=str(REPO)))
  assert r.returncode != 0 and "Unknown command line flag 'fedawe_clp'" in r.stderr
  r = subprocess.run([sys.executable, "-m", "fedjax_bench", "--check_only", "--algo=fedawe"],
                     cwd=tmp_path, capture_output=True, text=True, timeout=120,
                     env=dict(__import__("os").environ, PYTHONPATH=str(REPO)))
  assert r.returncode == 0 and "ok: the settings are valid" in r.stdout, r.stderr[-2000:]
