"""benchmarks/peers/: the PyTorch peers' models equal ours in size, and compare.py's command
line, its cells and its table work without PyTorch, Flower or FedJAX (none is imported)."""

import ast
import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from tests.conftest import REPO
from benchmarks.peers import architectures
from fedjax_bench import models
from fedjax_bench.models import char_lstm


def _ours(name: str, hidden: int = 64) -> int:
  if name == "char_lstm":
    model = char_lstm.CharLSTM(vocab_size=architectures.VOCAB,
                               num_classes=architectures.VOCAB, hidden=hidden)
    x = jnp.zeros((1, 80), jnp.int32)
  else:
    model = models.make(name, num_classes=10, is_image=True, mlp_hidden=(200, 200))
    x = jnp.zeros((1, 28, 28, 1), jnp.float32)
  shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)
  return sum(int(a.size) for a in jax.tree.leaves(shapes))


@pytest.mark.parametrize("name,hidden,count", [
    ("logreg", 64, 7_850), ("mlp", 64, 199_210), ("cnn", 64, 1_663_370),
    ("char_lstm", 64, 57_698), ("char_lstm", 256, None)])
def test_the_pytorch_models_have_our_parameter_counts(name, hidden, count):
  ours = _ours(name, hidden)
  assert architectures.num_params(name, hidden) == ours
  if count is not None:
    assert ours == count
  # An LSTM counted with PyTorch's second bias (b_hh) would be 4 * hidden a layer more.
  if name == "char_lstm":
    assert ours + 2 * 4 * hidden != architectures.num_params(name, hidden)


def test_the_torch_side_builds_every_layer_kind_the_specs_use():
  tree = ast.parse((REPO / "benchmarks/peers/torch_peer.py").read_text())
  handled = {node.comparators[0].value for node in ast.walk(tree)
             if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name)
             and node.left.id == "kind" and isinstance(node.comparators[0], ast.Constant)}
  used = {layer[0] for m in ("logreg", "mlp", "cnn", "char_lstm")
          for layer in architectures.layers(m)}
  assert used <= handled, used - handled
  ast.parse((REPO / "benchmarks/peers/torch_workloads.py").read_text())
  with pytest.raises(ValueError, match="valid: logreg, mlp, cnn, char_lstm"):
    architectures.layers("resnet")


# A process in which importing torch, flwr or fedjax fails: compare.py must not need them
# for its help, its checks, its cells or its table.
_NO_PEERS = ("import sys\n"
             "for m in ('torch', 'flwr', 'ray', 'fedjax', 'haiku'): sys.modules[m] = None\n")


def _run(code: str, *argv: str) -> subprocess.CompletedProcess:
  script = _NO_PEERS + f"sys.argv = ['compare', *{list(argv)!r}]\n" + code
  return subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                        text=True, timeout=120)


_MAIN = "import runpy; runpy.run_module('benchmarks.peers.compare', run_name='__main__')\n"


_CHECKS = """
import json
from absl import flags
from benchmarks.peers import compare
problems, names = [], []
for argv in json.loads(sys.argv[1]):
  flags.FLAGS.unparse_flags()
  flags.FLAGS(["compare", *argv])
  problems.append(compare.check_args())
  names.append(compare.output_name())
print(json.dumps(problems))
print(json.dumps(names))
"""


def test_help_and_the_argument_checks_need_no_peer():
  p = _run(_MAIN, "--help")  # absl prints the usage and the flags, and exits 1
  assert "USAGE" in p.stdout and "Traceback" not in p.stderr, p.stderr
  for flag in ("--cohorts", "--peers", "--[no]quick", "--seconds", "--peers_venvs"):
    assert flag in p.stdout
  p = _run(_MAIN, "--peers=torch,pytorch")
  assert p.returncode == 2, (p.stdout, p.stderr)
  assert p.stderr.strip().splitlines()[-1] == (
      "error: unknown --peers ['pytorch']; valid: torch, flower, fedjax")
  cases = {"--cohorts=1,5": "bad --cohorts ['5']; valid: 1, 10, 100, 1000",
           "--workloads=w1,logreg32": "unknown --workloads ['logreg32']; valid: w1, w2, w3, "
                                      "w7",
           "--repeats=0": "--repeats must be at least 1, --seconds and --max_round_seconds "
                          "positive",
           "--seconds=-1": "--repeats must be at least 1, --seconds and --max_round_seconds "
                           "positive",
           "--peers=fedjax": None, "--quick": None}
  p = _run(_CHECKS, json.dumps([[a] for a in cases]))
  assert p.returncode == 0, p.stderr
  assert json.loads(p.stdout.strip().splitlines()[-2]) == list(cases.values())
  # Only the whole comparison writes peers.*: a partial one leaves that table alone.
  names = {(): "peers", ("--quick",): "peers_quick", ("--peers=fedjax",): "peers_subset",
           ("--workloads=w3",): "peers_subset", ("--cohorts=10,100",): "peers_subset",
           ("--cohorts=1000,100,10,1", "--repeats=3"): "peers"}
  p = _run(_CHECKS, json.dumps([list(a) for a in names]))
  assert p.returncode == 0, p.stderr
  assert json.loads(p.stdout.strip().splitlines()[-1]) == list(names.values())


