"""A paper's setting, taken by the flags a user does not give (`fedjax_bench.config.presets`), is recorded
in the configuration, announced by the command line and kept in config.json."""

import json
import subprocess
import sys

from conftest import REPO
from fedjax_bench import config


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
