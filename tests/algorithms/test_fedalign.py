"""FedALIGN and the prioritized-FL baselines (docs/papers/fedalign.md).

Equivalences are exact (same keys, same shapes); the aggregation, the proximal gradient
and the authors' server update are checked against per-client loops written here.
"""

import dataclasses
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_bench import config as config_lib
from fedjax_bench import engine, experiment
from fedjax_bench.algorithms import fedalign
from fedjax_bench.core import keys
from fedjax_bench.data import partition, pfl_synthetic, priority

BASE = dict(dataset="gaussmix_shards", num_clients=12, rounds=8, eval_every=2, local_steps=3,
            batch_size=10, client_lr=0.1, zero_init=True)


def config(algo="fedalign", **kw) -> config_lib.Config:
  return config_lib.resolve({**BASE, "algo": algo, **kw})


def run(algo="fedalign", seeds=(0,), **kw):
  cfg = config(algo, **kw)
  exp = experiment.setup(cfg, seeds=list(seeds))
  out = engine.run(exp.build, exp.task, exp.hparams, seeds=list(seeds), rounds=cfg.eval.rounds,
                   eval_every=cfg.eval.eval_every)
  return out, exp


def params_of(out):
  return jax.tree.leaves(jax.device_get(out.state[0].params))


def same(a, b) -> bool:
  return all(np.array_equal(x, y) for x, y in zip(params_of(a), params_of(b)))


# --- equivalences -------------------------------------------------------------------------
def test_epsilon_zero_is_fedavg_on_the_priority_clients_bit_for_bit():
  a, _ = run("fedalign", align_epsilon=0.0, warmup_rounds=2)
  b, _ = run("fedavg_priority", warmup_rounds=2)
  assert same(a, b)
  assert np.all(a.history.metrics["n_admitted"][1:] == 0)


def test_epsilon_above_one_admits_everyone_like_fedavg_on_all_clients():
  a, _ = run("fedalign", align_epsilon=1.01, warmup_rounds=2)
  b, _ = run("fedavg_all_clients", warmup_rounds=2)
  assert same(a, b)
  assert a.history.metrics["n_admitted"][-1] == 10  # every free client


def test_all_methods_are_identical_during_the_warm_up_and_then_part():
  outs = [run(m, warmup_rounds=8)[0] for m in ("fedalign", "fedavg_priority",
                                                "fedavg_all_clients")]
  assert same(outs[0], outs[1]) and same(outs[0], outs[2])
  later = [run(m, warmup_rounds=2)[0] for m in ("fedavg_priority", "fedavg_all_clients")]
  assert not same(later[0], later[1])


def test_fedprox_names_default_to_mu_one_and_mu_zero_is_fedavg():
  prox, _ = run("fedprox_priority")
  plain, _ = run("fedavg_priority")
  zero, _ = run("fedprox_priority", prox_mu=0.0)
  assert not same(prox, plain)
  assert same(zero, plain)


# --- the round against per-client loops ---------------------------------------------------
def _full_batch_step(task, params, k, lr, mu=0.0, anchor=None):
  """One full-batch gradient step of client k's loss (+ μ/2 ‖v − anchor‖²)."""
  o, c = int(task.offsets[k]), int(task.counts[k])
  x, y, w = task.x[o:o + c], task.y[o:o + c], jnp.ones(c)
  g = jax.grad(lambda p: task.loss(p, x, y, w))(params)
  if mu:
    g = jax.tree.map(lambda gi, p, a: gi + mu * (p - a), g, params, anchor)
  return jax.tree.map(lambda p, gi: p - lr * gi, params, g)


def assert_close(out, expect, rtol=2e-5, atol=2e-6):
  got = jax.tree.map(lambda a: a[0], jax.device_get(out.state[0].params))
  assert jax.tree.structure(got) == jax.tree.structure(expect)
  for g, e in zip(jax.tree.leaves(got), jax.tree.leaves(expect)):
    np.testing.assert_allclose(g, np.asarray(e), rtol=rtol, atol=atol)


