"""Checkpoints within a time budget: a due save is skipped while it would cost more than
`Checkpointing.max_share` of the time since the last one; resuming stays bit-identical."""

import time

import jax
import numpy as np

from tests.conftest import toy_setup
import fedjax_bench
from fedjax_bench import engine, settings
from fedjax_bench.config.run_settings import RunSettings
from fedjax_bench.algorithms import fedavg

ROUNDS = 12
SAVE_SECONDS = 0.1  # each save made slow (on_save sleeps); a block of one round takes ms


def _run(checkpoint=None):
  task, world = toy_setup(num_clients=8, cohort=3)
  hp = dict(client_lr=0.2, server_lr=1.0, batch_size=4)
  return engine.run(lambda h: fedavg.build(task, world, h), task, hp, seeds=[0, 1],
                    rounds=ROUNDS, eval_every=1, checkpoint=checkpoint)


def _slow_checkpoint(path, saves, **kw):
  def on_save(history):
    saves.append(int(history.rounds[-1]))
    time.sleep(SAVE_SECONDS)
  return engine.Checkpointing(str(path), every=1, on_save=on_save, **kw)


def test_slow_saves_are_skipped_and_resume_is_bit_identical(tmp_path):
  saves = []
  _run(_slow_checkpoint(tmp_path / "a.npz", saves, max_share=0.02))
  # 12 saves due; after the first (>= 0.1 s), the next is affordable only 5 s later.
  assert 1 <= len(saves) <= 2 and saves[0] == 1, saves

  whole = _run()
  resumed = _run(engine.Checkpointing(str(tmp_path / "a.npz"), resume=True))
  for k, v in whole.history.metrics.items():
    np.testing.assert_array_equal(resumed.history.metrics[k], v, err_msg=k)
  for a, b in zip(jax.tree.leaves(whole.state), jax.tree.leaves(resumed.state)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_without_a_budget_every_due_save_is_written(tmp_path):
  saves = []
  _run(_slow_checkpoint(tmp_path / "b.npz", saves, max_share=0))
  assert saves == list(range(1, ROUNDS + 1))


def test_the_budget_is_the_declared_setting_and_reaches_the_engine(tmp_path, monkeypatch):
  declared = settings.specs(RunSettings)["checkpoint_max_share"].default
  assert 0 < declared <= 0.05  # the bound: saves cost under 5% of a run by default
  assert engine.Checkpointing("x").max_share == declared
  seen = []
  real = engine.run

  def spy(*args, checkpoint=None, **kw):
    seen.append(checkpoint.max_share)
    return real(*args, checkpoint=checkpoint, **kw)

  monkeypatch.setattr(engine, "run", spy)
  common = dict(algo="fedavg", dataset="synthetic", num_clients=8, clients_per_round=2,
                rounds=2, eval_every=1, seeds=[0], progress=False, host_devices=1)
  fedjax_bench.run(**common, output_dir=str(tmp_path / "a"))
  fedjax_bench.run(**common, output_dir=str(tmp_path / "b"), checkpoint_max_share=0.5)
  assert seen == [declared, 0.5]
