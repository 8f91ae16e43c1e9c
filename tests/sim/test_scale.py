"""Populations past a mask per round: uniform_sparse participation, clients whose
data is generated on demand, and both on 1 device and 4."""

import itertools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from tests.conftest import device_probe
from fedjax_bench.data import stream
from fedjax_bench.sim import participation

PROBE = Path(__file__).parents[1] / "scripts" / "engine_probe.py"


def test_distinct_ids_are_distinct_sorted_and_uniform_over_subsets():
  draw = jax.jit(jax.vmap(lambda k: participation.distinct_ids(k, 6, 2)))
  ids = np.asarray(draw(jax.random.split(jax.random.PRNGKey(0), 6000)))
  assert np.all(ids[:, 0] < ids[:, 1]) and ids.min() >= 0 and ids.max() < 6
  counts = {pair: 0 for pair in itertools.combinations(range(6), 2)}
  for a, b in ids:
    counts[(int(a), int(b))] += 1
  # 15 subsets, 400 expected each; 5 standard deviations is about ±97.
  assert all(300 <= c <= 500 for c in counts.values()), counts
  big = np.asarray(participation.distinct_ids(jax.random.PRNGKey(1), 10_000_000, 1000))
  assert len(np.unique(big)) == 1000 and big.max() < 10_000_000


def test_uniform_sparse_cohorts_and_its_dense_fallback():
  for n, m in ((1000, 10), (10, 8)):
    p = participation.uniform_sparse(n, m)
    ids = np.asarray(p.draw_ids(jax.random.PRNGKey(3), 0))
    assert len(np.unique(ids)) == m and np.all(np.diff(ids) > 0) and p.cap == m
    assert int(p.sample(jax.random.PRNGKey(3), 0).sum()) == m


def test_stream_clients_read_the_same_examples_every_time():
  s = stream.leaf_stream(1000, seed=0, num_test=100, num_train_eval=100)
  assert s.counts.min() >= 50 and s.counts.max() <= 1000
  fetch = jax.jit(lambda k, pos: s.example_fn(k)(pos))
  pos = jnp.arange(20)
  x1, y1 = fetch(7, pos)
  x2, y2 = fetch(7, pos[::-1])
  np.testing.assert_array_equal(np.asarray(x1), np.asarray(x2)[::-1])
  np.testing.assert_array_equal(np.asarray(y1), np.asarray(y2)[::-1])
  x3, _ = fetch(8, pos)
  assert not np.allclose(x1, x3)
  assert x1.shape == (20, 60) and 0 <= int(y1.min()) and int(y1.max()) < 10
  assert s.test_x.shape == (100, 60) and s.train_eval_y.shape == (100,)


def _probe(tmp_path, devices, seeds):
  return device_probe(PROBE, tmp_path / f"stream_d{devices}_{seeds}.npz", devices, seeds, "4",
                      "stream")


def test_on_demand_population_on_one_device_equals_four(tmp_path):
  one, four = _probe(tmp_path, 1, "0,1"), _probe(tmp_path, 4, "0,1")
  assert int(four["devices"]) == 4
  assert np.all(one["m_num_active"][1:] == 8)
  for k in [k for k in one.files if k.startswith(("m_", "p_"))]:
    np.testing.assert_allclose(one[k], four[k], rtol=1e-6, atol=1e-8, err_msg=k)
