"""Notes on valid settings that waste most of a run's work (`experiment.notes`)."""

from fedjax_bench import experiment

SMALL = dict(dataset="synthetic", num_clients=6, clients_per_round=3)


def test_a_batch_larger_than_every_client_is_named_with_its_cost():
  exp = experiment.setup({**SMALL, "batch_size": 100000})
  largest = int(exp.dataset.train.counts.max())
  (note,) = experiment.notes(exp)
  assert note.startswith(f"--batch_size=100000 exceeds every client's examples (at most "
                         f"{largest}): each local step computes 100000 rows")
  assert f"--batch_size={largest} takes the same full-batch steps" in note


def test_no_note_for_an_ordinary_batch_or_sampling_with_replacement():
  assert experiment.notes(experiment.setup({**SMALL, "batch_size": 8})) == []
  exp = experiment.setup({**SMALL, "batch_size": 100000, "sampling": "replacement"})
  assert experiment.notes(exp) == []  # every drawn row is an example


def test_the_command_line_prints_the_note_before_it_trains(tmp_path):
  import subprocess
  import sys

  from tests.conftest import REPO
  r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "run.py"), "--num_clients=6",
                      "--clients_per_round=3", "--batch_size=100000", "--rounds=1",
                      "--seeds=1", "--host_devices=1", f"--output_dir={tmp_path / 'out'}"],
                     capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-2000:]
  (line,) = [x for x in r.stderr.splitlines() if x.startswith("warning: ")]
  assert line.startswith("warning: --batch_size=100000 exceeds every client's examples")
