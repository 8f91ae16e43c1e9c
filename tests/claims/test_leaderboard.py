"""The leaderboard's tuning protocol and table, on constructed records (no runs)."""

import numpy as np
import pytest

from fedjax_bench.claims import leaderboard, paper as paper_lib
from fedjax_bench.claims.leaderboard import Method, Task


def _task(**kw):
  return Task("toy", "A toy task", dict(dataset="synthetic"),
              (Method("fedavg", "FedAvg", dict(algo="fedavg"), {"client_lr": (0.1, 0.2)}),
               Method("better", "Better", dict(algo="fedprox"), {"prox_mu": (0.0, 1.0)})),
              target=0.5, grid_points=2, seeds=(0, 1, 2, 3, 4), tuning_seeds=(7, 8, 9), **kw)


def _record(name, grid, seeds, accuracy):
  """accuracy: [G, S] final accuracies; the curve rises linearly to them over 5 rounds."""
  acc = np.asarray(accuracy, np.float64)
  rounds = [0, 1, 2, 3, 4]
  curve = [(r / 4) * acc for r in rounds]  # [E, G, S]
  return {"name": name, "seeds": list(seeds), "grid": grid, "rounds": rounds,
          "metrics": {"test_accuracy": [c.tolist() for c in curve]},
          "seconds": 10.0, "cpu_seconds": 15.0}


def _records(task, report_gap):
  """Tuning seeds prefer FedAvg's point 0 and Better's point 1; on the reported seeds the
  other points are far better, which must not matter (no tuning on reported seeds)."""
  fa, be = task.run_methods
  g_fa = [{"client_lr": 0.1}, {"client_lr": 0.2}]
  g_be = [{"prox_mu": 0.0}, {"prox_mu": 1.0}]
  base = np.array([0.60, 0.61, 0.59, 0.62, 0.58])
  return {
      task.run_name(fa, True): _record("", g_fa, task.tuning_seeds, [[0.7] * 3, [0.6] * 3]),
      task.run_name(be, True): _record("", g_be, task.tuning_seeds, [[0.5] * 3, [0.8] * 3]),
      task.run_name(fa): _record("", g_fa, task.seeds, [base, [0.99] * 5]),
      task.run_name(be): _record("", g_be, task.seeds, [[0.99] * 5, base + report_gap]),
  }


def test_each_method_is_read_on_the_reported_seeds_at_the_point_its_tuning_seeds_picked():
  task = _task()
  records = _records(task, np.array([0.05, 0.06, 0.04, 0.05, 0.05]))
  fa, be = task.methods
  np.testing.assert_allclose(task.final(fa).values(records),
                             100 * np.array([0.60, 0.61, 0.59, 0.62, 0.58]))
  np.testing.assert_allclose(task.final(be).values(records),
                             100 * np.array([0.65, 0.67, 0.63, 0.67, 0.63]))
  # Rounds to 50%: FedAvg's curve reaches 0.6 * r/4 >= 0.5 at r = 4; Better's 0.65 at 4.
  np.testing.assert_array_equal(task.rounds_to_target(fa).values(records), [4] * 5)


@pytest.mark.parametrize("gap, word", [((0.05, 0.06, 0.04, 0.05, 0.05), "better"),
                                       ((-0.05, -0.06, -0.04, -0.05, -0.05), "worse"),
                                       ((0.05, -0.06, 0.04, -0.05, 0.01), "not resolved")])
def test_the_comparison_with_fedavg_is_paired_by_seed_and_worded_by_the_rules(gap, word):
  task = _task()
  records = _records(task, np.array(gap))
  p = leaderboard.board("lb", "Board", (task,))
  text = paper_lib.render(p, records)["LEADERBOARD.md"]
  row = next(line for line in text.splitlines() if line.startswith("| Better |"))
  assert f"**{word}**" in row
  # The paired difference of the means, in points, with its interval.
  assert f"{100 * np.mean(gap):+.2f}".replace("-", "−") in row
  assert "prox_mu 1" in row  # the tuned point


