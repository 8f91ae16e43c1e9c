"""The engine: determinism, seeds as one program, 1 device equals 4."""

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import device_probe, toy_setup
from fedjax_bench import engine
from fedjax_bench.algorithms import fedavg

PROBE = Path(__file__).parents[1] / "scripts" / "engine_probe.py"


def _run(seeds, rounds=6, eval_every=3, grid=None, **hp):
  task, world = toy_setup(num_clients=8, cohort=3)
  hp = dict(dict(client_lr=0.2, server_lr=1.0, batch_size=4), **hp)
  return engine.run(lambda h: fedavg.build(task, world, h), task, hp, seeds=seeds,
                    rounds=rounds, eval_every=eval_every, grid=grid)


def test_same_seed_same_metrics_and_seeds_differ():
  a, b = _run([0, 1]), _run([0, 1])
  for k in a.history.metrics:
    np.testing.assert_array_equal(a.history.metrics[k], b.history.metrics[k])
  acc = a.history.metrics["train_loss"][-1, 0]
  assert acc[0] != acc[1]


def test_evaluations_at_zero_every_block_and_the_end():
  out = _run([0], rounds=7, eval_every=3)
  assert out.history.rounds.tolist() == [0, 3, 6, 7]
  assert out.history.metrics["test_accuracy"].shape == (4, 1, 1)
  assert np.isnan(out.history.metrics["client_loss"][0]).all()  # no round before round 0
  assert out.timing["compile_seconds"] > 0 and out.timing["rounds_per_second"] > 0


def test_seeds_together_equal_seeds_alone():
  together = _run([3, 5]).history.metrics["train_loss"][:, 0]
  alone = np.stack([_run([s]).history.metrics["train_loss"][:, 0, 0] for s in (3, 5)], 1)
  np.testing.assert_allclose(together, alone, rtol=1e-6)


def test_grid_points_equal_separate_runs():
  grid = [{"client_lr": 0.05}, {"client_lr": 0.3}]
  swept = _run([0], grid=grid).history.metrics["train_loss"][:, :, 0]
  for g, point in enumerate(grid):
    single = _run([0], **point).history.metrics["train_loss"][:, 0, 0]
    np.testing.assert_allclose(swept[:, g], single, rtol=1e-6)


def _probe(tmp_path, devices, seeds="0,1,2,3"):
  return device_probe(PROBE, tmp_path / f"d{devices}_{seeds}.npz", devices, seeds)


def test_one_device_equals_four(tmp_path):
  # One device vectorizes 4 runs; four devices run one each. XLA:CPU may compile a
  # different vector width to a different summation order inside the round scan,
  # so the last bit can differ (docs/design.md, "Devices and reproducibility"); nothing more may.
  one, four = _probe(tmp_path, 1), _probe(tmp_path, 4)
  assert int(one["devices"]) == 1 and int(four["devices"]) == 4
  keys = [k for k in one.files if k.startswith(("m_", "p_"))]
  assert keys
  for k in keys:
    np.testing.assert_allclose(one[k], four[k], rtol=1e-6, atol=1e-8, err_msg=k)


@pytest.mark.parametrize("devices,seeds", [(2, "0"), (4, "0,1")])
def test_cohort_split_over_devices_matches_one_device(tmp_path, devices, seeds):
  # Devices left over after sharding the runs split each cohort (a "clients" mesh axis).
  one, many = _probe(tmp_path, 1, seeds), _probe(tmp_path, devices, seeds)
  assert int(many["devices"]) == devices
  for k in [k for k in one.files if k.startswith(("m_", "p_"))]:
    np.testing.assert_allclose(one[k], many[k], rtol=1e-6, atol=1e-8, err_msg=k)