def _one_round(algo, dataset="synth_pfl", num_clients=14, **kw):
  """One round from the initial model: local steps of full batches (batch >= sizes)."""
  kw = dict(dataset=dataset, num_clients=num_clients, rounds=1, eval_every=1,
            batch_size=200, warmup_rounds=0, zero_init=False, **kw)
  out, exp = run(algo, **kw)
  server, _ = exp.build(exp.hparams).init(keys.init_key(keys.root(0)))
  return out, exp, server.params


def test_aggregation_is_the_papers_renormalized_p_weighted_average():
  out, exp, w0 = _one_round("fedalign", align_epsilon=1.01, local_steps=1,
                            synth_aligned=2)
  task = exp.task
  prio = np.asarray(task.priority)
  d = np.asarray(task.counts, np.float64)
  p = d / d[prio].sum()
  assert len(set(d[prio])) == 1 and d[~prio][0] != d[prio][0]  # unequal sizes
  models = [_full_batch_step(task, w0, k, 0.1) for k in range(task.num_clients)]
  num = jax.tree.map(lambda *m: sum(p[k] * np.asarray(m[k]) for k in range(len(p))), *models)
  expect = jax.tree.map(lambda a: a / (1 + p[~prio].sum()), num)  # everyone admitted
  assert_close(out, expect)


def test_proximal_term_has_its_gradient():
  out, exp, w0 = _one_round("fedprox_priority", prox_mu=2.0, local_steps=3, num_clients=11,
                           synth_aligned=1)
  task = exp.task
  prio = np.flatnonzero(np.asarray(task.priority))
  models = []
  for k in prio:
    v = w0
    for _ in range(3):
      v = _full_batch_step(task, v, k, 0.1, mu=2.0, anchor=w0)
    models.append(v)
  d = np.asarray(task.counts, np.float64)[prio]
  expect = jax.tree.map(lambda *m: np.tensordot(d / d.sum(), np.stack(m), 1), *models)
  assert_close(out, expect)


def test_local_model_trains_its_free_client_alone():
  out, exp, w0 = _one_round("local_model", local_steps=2, local_client=12, synth_aligned=2)
  v = w0
  for _ in range(2):
    v = _full_batch_step(exp.task, v, 12, 0.1)
  assert_close(out, v)


def test_authors_code_server_update_algebra():
  """`--compat=authors_code` (docs/papers/fedalign.md) with one full-batch local step:
  priority-only w + 3Δ̄_P; All w1 + 2A with the free clients starting at w1; FedALIGN (everyone accepted) w2 + A from w2."""
  tree = lambda f, *ts: jax.tree.map(f, *ts)
  for algo, eps in (("fedavg_priority", 0.2), ("fedavg_all_clients", 0.2), ("fedalign", 1.01)):
    out, exp, w = _one_round(algo, align_epsilon=eps, compat="authors_code", local_steps=1,
                            synth_aligned=2)
    task = exp.task
    prio = np.flatnonzero(np.asarray(task.priority))
    free = np.flatnonzero(~np.asarray(task.priority))
    delta = lambda v, k: tree(jnp.subtract, _full_batch_step(task, v, k, 0.1), v)
    mean = lambda ts: tree(lambda *a: sum(a) / len(a), *ts)
    dbar = mean([delta(w, k) for k in prio])
    if algo == "fedavg_priority":
      expect = tree(lambda a, b: a + 3 * b, w, dbar)
    else:
      w1 = tree(jnp.add, w, dbar)
      start, times = (w1, 2.0) if algo == "fedavg_all_clients" else (tree(jnp.add, w1, dbar), 1.0)
      a = mean([delta(w, k) for k in prio] + [delta(start, k) for k in free])
      expect = tree(lambda s0, d: s0 + times * d, start, a)
    assert_close(out, expect, rtol=1e-4, atol=1e-5)


