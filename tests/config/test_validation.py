"""Every value of a setting passes one check (`Spec.convert`), whether it comes from a flag,
a keyword of the Python API (a NumPy scalar too) or a --sweep grid: non-finite numbers,
out-of-range integers and seeds, and files where directories go are one-line errors."""

import json
import math
import os
import re
import subprocess
import sys

import jax
import numpy as np
import pytest

from tests.conftest import REPO
from fedjax_bench import api, config, settings
from fedjax_bench.engine import compile_cache
from fedjax_bench.config import flags
from fedjax_bench.algorithms import privacy
from fedjax_bench.core import keys
from fedjax_bench.errors import UsageError

RUN = str(REPO / "benchmarks" / "run.py")
TINY = ["--dataset=synthetic", "--num_clients=10", "--clients_per_round=2", "--local_steps=1",
        "--rounds=2", "--eval_every=1", "--seeds=1"]


def _refused(message, **kwargs):
  with pytest.raises(UsageError, match=re.escape(message)):
    api.prepare(**kwargs)


def _cli(args, tmp_path, env=None):
  env = dict(os.environ, FEDJAX_BENCH_CACHE=str(tmp_path / "cache"), **(env or {}))
  return subprocess.run([sys.executable, RUN, *args], capture_output=True, text=True, env=env,
                        cwd=tmp_path, timeout=300)


def _one_line_error(r, message):
  lines = [l for l in r.stderr.splitlines() if l.strip()]
  assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
  assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], r.stderr


@pytest.mark.parametrize("sweep,message", [
    ({"client_lr": [-0.1, 0.1]}, "--sweep=client_lr: --client_lr must be positive (got -0.1)"),
    ({"client_lr": [0]}, "--client_lr must be positive (got 0.0)"),
    ({"client_lr": [math.nan, 0.1]}, "--client_lr=nan must be a finite number"),
    ({"client_lr": [math.inf]}, "--client_lr=inf must be a finite number"),
    (["client_lr:nan,nan"], "--client_lr=nan must be a finite number"),
    (["client_lr:1e400"], "--client_lr=inf must be a finite number"),
    ({"alpha_floor": [2]}, "--alpha_floor must be in [0, 1] (got 2.0)"),
    ({"dp_noise_multiplier": [-1]}, "--dp_noise_multiplier must be >= 0 (got -1.0)"),
    ({"async_delta": [2.5]}, "--async_delta=2.5 must be an integer"),
    ({"server_beta1": [0.5, 0.9]}, "--server_beta1 has no effect on --algo=fedavg"),
])
def test_grid_values_pass_the_setting_checks(sweep, message):
  name = next(iter(sweep)) if isinstance(sweep, dict) else sweep[0].split(":")[0]
  algo = {"alpha_floor": "fedmax", "dp_noise_multiplier": "dp_fedavg",
          "async_delta": "fedbuff"}.get(name, "fedavg")
  _refused(message, algo=algo, sweep=sweep)


def test_a_flag_a_keyword_and_a_grid_value_get_the_same_check(tmp_path):
  rule = "--client_lr must be positive (got -0.5)"
  _refused(rule, client_lr=-0.5)
  _refused("--sweep=client_lr: " + rule, sweep={"client_lr": [-0.5]})
  _one_line_error(_cli([*TINY, "--client_lr=-0.5", f"--output_dir={tmp_path / 'o'}"],
                       tmp_path), rule)
  assert not (tmp_path / "o").exists()


def test_numpy_scalars_are_converted_then_checked():
  _refused("--client_lr must be positive (got -1.0)", client_lr=np.float64(-1))
  _refused("--rounds must be positive (got 0)", rounds=np.int64(0))
  _refused("--rounds=2.5 must be an integer", rounds=np.float64(2.5))
  cfg, _, grid = api.prepare(client_lr=np.float32(0.1), rounds=np.int64(7),
                             zero_init=np.bool_(True), sweep={"server_lr": np.array([0.5, 1.0])})
  flat = cfg.flat()
  assert (flat["client_lr"], flat["rounds"], flat["zero_init"]) == (0.1, 7, True)
  assert [type(flat[n]) for n in ("client_lr", "rounds", "zero_init")] == [float, int, bool]
  json.dumps(flat)  # plain Python values: the results files can hold them
  assert grid == [{"server_lr": 0.5}, {"server_lr": 1.0}]


def test_a_traced_value_passes_the_conversion_unchanged():
  spec = config.specs("fedavg")["client_lr"]
  seen = []
  jax.jit(lambda x: seen.append(spec.convert(x) is x) or x)(np.float32(-1))
  assert seen == [True]
  grid = np.array([0.1, 0.2])
  assert spec.convert(grid) is grid


