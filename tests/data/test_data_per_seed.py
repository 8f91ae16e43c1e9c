"""--data_per_seed: every seed draws its own partition, generated data, availability phi and
asynchronous client rates, inside one vectorized program.

The reference for seed s is always an independent run: the same flags without
--data_per_seed, --seeds=s and --partition_seed = partition_seed + s (the documented data
seed), built and run on its own.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from tests.conftest import REPO, device_probe
from fedjax_bench import data, engine, experiment
from fedjax_bench.core import device_memory
from fedjax_bench.errors import UsageError

PROBE = Path(__file__).parents[1] / "scripts" / "per_seed_probe.py"
PARTITION_SEED = 3
SEEDS = [0, 2]


def _fake_mnist(name, data_dir=None, cache_dir=None):
  """A small stand-in for MNIST's arrays (uint8 28x28 images, 10 classes): the index-map
  path of fixed datasets without the download."""
  assert name == "mnist", name
  rng = np.random.default_rng(123)
  y = rng.integers(0, 10, 1500).astype(np.int32)
  centers = rng.integers(0, 200, (10, 28, 28, 1))
  x = np.clip(centers[y] + rng.integers(0, 56, (1500, 28, 28, 1)), 0, 255).astype(np.uint8)
  return {"train_x": x[:1200], "train_y": y[:1200], "test_x": x[1200:], "test_y": y[1200:],
          "num_classes": 10}


# name -> (flags, whether a seed run alone is bitwise the independent run).
CONFIGS = {
    # A fixed dataset: one pool, a Dirichlet partition per seed, phi per seed (sine
    # availability of data-correlated p_i), local steps from each seed's client sizes.
    "index_map": (dict(algo="fedavg", dataset="mnist", num_clients=12, partition="dirichlet",
                       alpha=0.3, availability="sine", availability_period=4,
                       local_epochs=1.0, batch_size=64, train_eval_examples=500), True),
    # Generated data: toyfl's examples and test set per seed; Markov availability with
    # per-seed phi; FedAWE (per-client state, scores the mean of the local models).
    "generated": (dict(algo="fedawe", dataset="toyfl", num_clients=12, alpha=0.3,
                       availability="markov", markov_a=0.3, local_steps=3, batch_size=16,
                       train_eval_examples=0), True),
    # Asynchronous client rates N(10, 5) per seed, on LEAF Synthetic (test sets of different
    # sizes per seed). Not bitwise alone: with shared rates XLA divides by a constant,
    # which it rewrites as a multiplication by the reciprocal (1 ulp per draw of the clock).
    "async_rates": (dict(algo="area", dataset="synthetic", num_clients=12,
                         async_rates="normal", local_steps=2, batch_size=10,
                         train_eval_examples=0, rounds=8), False),
    # Prioritized FL: each seed draws its shards, priority clients and priority test mix
    # (rows of the shared test set); FedALIGN admits per seed after the warm-up, under
    # partial participation of both groups.
    "prioritized": (dict(algo="fedalign", dataset="mnist", num_clients=12,
                         partition="shards_random", shard_size=20, num_priority=4,
                         warmup_rounds=1, align_epsilon=0.3, priority_fraction=0.5,
                         free_fraction=0.5, local_steps=2, batch_size=8, rounds=3), True),
    # A generator's roles and test sets (pooled per seed).
    "prioritized_generated": (dict(algo="fedalign", dataset="gaussmix_shards",
                                   num_clients=12, warmup_rounds=1, local_steps=2,
                                   batch_size=8, rounds=3), True),
    # local_model: each seed's own client (the authors' rule) and its test mix.
    "local_model": (dict(algo="local_model", dataset="mnist", num_clients=12,
                         partition="shards_random", shard_size=20, num_priority=4,
                         test_mix="local_client", local_steps=2, batch_size=8, rounds=3), True),
}


@pytest.fixture
def fake_mnist(monkeypatch):
  monkeypatch.setattr(data, "load_arrays", _fake_mnist)


def _cfg(name, **kw):
  flags, _ = CONFIGS[name]
  return {"model": "logreg", "client_lr": 0.1,
          "partition_seed": PARTITION_SEED, **flags, **kw}


def _run(cfg, seeds, rounds=2):
  exp = experiment.setup(cfg, seeds=seeds)
  out = engine.run(exp.build, exp.task, exp.hparams, seeds=seeds, rounds=rounds,
                   eval_every=rounds, run_data=exp.run_data)
  return out.history.metrics, jax.tree.leaves(out.state[0].params)


def _independent(name, seed, rounds=2):
  """Seed ``seed`` alone, without --data_per_seed, on its data seed."""
  return _run(_cfg(name, partition_seed=PARTITION_SEED + seed), [seed], rounds)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_each_seed_is_the_run_of_its_data_seed(name, fake_mnist):
  rounds = CONFIGS[name][0].get("rounds", 2)
  together, params = _run(_cfg(name, data_per_seed=True), SEEDS, rounds)
  independent = {seed: _independent(name, seed, rounds) for seed in SEEDS}
  for k, seed in enumerate(SEEDS):
    alone_metrics, alone_params = independent[seed]
    assert set(alone_metrics) == set(together)
    # The runs of one program are vmapped; XLA:CPU may sum in another order for another
    # batch shape (as in test_engine.test_seeds_together_equal_seeds_alone).
    for m, v in alone_metrics.items():
      np.testing.assert_allclose(together[m][:, 0, k], v[:, 0, 0], rtol=1e-6, atol=1e-7,
                                 err_msg=f"{name} seed {seed} {m}")
    for p, q in zip(params, alone_params):
      np.testing.assert_allclose(p[k], q[0], rtol=1e-6, atol=1e-7)
  # One seed alone in --data_per_seed (no vmap, no padding) is the independent run
  # bit for bit: the index maps read the same rows in the same order.
  seed = SEEDS[-1]
  mine, mine_params = _run(_cfg(name, data_per_seed=True), [seed], rounds)
  ref, ref_params = independent[seed]
  close = (np.testing.assert_array_equal if CONFIGS[name][1] else
           lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7))
  for m in ref:
    close(mine[m], ref[m])
  for p, q in zip(mine_params, ref_params):
    close(p, q)


def test_grid_points_repeat_the_seeds_data():
  """Run (g, s) of a grid uses seed s's data: grid point client_lr=0.1 equals the run
  without a grid (to the vmapped program's rounding, as in test_engine)."""
  cfg = _cfg("generated", data_per_seed=True)
  exp = experiment.setup(cfg, seeds=SEEDS)
  grid = [{"client_lr": 0.05}, {"client_lr": 0.1}]
  swept = engine.run(exp.build, exp.task, exp.hparams, seeds=SEEDS, rounds=2, eval_every=2,
                     grid=grid, run_data=exp.run_data).history.metrics
  plain, _ = _run(cfg, SEEDS)
  for m, v in plain.items():
    np.testing.assert_allclose(swept[m][:, 1], v[:, 0], rtol=1e-6, atol=1e-7, err_msg=m)
  assert not np.allclose(swept["train_loss"][-1, 0], swept["train_loss"][-1, 1])


def test_seeds_get_different_partitions_phi_and_rates(fake_mnist):
  exp = experiment.setup(_cfg("index_map", data_per_seed=True), seeds=[0, 1, 2])
  rd = exp.run_data
  assert rd.seed.tolist() == [0, 1, 2]
  counts, index = rd.task.counts, rd.task.index
  for a in range(3):
    for b in range(a + 1, 3):
      assert not np.array_equal(counts[a], counts[b])
      assert not np.array_equal(index[a], index[b])
      assert not np.array_equal(rd.world.participation["p"][a], rd.world.participation["p"][b])
  # Each seed's layout is a permutation of the training rows grouped by client (Dirichlet
  # keeps every example), and its partition is the one of its data seed.
  for k in range(3):
    assert np.array_equal(np.sort(index[k]), np.arange(1200))
    ref = data.load("mnist", num_clients=12, partition="dirichlet", alpha=0.3,
                    partition_seed=PARTITION_SEED + k)
    np.testing.assert_array_equal(counts[k], ref.train.counts)
  exp = experiment.setup(_cfg("async_rates", data_per_seed=True), seeds=[0, 1])
  rates = exp.run_data.world.rates
  assert rates.shape == (2, 12) and not np.array_equal(rates[0], rates[1])


@pytest.mark.parametrize("name", ["prioritized", "local_model"])
def test_seeds_get_their_own_priority_clients_and_test_sets(name, fake_mnist):
  seeds = [0, 1, 2]
  exp = experiment.setup(_cfg(name, data_per_seed=True), seeds=seeds)
  view, task = exp.run_data.task, exp.task
  assert view.priority.dtype == bool and view.priority.shape == (3, 12)
  assert len({tuple(np.flatnonzero(p)) for p in view.priority}) == 3
  for k, seed in enumerate(seeds):
    alone = experiment.setup(_cfg(name, partition_seed=PARTITION_SEED + seed), seeds=[seed])
    np.testing.assert_array_equal(view.priority[k], np.asarray(alone.task.priority))
    np.testing.assert_array_equal(view.aligned[k], np.asarray(alone.task.aligned))
    rows = view.test_index[k][:view.test_count[k]]
    np.testing.assert_array_equal(np.asarray(task.test_y)[rows], np.asarray(alone.task.test_y))
    if name == "local_model":
      assert view.local_client[k] == alone.hparams.local_client >= 0
      assert not view.priority[k][view.local_client[k]]


def test_data_seed_is_partition_seed_plus_seed():
  from fedjax_bench.data import per_seed as per_seed_lib
  assert [per_seed_lib.data_seed(5, s) for s in (0, 1, 7)] == [5, 6, 12]
  assert len({per_seed_lib.data_seed(3, s) for s in range(100)}) == 100


def test_seed_spread_is_wider_with_data_per_seed():
  """toyfl near convergence (full participation, zero init): with one partition and one
  data set for all seeds the seeds differ only in their minibatches, and the final test
  accuracy hardly varies; redrawn per seed (the FedAWE paper's procedure) it varies by
  about 1-2 pp (docs/papers/fedawe.md: the raw seed-to-seed std is about 2 pp)."""
  cfg = _cfg("generated", algo="fedavg", num_clients=10, alpha=1.0, participation="full",
             availability="off", zero_init=True, local_steps=5, batch_size=64)
  seeds = [0, 1, 2, 3]
  spread = {}
  for on in (False, True):
    metrics, _ = _run(dict(cfg, data_per_seed=on), seeds, rounds=30)
    spread[on] = float(np.std(metrics["test_accuracy"][-1, 0]))
  print(f"std of the final test accuracy over 4 seeds: shared data {100 * spread[False]:.2f} "
        f"pp, data per seed {100 * spread[True]:.2f} pp")
  assert spread[True] > 2 * spread[False]


def _probe(tmp_path, devices, seeds):
  return device_probe(PROBE, tmp_path / f"d{devices}.npz", devices, seeds)


def test_one_device_equals_four(tmp_path):
  one, four = _probe(tmp_path, 1, "0,1,2,3"), _probe(tmp_path, 4, "0,1,2,3")
  assert int(one["devices"]) == 1 and int(four["devices"]) == 4
  keys = [k for k in one.files if k.startswith(("m_", "p_"))]
  assert keys
  for k in keys:  # as test_engine.test_one_device_equals_four
    np.testing.assert_allclose(one[k], four[k], rtol=1e-6, atol=1e-8, err_msg=k)


def test_partition_json_records_every_seeds_partition(tmp_path):
  out = tmp_path / "run"
  r = subprocess.run(
      [sys.executable, str(REPO / "benchmarks" / "run.py"), "--dataset=toyfl",
       "--num_clients=10", "--alpha=0.3", "--data_per_seed", "--seeds=1,4",
       f"--partition_seed={PARTITION_SEED}", "--rounds=1", "--eval_every=1",
       "--clients_per_round=3", "--local_steps=1", f"--output_dir={out}"],
      capture_output=True, text=True, timeout=300, cwd=tmp_path,
      env=dict(os.environ, FEDJAX_BENCH_CACHE=str(tmp_path / "cache")))
  assert r.returncode == 0, r.stderr[-3000:]
  partition = json.loads((out / "partition.json").read_text())
  assert partition["data_per_seed"] is True
  assert [p["seed"] for p in partition["seeds"]] == [1, 4]
  for p in partition["seeds"]:
    assert p["data_seed"] == PARTITION_SEED + p["seed"]
    ref = data.load("toyfl", num_clients=10, alpha=0.3, partition_seed=p["data_seed"])
    assert p["client_sizes"] == ref.train.counts.tolist()
    assert p["label_histograms"] == ref.label_histograms().tolist()
  a, b = partition["seeds"]
  assert a["client_sizes"] != b["client_sizes"]
  config = json.loads((out / "config.json").read_text())
  assert [d["num_clients"] for d in config["dataset"]] == [10, 10]


def test_memory_estimate_counts_the_index_maps(fake_mnist):
  exp = experiment.setup(_cfg("index_map", data_per_seed=True), seeds=SEEDS)
  base = device_memory.estimate(exp.build, exp.task, exp.hparams, exp.world, 2, 1)
  with_maps = device_memory.estimate(exp.build, exp.task, exp.hparams, exp.world, 2, 1,
                              run_data=exp.run_data)
  n, rows, scored = 12, 1200, 500  # clients, layout rows, train_loss rows (int32 each)
  # seed; index, offsets, counts, owner, train_eval rows and count; steps; phi's p [n].
  per_run = 4 * (1 + rows + n + n + rows + scored + 1 + n + n)
  assert with_maps["state_per_run"] - base["state_per_run"] == per_run
  assert with_maps["data"] == base["data"] == 1200 * 784 + 1200 * 4 + 300 * 784 + 300 * 4 + 8 * n


def test_usage_errors(fake_mnist):
  with pytest.raises(UsageError, match="needs the run's seeds"):
    experiment.setup(_cfg("index_map", data_per_seed=True))
  with pytest.raises(UsageError, match="must be a free client of every seed"):
    experiment.setup(_cfg("local_model", data_per_seed=True, local_client=12,
                          test_mix="priority"), seeds=[0])
  exp = experiment.setup(_cfg("index_map", data_per_seed=True), seeds=SEEDS)
  with pytest.raises(UsageError, match="pass the experiment's run_data"):
    engine.run(exp.build, exp.task, exp.hparams, seeds=SEEDS, rounds=1, eval_every=1)
  with pytest.raises(UsageError, match="made for seeds"):
    engine.run(exp.build, exp.task, exp.hparams, seeds=[0, 1], rounds=1, eval_every=1,
               run_data=exp.run_data)
