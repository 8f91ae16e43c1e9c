"""The personalization evaluation protocol: the statistics over clients (mean, std, worst
and best 10%) against NumPy, a `Personal` (shared model and per-client parts) scored as the
whole per-client models, and --finetune_steps against a per-client loop of SGD steps; the
fine-tuning leaves the training and the run's fingerprint as they were."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import client_sampling_key, loop_sgd, one_line, toy_setup
from fedjax_bench import api
from fedjax_bench import config as config_lib
from fedjax_bench.core import keys, parts
from fedjax_bench.core.types import Personal
from fedjax_bench.engine import run_dir
from fedjax_bench.errors import UsageError
from fedjax_bench.models import layers
from fedjax_bench.task.evaluation import _over_clients
from fedjax_bench.task.task import Finetune


def _numpy_stats(acc, has):
  acc = np.asarray(acc, np.float64)[np.asarray(has)]
  k = max(int(np.ceil(0.1 * len(acc))), 1)
  ranked = np.sort(acc)
  return {"mean": acc.mean(), "std": acc.std(), "worst10": ranked[:k].mean(),
          "best10": ranked[-k:].mean()}


@pytest.mark.parametrize("n,empty", [(7, []), (23, [0, 5, 22]), (40, [3])])
def test_statistics_over_clients_match_numpy(n, empty):
  rng = np.random.default_rng(n)
  acc = rng.choice([0.0, 0.25, 0.5, 0.6, 0.75, 1.0], size=n).astype(np.float32)
  acc[empty] = rng.uniform(size=len(empty))  # clients without test data: ignored
  has = np.ones(n, bool)
  has[empty] = False
  tail = max(int(np.ceil(0.1 * has.sum())), 1)  # ClientTest.tail, as client_test_table
  got = jax.jit(lambda a, h: _over_clients(a, h, tail, "p"))(acc, has)
  want = _numpy_stats(acc, has)
  np.testing.assert_allclose(float(got["p_accuracy"]), want["mean"], rtol=1e-6)
  np.testing.assert_allclose(float(got["p_accuracy_std"]), want["std"], rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(float(got["p_accuracy_worst10"]), want["worst10"], rtol=1e-6)
  np.testing.assert_allclose(float(got["p_accuracy_best10"]), want["best10"], rtol=1e-6)
  assert set(got) == {"p_accuracy", "p_accuracy_std", "p_accuracy_worst10", "p_accuracy_best10"}


def test_a_personal_of_parts_scores_as_the_whole_per_client_models():
  task, _ = toy_setup(num_clients=9, model="mlp", hidden=6, holdout=0.4)
  shared = task.init_params(jax.random.PRNGKey(0))
  mask = layers.head_mask(shared, layers.layers(task.model, task.x[:1]), 1)
  rng = np.random.default_rng(1)
  rows = jax.tree.map(lambda a: jnp.asarray(rng.normal(size=(9,) + a.shape), jnp.float32),
                      parts.select(shared, mask))
  whole = parts.broadcast_merge(shared, rows)
  got = jax.jit(lambda s, r: task.evaluate_clients(Personal(s, r), "x", per_client=True))(
      shared, rows)
  want = jax.jit(lambda w: task.evaluate_clients(w, "x", per_client=True))(whole)
  for name in got:
    assert float(got[name]) == float(want[name]), name
  # and the heads matter: another client's head gives other accuracies
  swapped = jax.tree.map(lambda a: a[::-1], rows)
  other = task.evaluate_clients(Personal(shared, swapped), "x", per_client=True)
  assert float(other["x_accuracy"]) != float(got["x_accuracy"])


def _finetuned_loop(task, params, key, steps, lr, batch):
  """Each client's accuracy on its own test rows after ``steps`` SGD steps from ``params``
  on its training data, minibatches drawn as local training draws them from client i's key
  fold_in(key, i): a plain loop over clients and steps, softmax regression in NumPy."""
  grad = jax.jit(jax.grad(task.loss))
  ct = task.client_test
  accs, has = [], []
  for i in range(task.num_clients):
    p = loop_sgd(grad, task, jax.tree.map(np.asarray, params), client_sampling_key(key, i), i,
                 steps, batch_size=batch, lr=lr)
    rows = np.asarray(ct.rows[i])[np.asarray(ct.valid[i])]
    x, y = np.asarray(ct.x)[rows], np.asarray(ct.y)[rows]
    kernel, bias = p["DenseOI_0"]["kernel"], p["DenseOI_0"]["bias"]
    accs.append(np.mean(np.argmax(x @ kernel.T + bias, 1) == y) if len(rows) else 0.0)
    has.append(len(rows) > 0)
  return np.asarray(accs), np.asarray(has)


def test_finetuning_matches_a_per_client_loop():
  sizes = [3, 9, 12, 7, 15, 20, 6, 11, 4, 8, 10, 13]
  task, _ = toy_setup(num_clients=12, sizes=sizes, holdout=0.3)
  task = dataclasses.replace(task, finetune=Finetune(steps=4, batch_size=3, lr=0.0))
  params = task.init_params(jax.random.PRNGKey(2))
  key = keys.for_purpose(keys.eval_key(keys.root(0), 5), "finetune")
  got = jax.jit(lambda p: task.evaluate_finetuned(p, key, 0.5))(params)
  acc, has = _finetuned_loop(task, params, key, steps=4, lr=0.5, batch=3)
  want = _numpy_stats(acc, has)
  for stat, name in [("mean", ""), ("std", "_std"), ("worst10", "_worst10"),
                     ("best10", "_best10")]:
    np.testing.assert_allclose(float(got["finetuned_test_accuracy" + name]), want[stat],
                               rtol=1e-5, atol=1e-6)
  untuned = task.evaluate_clients(params)
  assert float(got["finetuned_test_accuracy"]) > float(untuned["client_test_accuracy"])


COMMON = dict(dataset="synthetic", num_clients=10, rounds=4, eval_every=2, seeds=[0],
              progress=False, holdout_fraction=0.25, host_devices=1, clients_per_round=4)


def test_finetuning_leaves_the_training_and_the_fingerprint_as_they_were():
  plain = api.run(algo="fedavg", **COMMON)
  tuned = api.run(algo="fedavg", finetune_steps=3, finetune_lr=0.05, **COMMON)
  for name, curve in plain.curves.items():
    np.testing.assert_array_equal(tuned.curves[name], curve, err_msg=name)
  assert {"finetuned_test_accuracy", "finetuned_test_accuracy_std",
          "finetuned_test_accuracy_worst10", "finetuned_test_accuracy_best10"} <= set(tuned.curves)
  assert not np.allclose(tuned.curves["finetuned_test_accuracy"],
                         tuned.curves["client_test_accuracy"])
  # at the default (off) neither setting is in the fingerprint: recorded runs keep their keys
  fp = lambda **s: run_dir.run_fingerprint(config_lib.resolve({"algo": "fedavg", **s}), [0], [{}])
  assert "finetune_steps" not in fp() and "finetune_lr" not in fp()
  assert fp(finetune_steps=2)["finetune_steps"] == 2


def test_finetuning_needs_each_clients_test_data_and_a_step_count():
  with pytest.raises(UsageError) as e:
    api.run(algo="fedavg", **{**COMMON, "holdout_fraction": 0.0}, finetune_steps=2)
  assert "give --holdout_fraction" in one_line(e)
  with pytest.raises(UsageError, match="finetune_lr"):
    config_lib.resolve({"algo": "fedavg", "finetune_lr": 0.1})  # no effect without steps
