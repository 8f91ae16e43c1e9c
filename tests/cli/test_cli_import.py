"""`--import`: an algorithm registered by a researcher's own module runs from the command
line, with flags of its own."""

import subprocess
import sys

from tests.conftest import REPO

RUN = str(REPO / "benchmarks" / "run.py")
ARGS = ["--dataset=synthetic", "--num_clients=8", "--clients_per_round=4", "--rounds=2",
        "--eval_every=1", "--seeds=1", "--host_devices=1"]
MODULE = '''
from fedjax_bench import algorithms, settings
from fedjax_bench.algorithms import fedavg


@settings.section("my_fedavg")
class Hparams(fedavg.Hparams):
  my_note: float = settings.setting(1.0, "A setting of my own (read by nothing).",
                                    check=settings.POSITIVE)


def build(task, world, hp):
  return fedavg.build(task, world, settings.coerce(Hparams, hp))


algorithms.register("my_fedavg", __import__(__name__))
'''


def _run(tmp_path, name, *args):
  return subprocess.run([sys.executable, RUN, *ARGS, f"--output_dir={tmp_path / name}", *args],
                        capture_output=True, text=True, timeout=300, cwd=tmp_path)


def test_an_imported_algorithm_runs_with_its_own_flags(tmp_path):
  (tmp_path / "my_algos.py").write_text(MODULE)
  mine = _run(tmp_path, "mine", "--import=my_algos", "--algo=my_fedavg", "--my_note=2")
  assert mine.returncode == 0, mine.stderr[-2000:]
  by_file = _run(tmp_path, "file", f"--import={tmp_path / 'my_algos.py'}",
                 "--algo=my_fedavg")
  assert by_file.returncode == 0, by_file.stderr[-2000:]
  ours = _run(tmp_path, "ours", "--algo=fedavg")
  assert ours.returncode == 0, ours.stderr[-2000:]
  metrics = lambda name: (tmp_path / name / "metrics.csv").read_text()
  assert metrics("mine") == metrics("ours") == metrics("file")


def test_a_module_that_does_not_import_is_one_line(tmp_path):
  r = _run(tmp_path, "x", "--import=no_such_module_here", "--algo=fedavg")
  assert r.returncode == 2
  assert r.stderr == ("error: --import=no_such_module_here: ModuleNotFoundError: No module "
                      "named 'no_such_module_here'\n")
  assert not (tmp_path / "x").exists()