def test_every_method_gets_the_same_number_of_grid_points_and_no_reported_seed_is_tuned_on():
  with pytest.raises(ValueError, match="every method is tuned over as many"):
    Task("t", "T", {}, (Method("a", "A", grid={"client_lr": (0.1, 0.2, 0.3)}),), target=0.5,
         grid_points=2)
  with pytest.raises(ValueError, match="tuned on"):
    Task("t", "T", {}, (Method("a", "A", grid={"client_lr": (0.1, 0.2)}),), target=0.5,
         grid_points=2, seeds=(0, 1), tuning_seeds=(1, 2))


def test_a_pending_task_is_declared_in_the_table_and_runs_nothing():
  run, pend = _task(), _task(pending="too slow here")
  pend = Task("big", "A big task", pend.settings, pend.methods, target=0.5, grid_points=2,
              pending="too slow here")
  p = leaderboard.board("lb", "Board", (run, pend))
  assert {r.name for r in p.runs} == {r.name for r in run.runs()}
  text = paper_lib.render(p, _records(run, np.full(5, 0.05)))["LEADERBOARD.md"]
  assert "Without a table: too slow here" in text
  assert p.pending == {"big": pend.runs()}  # made on request: claims.py lb --pending=big
  assert "`python benchmarks/claims.py lb --pending=big` makes those missing" in text


def test_a_method_not_run_at_this_scale_has_no_runs_or_row_and_is_named_under_the_table():
  fa, be = _task().methods
  slow = Method("slow", "Slow", dict(algo="mime"), {"client_lr": (0.1, 0.2)})
  task = _task()
  task = Task("toy", "A toy task", task.settings, (fa, be, slow), target=0.5, grid_points=2,
              seeds=task.seeds, tuning_seeds=task.tuning_seeds,
              not_run={"slow": "a pass over all data a round"},
              paper_scale={"rounds": 100})
  names = {r.name for r in task.runs()}
  assert names == {"toy-fedavg", "toy-fedavg-tune", "toy-better", "toy-better-tune"}
  assert {"toy-slow", "toy-slow-tune"} <= {r.name for r in task.runs(task.paper_scale)}
  assert [c.id for c in task.claims()] == ["toy-better"]
  p = leaderboard.board("lb", "Board", (task,))
  text = paper_lib.render(p, _records(task, np.full(5, 0.05)))["LEADERBOARD.md"]
  assert "| Slow |" not in text and "2 methods, each swept" in text
  assert "Declared, not run at this scale: Slow: a pass over all data a round" in text
  with pytest.raises(ValueError, match="does not have"):
    Task("t", "T", {}, (fa,), target=0.5, grid_points=2, not_run={"nope": "x"})
  with pytest.raises(ValueError, match="baseline"):
    Task("t", "T", {}, (fa, be), target=0.5, grid_points=2, not_run={"fedavg": "x"})


def test_the_declared_leaderboard_runs_are_valid_commands():
  from benchmarks.papers import leaderboard as declared
  from fedjax_bench.claims import store
  for task in declared.TASKS:
    for r in task.runs() + task.runs(task.paper_scale):
      store.config_key(r)  # resolves the settings and checks the sweep as the CLI would


def test_no_declared_leaderboard_run_takes_a_papers_preset():
  """A paper's preset fills in the settings a run does not give (FedSoftMax on MNIST: its
  paper's 2 local epochs and learning-rate decay), which would set a method's row apart from
  FedAvg's by more than the algorithm: every value a preset would set must be given."""
  from benchmarks.papers import leaderboard as declared
  from fedjax_bench.claims import store
  for task in declared.TASKS:
    for r in task.runs() + task.runs(task.paper_scale):
      cfg, _, _ = store.prepare(r)
      taken = {n: v for n, v in cfg.preset if n not in r.sweep}
      assert not taken, (r.name, taken)
