"""Where a paper's protocol differs from our general default, the paper's setting is what its
flags and defaults give: AREA's x0 = 0, FedALIGN's 120 shards, the authors' dropped partial
minibatch."""

import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import shared_tfds_dir
from fedjax_bench import cli, experiment
from fedjax_bench.core import local
from fedjax_bench.sim import world as world_lib

REPO = Path(__file__).resolve().parents[2]


def _positions(count, steps, batch_size, sampling, seed=0):
  def step(perm, s):
    pos, w, perm = local.batch_positions(jax.random.PRNGKey(seed), s, count, perm,
                                         batch_size=batch_size, sampling=sampling)
    return perm, (pos, w)

  _, (pos, w) = jax.lax.scan(step, jnp.arange(max(count, 1), dtype=jnp.int32),
                             jnp.arange(steps))
  return np.asarray(pos), np.asarray(w)


def test_drop_last_epochs_are_full_batches_of_distinct_examples():
  """Shards of 40 at B = 32 (the FedALIGN case): every step is 32 examples, never the
  8-example remainder, and each step starts a fresh permutation."""
  pos, w = _positions(40, steps=6, batch_size=32, sampling="shuffle_drop_last")
  assert np.all(w == 1)
  for p in pos:
    assert len(set(p.tolist())) == 32 and p.min() >= 0 and p.max() < 40
  assert len({tuple(sorted(p.tolist())) for p in pos}) > 1  # fresh subsets per epoch
  _, w_kept = _positions(40, steps=2, batch_size=32, sampling="shuffle")
  assert w_kept[1].sum() == 8  # the default keeps the partial batch


def test_drop_last_epochs_cover_distinct_examples_across_batches():
  pos, w = _positions(10, steps=2, batch_size=4, sampling="shuffle_drop_last")  # 2 batches
  assert np.all(w == 1)
  assert len(set(pos.reshape(-1).tolist())) == 8  # one epoch: 8 distinct, 2 left out


def test_drop_last_with_fewer_examples_than_a_batch_uses_them_all():
  pos, w = _positions(3, steps=2, batch_size=8, sampling="shuffle_drop_last")
  assert w.sum(axis=1).tolist() == [3, 3]
  assert sorted(pos[0][w[0] > 0].tolist()) == [0, 1, 2]


def test_drop_last_epoch_counts_local_steps_by_full_batches():
  counts = np.array([3, 32, 40, 64, 100])
  drop = world_lib.client_steps(counts, local_steps=0, local_epochs=2, batch_size=32,
                                drop_last=True)
  keep = world_lib.client_steps(counts, local_steps=0, local_epochs=2, batch_size=32)
  assert drop.tolist() == [2, 2, 2, 4, 6] and keep.tolist() == [2, 2, 4, 4, 8]


def _flags(argv):
  """The configuration ``argv`` resolves to; the global flags are left unparsed after (the
  reference curves of other tests need the defaults)."""
  cli.FLAGS.unparse_flags()
  try:
    cli.parse_argv(["x", *argv])
    return cli.resolve_flags()[0]
  finally:
    cli.FLAGS.unparse_flags()


@pytest.mark.skipif(shared_tfds_dir() is None, reason="needs the real MNIST")
def test_area_on_mnist_starts_at_zero_with_gap_ln10_minus_fstar(monkeypatch):
  """x0 = 0 (the AREA paper states none; docs/papers/area.md), so f(x0) = ln 10 (uniform
  softmax, no penalty)."""
  monkeypatch.setenv("TFDS_DATA_DIR", str(shared_tfds_dir()))
  cfg = _flags(["--algo=area", "--dataset=mnist", "--num_clients=4", "--optimality_gap=false"])
  assert cfg.model.zero_init and not cfg.model.logreg_bias
  exp = experiment.setup(cfg)
  server, clients = exp.build(exp.hparams).init(jax.random.PRNGKey(0))
  assert all(float(jnp.max(jnp.abs(a))) == 0 for a in jax.tree.leaves(server.params))
  loss = float(exp.task.evaluate(server.params)["train_loss"])
  assert loss == pytest.approx(math.log(10), rel=1e-6)


def test_paper_flagfiles_of_authors_who_drop_the_partial_batch_drop_it():
  """FedALIGN's runs, declared in benchmarks/papers/fedalign.py, are checked by
  tests/claims/test_claims_fedalign.py."""
  configs = sorted((REPO / "benchmarks/configs").glob("fedawe/paper_*.flags"))
  assert len(configs) >= 12
  for path in configs:
    assert "--sampling=shuffle_drop_last" in path.read_text().splitlines(), path.name
