"""FedPer (Arivazhagan et al. 2019): Algorithm 1 written as a plain per-client loop, round
by round under partial participation (the body averaged, each sampled client's head kept,
the others' heads untouched); with no head it is FedAvg bit for bit; a run scores every
client's own model on its own test data."""

import jax
import numpy as np
import pytest

from tests.conftest import client_sampling_key, loop_sgd, run_rounds, toy_setup
from fedjax_bench import api
from fedjax_bench.algorithms import fedavg, fedper
from fedjax_bench.core import keys
from fedjax_bench.errors import UsageError

N, COHORT = 8, 3
BODY, HEAD = "DenseOI_0", "DenseOI_1"  # the MLP's hidden and output layers (--head_layers=1)


def _loop_round(task, world, hp, body, heads, key, t):
  """Algorithm 1 with NumPy arrays: each sampled client runs SGD on (W_B, W_P,k) jointly
  from (W_B^t, its head), keeps its head and returns its body; W_B moves by the weighted
  mean of the body updates."""
  mask = np.asarray(world.participation.sample(keys.for_purpose(key, "participation"), t))
  grad = jax.jit(jax.grad(task.loss))
  train_key = keys.for_purpose(key, "local_train")
  heads = jax.tree.map(np.array, heads)
  updates, weights = [], []
  for i in np.flatnonzero(mask):
    p = loop_sgd(grad, task, {BODY: body, HEAD: jax.tree.map(lambda a: a[i], heads)},
                 client_sampling_key(train_key, i), i, int(world.client_steps[i]),
                 batch_size=hp["batch_size"], lr=hp["client_lr"])
    for name in ("kernel", "bias"):
      heads[name][i] = p[HEAD][name]
    updates.append(jax.tree.map(np.subtract, p[BODY], body))
    weights.append(float(task.counts[i]) if hp.get("weighting") == "data_size" else 1.0)
  mean = jax.tree.map(lambda *u: sum(w * x for w, x in zip(weights, u)) / sum(weights),
                      *updates)
  return jax.tree.map(lambda a, d: np.asarray(a) + d, body, mean), heads


@pytest.mark.parametrize("weighting", ["uniform", "data_size"])
def test_rounds_equal_algorithm_1(weighting):
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_steps=3, batch_size=4,
                          model="mlp", hidden=6, holdout=0.2)
  hp = dict(client_lr=0.3, batch_size=4, local_steps=3, weighting=weighting)
  alg = fedper.build(task, world, hp)
  server, own = alg.init(jax.random.PRNGKey(0))
  first_head = jax.tree.map(np.asarray, server.params[HEAD])
  step = jax.jit(alg.round)
  body, heads = server.params[BODY], own[HEAD]
  seen = np.zeros(N, bool)
  for t in range(3):
    key = jax.random.PRNGKey(40 + t)
    body, heads = _loop_round(task, world, hp, body, heads, key, t)
    server, own, m = step(server, own, key)
    close = lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
    jax.tree.map(close, server.params[BODY], body)
    jax.tree.map(close, own[HEAD], heads)
    assert jax.tree.leaves(own[BODY]) == []  # only the head is kept per client
    jax.tree.map(np.testing.assert_array_equal, server.params[HEAD], first_head)
    seen |= np.asarray(world.participation.sample(keys.for_purpose(key, "participation"), t))
    assert float(m["client_loss.count"]) == COHORT
  moved = np.abs(np.asarray(own[HEAD]["kernel"]) - first_head["kernel"]).reshape(N, -1).sum(1)
  assert (~seen).any() and np.all(moved[~seen] == 0) and np.all(moved[seen] > 0)


def test_no_head_is_fedavg_bit_for_bit():
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_epochs=1.0, batch_size=4,
                          model="mlp", hidden=6, holdout=0.2)
  hp = dict(client_lr=0.3, batch_size=4, local_epochs=1.0, weighting="data_size",
            server_opt="momentum", server_momentum=0.5)
  mine, _, m = run_rounds(fedper.build(task, world, {**hp, "head_layers": 0}))
  reference, _, m_ref = run_rounds(fedavg.build(task, world, hp))
  jax.tree.map(np.testing.assert_array_equal, mine.params, reference.params)
  assert float(m["client_loss"]) == float(m_ref["client_loss"])


def test_a_run_scores_each_clients_own_model():
  common = dict(dataset="synthetic", num_clients=12, rounds=6, eval_every=6, seeds=[0],
                progress=False, holdout_fraction=0.25, clients_per_round=6, host_devices=1,
                model="mlp", mlp_hidden=(8,))
  curves = api.run(algo="fedper", **common).curves
  assert {"personal_test_accuracy", "personal_test_accuracy_std",
          "personal_test_accuracy_worst10", "personal_test_accuracy_best10"} <= set(curves)
  # the server's model has the initial head: each client's own head does better
  assert curves["personal_test_accuracy"][-1] > curves["client_test_accuracy"][-1] + 0.1
  with pytest.raises(UsageError, match="give --holdout_fraction"):
    api.run(algo="fedper", **{**common, "holdout_fraction": 0.0})