# --- selection ----------------------------------------------------------------------------
def test_global_score_is_the_accuracy_on_the_priority_union_and_strictness():
  """Zero weights predict class 0 everywhere: g is the share of label 0 among the priority
  examples (1/4 with this seed) and s_k client k's (0, 1/2 or 1): at ε = 1/4 the gaps of
  exactly 1/4 are admitted only when non-strict."""
  kw = dict(align_epsilon=0.25, warmup_rounds=0, rounds=1, eval_every=1, partition_seed=3)
  out, exp = run("fedalign", align_inequality="nonstrict", **kw)
  task = exp.task
  y, prio = np.asarray(task.y), np.asarray(task.priority)
  owner = np.repeat(np.arange(task.num_clients), np.asarray(task.counts))
  share = np.array([np.mean(y[owner == k] == 0) for k in range(task.num_clients)])
  g = np.mean(y[np.isin(owner, np.flatnonzero(prio))] == 0)
  assert g == 0.25
  assert out.history.metrics["global_score"][-1, 0, 0] == g
  on_boundary = int(np.sum(~prio & (np.abs(share - g) == 0.25)))
  assert 0 < on_boundary < int(np.sum(~prio))
  assert out.history.metrics["n_admitted"][-1, 0, 0] == on_boundary
  strict, _ = run("fedalign", **kw)
  assert strict.history.metrics["n_admitted"][-1, 0, 0] == 0


def test_admissions_grow_with_epsilon_and_theta_stays_in_unit_interval():
  counts, thetas = [], []
  for eps in (0.0, 0.1, 0.3, 0.6, 1.01):
    out, _ = run("fedalign", align_epsilon=eps, warmup_rounds=6, rounds=7, eval_every=1)
    counts.append(out.history.metrics["n_admitted"][-1, 0, 0])
    thetas.append(out.history.metrics["theta_term"][-1, 0, 0])
  assert counts == sorted(counts) and counts[0] == 0 and counts[-1] == 10
  assert thetas[0] == 1.0 and all(0 < t <= 1 for t in thetas) and thetas == sorted(thetas)[::-1]


def test_selection_minibatch_scores_use_that_many_examples():
  from fedjax_bench.core import client_scores
  _, exp = run("fedalign", rounds=1, eval_every=1)
  task = exp.task
  params = jax.tree.map(jnp.zeros_like, exp.build(exp.hparams).init(
      jax.random.PRNGKey(0))[0].params)
  full_loss, full_acc = client_scores.per_client(task, params)
  mb_loss, mb_acc = client_scores.minibatch(task, params, jax.random.PRNGKey(1), 500)
  np.testing.assert_allclose(mb_acc, full_acc, atol=1e-6)  # 500 > size: all examples
  np.testing.assert_allclose(mb_loss, full_loss, rtol=1e-6)
  _, acc5 = client_scores.minibatch(task, params, jax.random.PRNGKey(1), 5)
  assert np.all(np.isclose(np.asarray(acc5) * 5, np.round(np.asarray(acc5) * 5)))


def test_nonincluded_clients_have_no_influence():
  a, exp = run("fedavg_priority")
  ds = experiment.load_dataset(config("fedavg_priority"))
  t = ds.train
  free = ~ds.priority
  y = t.y.copy()
  for k in np.flatnonzero(free):
    y[t.offsets[k]:t.offsets[k] + t.counts[k]] = (y[t.offsets[k]:t.offsets[k] + t.counts[k]]
                                                  + 3) % ds.num_classes
  ds2 = dataclasses.replace(ds, train=dataclasses.replace(t, y=y))
  cfg = config("fedavg_priority")
  exp2 = experiment.setup(cfg, dataset=ds2)
  b = engine.run(exp2.build, exp2.task, exp2.hparams, seeds=[0], rounds=cfg.eval.rounds,
                 eval_every=cfg.eval.eval_every)
  assert same(a, b)


# --- partial participation ----------------------------------------------------------------
def test_partial_participation_samples_both_groups_apart():
  out, _ = run("fedavg_all_clients", num_clients=30, num_priority=10, priority_fraction=0.3,
               free_fraction=0.5, warmup_rounds=0, eval_every=1, rounds=3)
  assert np.all(out.history.metrics["num_active"][1:] == 3 + 10)
  assert np.all(out.history.metrics["n_admitted"][1:] == 10)
  rep, _ = run("fedavg_priority", num_clients=30, num_priority=10, priority_fraction=0.3,
               priority_sampling="with_replacement", eval_every=1, rounds=3)
  assert np.all((1 <= rep.history.metrics["num_active"][1:])
                & (rep.history.metrics["num_active"][1:] <= 3))