@pytest.mark.parametrize("seeds", [[0.5, 1.7], "0,4294967296", 4294967296, "4294967296",
                                   [-1], "1.5", [math.nan], True, [3, 3], 0, 10**6 + 1])
def test_bad_seeds_are_one_line_errors(seeds):
  with pytest.raises(UsageError, match=r"must be a count .* distinct integers in \[0, "
                                       r"4294967295\]$"):
    flags.parse_seeds(seeds)


def test_the_seed_range_is_the_keys_range():
  """A seed keys its run as 32 bits: 2**32 is seed 0 again, 2**32 - 1 a seed of its own."""
  same = lambda a, b: bool(np.array_equal(keys.root(a), keys.root(b)))
  assert same(2**32, 0) and not same(flags.MAX_SEED, 0)
  assert flags.parse_seeds([0, flags.MAX_SEED]) == [0, 4294967295]
  assert flags.parse_seeds(np.arange(2)) == [0, 1] and flags.parse_seeds((2.0, 3)) == [2, 3]
  assert config.resolve(partition_seed=flags.MAX_SEED).data.partition_seed == flags.MAX_SEED
  with pytest.raises(UsageError, match="--data_per_seed: seed 1 draws its data from "):
    config.resolve(partition_seed=flags.MAX_SEED, data_per_seed=True, seeds=[0, 1])


@pytest.mark.parametrize("values,message", [
    (dict(synthetic_alpha=math.nan), "--synthetic_alpha=nan must be a finite number"),
    (dict(synthetic_alpha=1e300), "--synthetic_alpha must be in [0, 1000000] (got 1e+300)"),
    (dict(synthetic_beta=-1.0), "--synthetic_beta must be in [0, 1000000]"),
    (dict(client_lr=math.inf), "--client_lr=inf must be a finite number"),
    (dict(client_lr=10**400), "is out of range of a float"),
    (dict(server_opt="adam", server_beta2=2.0), "--server_beta2 must be in [0, 1) (got 2.0)"),
    (dict(server_opt="adam", server_beta1=1.0), "--server_beta1 must be in [0, 1) (got 1.0)"),
    (dict(server_opt="adam", server_eps=-1.0), "--server_eps must be positive (got -1.0)"),
    (dict(server_opt="adam", server_eps=0.0), "--server_eps must be positive (got 0.0)"),
    (dict(server_opt="momentum", server_momentum=math.nan), "--server_momentum=nan must be "),
    (dict(server_opt="momentum", server_momentum=1.0), "--server_momentum must be in [0, 1)"),
    (dict(algo="f3ast", f3ast_beta=2.0), "--f3ast_beta must be in (0, 1] (got 2.0)"),
    (dict(availability="sine", availability_gamma=3.0), "--availability_gamma must be in [0, 1]"),
    (dict(algo="fedalign", align_eps_schedule="exp_decay", align_eps_gamma=1.5),
     "--align_eps_gamma must be in [0, 1] (got 1.5)"),
    (dict(algo="fedsgd", compressor="stoc", stoc_bits=64), "--stoc_bits must be in [1, 32]"),
    (dict(model="mlp", mlp_hidden=(200, 0)), "--mlp_hidden must be widths in [1, "),
    (dict(partition_seed=-1), "--partition_seed=-1 is out of range; must be at least 0"),
    (dict(partition_seed=2**32), "--partition_seed=4294967296 is out of range; must be at most "
     "4294967295"),
    (dict(rounds=10**18), "--rounds=1000000000000000000 is out of range; must be at most "
     "2147483647"),
    (dict(final_window=10**20), "--final_window=100000000000000000000 is out of range"),
    (dict(rounds=math.inf), "--rounds=inf must be an integer"),
])
def test_bad_numbers_are_one_line_errors(values, message):
  with pytest.raises(UsageError, match=re.escape(message)):
    config.resolve(**values)


def test_every_number_setting_refuses_non_finite_and_int32_overflow():
  """The central rule: no float setting takes NaN, or inf unless declared to, and no
  integer setting leaves its declared limits (int32 unless declared otherwise)."""
  for name, (spec, _) in flags.declarations().items():
    if spec.kind is float:
      for bad in [math.nan, *([] if spec.allow_inf else [math.inf, -math.inf])]:
        with pytest.raises(UsageError, match=f"--{name}="):
          spec.convert(bad)
    if spec.kind is int:
      with pytest.raises(UsageError, match=f"--{name}="):
        spec.convert((spec.limits or settings.INT32)[1] + 1)
      with pytest.raises(UsageError, match=f"--{name}=inf must be an integer"):
        spec.convert(math.inf)