_CELLS_AND_TABLE = """
from absl import flags
from benchmarks.peers import compare
flags.FLAGS(sys.argv)
assert compare.check_args() is None
todo, left_out = compare.cells(compare.FLAGS.peers)
row = {"workload": "w1", "model": "logreg", "batch_size": 10, "clients_per_round": 10,
       "population": 100, "params": 7850, "errors": {"flower": "exited 1: boom"},
       "sides": {"ours": {"client_steps_per_second": 50000.0, "matmul_fraction": 0.2},
                 "torch": {"client_steps_per_second": 5000.0, "torch": "2.13.0+cpu"},
                 "fedjax": {"client_steps_per_second": 8000.0, "fedjax": "0.0.17",
                            "jax": "0.4.30"}},
       "ratios": {"torch": 10.0, "fedjax": 6.25}, "loadavg": [0.5, 0.5, 0.5]}
env = {"jax": "0.10.2", "devices": ["cpu:0"], "cpu_count": 2, "cpu_model": "AMD EPYC 9B14",
       "platform": "Linux", "loadavg_before": [0.1], "loadavg_after": [0.2],
       "matmul_gflops": 468.0}
record = {"date": "2026-11-28", "repeats": 5, "seconds": 1.0, "peers": compare.FLAGS.peers,
          "missing": {}, "left_out": left_out, "results": [row], "environment": env,
          "versions": compare.versions([row])}
print(json.dumps({"todo": todo, "left_out": left_out, "quick": compare.FLAGS.workloads,
                  "rounds": [compare.rounds_for("ours", "w1", 1, 1.0),
                             compare.rounds_for("torch", "w3", 100, 1.0)],
                  "table": compare.markdown(record)}))
"""


def test_cells_leave_out_the_slow_ones_and_the_table_names_the_machine():
  p = _run("import json\n" + _CELLS_AND_TABLE, "--workloads=w1,w3,w7",
           "--cohorts=1,100,1000")
  assert p.returncode == 0, p.stderr
  out = json.loads(p.stdout.strip().splitlines()[-1])
  assert out["todo"] == [["w1", 1], ["w1", 100], ["w1", 1000], ["w3", 1], ["w3", 100],
                         ["w7", 10]]
  assert list(out["left_out"]) == ["w3 at m = 1,000"]
  assert "over --max_round_seconds" in out["left_out"]["w3 at m = 1,000"]
  assert out["rounds"] == [6000, 1]  # a repeat of about a second; at least one round
  table = out["table"]
  assert ("| W1 logreg, b10 | 10 of 100 | 50,000 | 5,000 | failed | 8,000 | 10.0x | — | "
          "6.2x | 20% |") in table
  assert "- Left out: w3 at m = 1,000" in table
  assert "Flower failed: exited 1: boom" in table
  assert "2 CPUs (AMD EPYC 9B14)" in table and "matmul peak 468 GFLOP/s" in table
  assert "; torch 2.13.0+cpu; fedjax 0.0.17 on jax 0.4.30;" in table
  p = _run("import json\n" + _CELLS_AND_TABLE, "--quick")
  assert p.returncode == 0, p.stderr
  out = json.loads(p.stdout.strip().splitlines()[-1])
  assert out["quick"] == ["w1", "w3"] and out["todo"] == [["w1", 1], ["w1", 10], ["w3", 1],
                                                          ["w3", 10]]
