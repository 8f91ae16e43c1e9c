"""Ditto (Li et al. 2021): its global model is FedAvg's bit for bit, its personal models
follow a per-client loop transcription of Algorithm 1 round by round under partial
participation, and evaluation scores each client's own model."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import run_rounds, toy_setup
from fedjax_bench import api
from fedjax_bench.algorithms import ditto, fedavg
from fedjax_bench.core import keys, local
from fedjax_bench.errors import UsageError


def _personal_loop(task, world, hp, w, personal, key, t):
  """Each sampled client's personal model after its steps of SGD on
  F_k(v) + lambda/2 ||v - w^t||^2, minibatches from the "personal_train" key as its
  global steps draw theirs from the round key; the others unchanged."""
  mask = np.asarray(world.participation.sample(keys.for_purpose(key, "participation"), t))
  train_key = keys.for_purpose(keys.for_purpose(key, "personal_train"), "local_train")
  grad = jax.jit(jax.grad(task.loss))
  out = jax.tree.map(np.array, personal)
  for i in np.flatnonzero(mask):
    k = keys.for_purpose(jax.random.fold_in(train_key, int(i)), "local_sampling")
    off, cnt = int(task.offsets[i]), int(task.counts[i])
    v, perm = jax.tree.map(lambda a: a[i], personal), jnp.arange(task.max_count, dtype=jnp.int32)
    for s in range(int(world.client_steps[i])):
      pos, wt, perm = local.batch_positions(k, s, cnt, perm, batch_size=hp["batch_size"],
                                            sampling="shuffle")
      g = grad(v, task.x[off + pos], task.y[off + pos], wt)
      v = jax.tree.map(lambda a, b, x0: a - hp["client_lr"] * (b + hp["ditto_lambda"] * (a - x0)),
                       v, g, w)
    for o, a in zip(jax.tree.leaves(out), jax.tree.leaves(v)):
      o[i] = np.asarray(a)
  return out


def test_global_model_is_fedavg_and_personal_models_follow_algorithm_1():
  task, world = toy_setup(num_clients=8, cohort=3, local_steps=3, batch_size=4, holdout=0.3)
  hp = dict(client_lr=0.3, batch_size=4, local_steps=3, ditto_lambda=0.5,
            weighting="data_size")
  alg = ditto.build(task, world, hp)
  server, personal = alg.init(jax.random.PRNGKey(0))
  step = jax.jit(alg.round)
  expected = jax.tree.map(np.asarray, personal)
  for t in range(3):
    key = jax.random.PRNGKey(9 + t)
    expected = _personal_loop(task, world, hp, server.params, expected, key, t)
    server, personal, m = step(server, personal, key)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6),
                 personal, expected)
    assert np.isfinite(float(m["personal_loss"])) and float(m["personal_loss.count"]) == 3
  reference = run_rounds(fedavg.build(task, world, hp), first_key=9)[0].params
  jax.tree.map(np.testing.assert_array_equal, server.params, reference)
  touched = np.any(np.abs(np.asarray(jax.tree.leaves(personal)[0])
                          - np.asarray(jax.tree.leaves(alg.init(jax.random.PRNGKey(0))[1])[0]))
                   > 0, axis=tuple(range(1, jax.tree.leaves(personal)[0].ndim)))
  assert 0 < touched.sum() < 8  # the sampled clients' models moved, the others' did not


def test_a_run_scores_the_personal_models_and_lambda_pulls_them_to_the_global_one():
  common = dict(dataset="synthetic", num_clients=20, rounds=15, eval_every=15, seeds=[0],
                progress=False, holdout_fraction=0.25, clients_per_round=10, host_devices=1)
  near = api.run(algo="ditto", ditto_lambda=1e4, client_lr=1e-5, **common).curves
  assert {"personal_test_accuracy", "personal_test_accuracy_worst10"} <= set(near)
  # with a huge lambda (and a step small enough to stay stable) v_k stays at w^t
  np.testing.assert_allclose(near["personal_test_accuracy"][-1],
                             near["client_test_accuracy"][-1], atol=0.02)
  alone = api.run(algo="ditto", ditto_lambda=0.0, **common).curves
  assert not np.allclose(alone["personal_test_accuracy"][-1], alone["client_test_accuracy"][-1])


def test_needs_per_client_test_data():
  task, world = toy_setup(num_clients=4, cohort=2)
  with pytest.raises(UsageError, match="give --holdout_fraction"):
    ditto.build(task, world, {})