def test_a_setting_declared_to_take_inf_takes_it():
  cfg = config.resolve(algo="dp_fedavg", dp_clip=math.inf, dp_noise_multiplier=0.0)
  assert cfg.hparams.dp_clip == math.inf
  with pytest.raises(UsageError, match="--dp_clip=nan must be a finite number"):
    config.resolve(algo="dp_fedavg", dp_clip=math.nan)


@pytest.mark.parametrize("participation", ["uniform", "bernoulli", "full"])
def test_no_noise_is_infinite_epsilon_not_a_crash(participation):
  from fedjax_bench.algorithms import dp_fedavg
  cfg = config.resolve(algo="dp_fedavg", dp_noise_multiplier=0.0, participation=participation,
                       participation_prob=0.1)
  eps = dp_fedavg.privacy(cfg.hparams, cfg.world, 100, np.array([0, 1, 5]))
  assert eps.tolist() == [0.0, math.inf, math.inf]
  event, relation = privacy.round_event(participation, 100, 1.0, prob=0.1, clients_per_round=10)
  assert np.all(np.isfinite(privacy.epsilon(event, relation, [1, 5], 1e-5)))


def test_a_cache_dir_that_is_a_file_is_refused(tmp_path, monkeypatch):
  file = tmp_path / "file"
  file.write_text("")
  with pytest.raises(UsageError, match="--cache_dir must name a directory, not a file"):
    config.resolve(cache_dir=str(file / "sub"))
  monkeypatch.setenv(compile_cache.ENV, str(file))
  with pytest.raises(UsageError, match=f"^\\$FEDJAX_BENCH_COMPILE_CACHE={re.escape(str(file))} "
                                       "names a file, not a directory; give a directory, or "):
    compile_cache.directory()
  monkeypatch.delenv(compile_cache.ENV)
  monkeypatch.setenv("FEDJAX_BENCH_CACHE", str(file))
  with pytest.raises(UsageError, match="^\\$FEDJAX_BENCH_CACHE=.* names a file"):
    compile_cache.directory()
  monkeypatch.delenv("FEDJAX_BENCH_CACHE")
  assert compile_cache.directory(str(tmp_path / "new")) == str(tmp_path / "new" / "xla")


@pytest.mark.parametrize("args,message", [
    (["--partition_seed=-1"], "--partition_seed=-1 is out of range; must be at least 0"),
    (["--seeds=4294967296"], "--seeds='4294967296' must be a count"),
    (["--rounds=1000000000000000000"], "--rounds=1000000000000000000 is out of range"),
    (["--final_window=100000000000000000000"], "is out of range; must be at most 2147483647"),
    (["--synthetic_alpha=nan"], "--synthetic_alpha=nan must be a finite number"),
    (["--sweep=client_lr:nan,nan"], "--client_lr=nan must be a finite number"),
    (["--cache_dir=FILE"], "--cache_dir must name a directory, not a file"),
    ([f"--flagfile={sys.executable}"], "error: a --flagfile is not a text file"),
    (["--flagfile=BINARY"], "error: a --flagfile is not a text file"),
    ([], "$FEDJAX_BENCH_COMPILE_CACHE="),
])
def test_bad_input_on_the_command_line_is_one_line_and_exit_2(args, message, tmp_path):
  (tmp_path / "FILE").write_text("")
  (tmp_path / "BINARY").write_bytes(bytes(range(128, 256)) * 8)
  env = {} if args else {compile_cache.ENV: str(tmp_path / "FILE")}
  r = _cli([*TINY, *args, f"--output_dir={tmp_path / 'out'}"], tmp_path, env=env)
  _one_line_error(r, message)
  assert "Traceback" not in r.stderr and not (tmp_path / "out").exists()


def test_the_flags_module_imports_alone():
  code = "import fedjax_bench.config.flags as f; print(len(f.names()))"
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                     cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
  assert r.returncode == 0 and int(r.stdout) >= 130, r.stderr[-2000:]


def test_help_lists_our_flags_first_and_exits_0(tmp_path):
  full = subprocess.run([sys.executable, RUN, "--helpfull"], capture_output=True, text=True,
                        timeout=120, cwd=tmp_path)
  assert full.returncode == 0, full.stderr[-2000:]
  flag_lines = [l.split(":")[0].strip() for l in full.stdout.splitlines()
                if l.startswith("  --")]
  assert flag_lines[:4] == ["--algo", "--import", "--seeds", "--sweep"]  # what to run
  assert flag_lines.index("--client_lr") < flag_lines.index("--[no]pdb")  # absl's own: last
  short = subprocess.run([sys.executable, RUN, "--help"], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
  assert short.returncode == 0, short.stderr[-2000:]
  assert "--algo" in short.stdout and "--client_lr" in short.stdout
  assert "--[no]pdb" not in short.stdout and "--helpfull" in short.stdout