# --- data ---------------------------------------------------------------------------------
def test_shards_random_is_the_authors_partition():
  labels = np.repeat(np.arange(10), 100)
  a = partition.shards_random(labels, 20, 2, 30, seed=3, num_shards=40)
  b = partition.shards_random(labels, 20, 2, 30, seed=3, num_shards=40)
  assert all(np.array_equal(x, y) for x, y in zip(a, b))
  assert all(len(c) == 60 for c in a)
  assert all(1 <= len(np.unique(labels[c])) <= 2 for c in a)


def test_priority_test_set_has_the_priority_label_mix():
  test_y = np.repeat(np.arange(10), 50)
  counts = np.array([30, 0, 10, 0, 0, 0, 0, 0, 0, 0])
  x, y = priority.resample_test(np.arange(500)[:, None], test_y, counts, seed=0)
  assert len(y) == 500 and set(np.unique(y)) == {0, 2}
  assert np.sum(y == 0) == 375 and np.sum(y == 2) == 125
  assert np.array_equal(test_y[x[:, 0]], y)


def test_alignment_tags():
  hist = np.array([[5, 5, 0], [0, 5, 0], [5, 0, 5], [0, 0, 5]])
  prio = np.array([True, False, False, False])
  assert priority.label_aligned(hist, prio).tolist() == [False, True, False, False]
  ds = pfl_synthetic.synth_pfl(0, num_priority=4, num_free=6, num_aligned=2, num_test=100)
  assert ds.priority.tolist() == [True] * 4 + [False] * 6
  assert ds.aligned.tolist() == [False] * 4 + [True] * 2 + [False] * 4
  skew = pfl_synthetic.synth_pfl(0, num_priority=4, num_free=10, noise="paper_skew",
                                 label_skew=0.5, random_skew=0.5)
  assert skew.train.num_clients == 14 and not skew.aligned[:4].any()


# --- command line -------------------------------------------------------------------------
@pytest.mark.parametrize("args,needle", [
    (["--algo=fedalign", "--participation=uniform"], "leave --participation at full"),
    (["--algo=fedalign", "--num_priority=12"], "--num_priority=12"),
    (["--algo=local_model", "--local_client=0", "--num_priority=1"], "free client"),
    (["--algo=fedalign", "--free_fraction=0"], "--free_fraction must be in (0, 1]"),
])
def test_bad_prioritized_flags_exit_2(tmp_path, args, needle):
  cmd = [sys.executable, "benchmarks/run.py", "--dataset=gaussmix_shards", "--num_clients=12",
         "--rounds=2", f"--output_dir={tmp_path}/out", *args]
  if "--num_priority=1" in args:  # make client 0 a priority client
    cmd.append("--partition_seed=0")
  p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
  assert p.returncode == 2, p.stderr
  assert needle in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_methods_list():
  assert set(fedalign.METHODS) == {"fedalign", "fedavg_priority", "fedavg_all_clients",
                                   "local_model"}


def test_record_admitted_names_free_clients_only():
  out, exp = run("fedalign", record_admitted=True, warmup_rounds=0, rounds=2, eval_every=1)
  names = sorted(k for k in out.history.metrics if k.startswith("admitted_"))
  free = np.flatnonzero(~np.asarray(exp.task.priority))
  assert names == [fedalign.admitted_name(int(k)) for k in free]
  total = sum(out.history.metrics[k][-1, 0, 0] for k in names)
  assert total == out.history.metrics["n_admitted"][-1, 0, 0]


def test_mnist_priority_task_scores_the_priority_clients(monkeypatch):
  from tests.conftest import shared_tfds_dir
  if shared_tfds_dir() is None:
    pytest.skip("real MNIST (../shared/tfds) not found")
  monkeypatch.setenv("TFDS_DATA_DIR", str(shared_tfds_dir()))
  cfg = config("fedalign", dataset="mnist", partition="shards_random", num_clients=20,
               shard_size=50, num_priority=2, zero_init=False)
  exp = experiment.setup(cfg)
  ds, task = exp.dataset, exp.task
  prio = np.flatnonzero(ds.priority)
  labels = set(np.concatenate([ds.train.client(int(k))[1] for k in prio]).tolist())
  assert set(np.unique(np.asarray(task.test_y)).tolist()) == labels
  assert 10000 - len(labels) < len(task.test_y) <= 10000
  assert task.train_eval_y.shape[0] == 2 * 2 * 50
  assert ds.aligned[prio].sum() == 0 and ds.aligned.sum() >= 1
