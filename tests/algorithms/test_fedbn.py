"""FedBN (Li et al. 2021): Algorithm 1 written as a plain per-client loop on an MLP with batch
norm, round by round under partial participation (every layer averaged but the BatchNorm
layers, whose scale, bias and running statistics each client keeps, the others' untouched);
on a model without batch norm it is FedAvg bit for bit; a run scores each client's model."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import run_rounds, toy_setup
from fedjax_bench import api
from fedjax_bench.algorithms import fedavg, fedbn
from fedjax_bench.core import keys, local
from fedjax_bench.models.batch_norm import MOMENTUM

N, COHORT = 8, 3
BLOCK, OUT, BN = "DenseBN_0", "DenseOI_0", "BatchNorm_0"  # mlp_bn with one hidden layer


def _batch_stats(p, x, w):
  """The hidden BatchNorm's running statistics after a training-mode pass over the rows of
  ``x`` with w > 0 (flax's biased variance), by hand."""
  dense = p["params"][BLOCK]["DenseOI_0"]
  z = np.asarray(x) @ np.asarray(dense["kernel"]).T + np.asarray(dense["bias"])
  rows = z[np.asarray(w) > 0]
  run = p["batch_stats"][BLOCK][BN]
  return {"mean": MOMENTUM * np.asarray(run["mean"]) + (1 - MOMENTUM) * rows.mean(0),
          "var": MOMENTUM * np.asarray(run["var"]) + (1 - MOMENTUM) * rows.var(0)}


def _client(p, norm):
  """The model of a client whose BatchNorm layer is ``norm``: (scale, bias, mean, var)."""
  params = {BLOCK: {**p["params"][BLOCK], BN: {"scale": norm[0], "bias": norm[1]}},
            OUT: p["params"][OUT]}
  return {"params": params, "batch_stats": {BLOCK: {BN: {"mean": norm[2], "var": norm[3]}}}}


def _loop_round(task, world, hp, shared, norms, key, t):
  """Algorithm 1 with NumPy arrays: every sampled client trains its model (the shared layers,
  its BatchNorm) with SGD, its running statistics moving after each step; the layers but
  BatchNorm become the mean of the clients'; each client keeps its BatchNorm."""
  mask = np.asarray(world.participation.sample(keys.for_purpose(key, "participation"), t))
  grad = jax.jit(jax.grad(task.loss))
  train_key = keys.for_purpose(key, "local_train")
  norms = [np.array(a) for a in norms]
  models = []
  for i in np.flatnonzero(mask):
    client_key = jax.random.fold_in(train_key, int(i))
    k = keys.for_purpose(client_key, "local_sampling")
    noise = keys.for_purpose(client_key, "local_noise")
    off, cnt = int(task.offsets[i]), int(task.counts[i])
    p = _client(shared, [a[i] for a in norms])
    perm = jnp.arange(task.max_count, dtype=jnp.int32)
    for s in range(int(world.client_steps[i])):
      pos, w, perm = local.batch_positions(k, s, cnt, perm, batch_size=hp["batch_size"],
                                           sampling="shuffle")
      x, y = task.x[off + pos], task.y[off + pos]
      g = grad(p, x, y, w, jax.random.fold_in(noise, s))
      stats = _batch_stats(p, x, w)
      p = {"params": jax.tree.map(lambda a, b: np.asarray(a) - hp["client_lr"] * np.asarray(b),
                                  p["params"], g["params"]),
           "batch_stats": {BLOCK: {BN: stats}}}
    bn = p["params"][BLOCK][BN]
    for a, v in zip(norms, (bn["scale"], bn["bias"], stats["mean"], stats["var"])):
      a[i] = v
    models.append(p)
  mean = lambda *xs: sum(np.asarray(x) for x in xs) / len(xs)
  shared = {"params": {BLOCK: {**shared["params"][BLOCK], "DenseOI_0": jax.tree.map(
      mean, *[m["params"][BLOCK]["DenseOI_0"] for m in models])},
                       OUT: jax.tree.map(mean, *[m["params"][OUT] for m in models])},
            "batch_stats": shared["batch_stats"]}
  return shared, norms


def _norms(own):
  """(scale, bias, mean, var) rows [N, width] of the client states."""
  p, s = own["params"][BLOCK][BN], own["batch_stats"][BLOCK][BN]
  return [np.asarray(a) for a in (p["scale"], p["bias"], s["mean"], s["var"])]


def test_rounds_equal_algorithm_1():
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_steps=3, batch_size=4,
                          model="mlp_bn", hidden=6, holdout=0.2)
  hp = dict(client_lr=0.3, batch_size=4, local_steps=3)
  alg = fedbn.build(task, world, hp)
  server, own = alg.init(jax.random.PRNGKey(0))
  first = jax.tree.map(np.asarray, server.params)
  step = jax.jit(alg.round)
  shared, norms = server.params, _norms(own)
  seen = np.zeros(N, bool)
  for t in range(3):
    key = jax.random.PRNGKey(60 + t)
    shared, norms = _loop_round(task, world, hp, shared, norms, key, t)
    server, own, _ = step(server, own, key)
    close = lambda a, b: np.testing.assert_allclose(a, b, rtol=3e-5, atol=3e-6)
    jax.tree.map(close, server.params["params"][BLOCK]["DenseOI_0"],
                 shared["params"][BLOCK]["DenseOI_0"])
    jax.tree.map(close, server.params["params"][OUT], shared["params"][OUT])
    for got, want in zip(_norms(own), norms):
      close(got, want)
    # the server's BatchNorm is nobody's and stays as it started
    jax.tree.map(np.testing.assert_array_equal, server.params["batch_stats"], first["batch_stats"])
    jax.tree.map(np.testing.assert_array_equal, server.params["params"][BLOCK][BN],
                 first["params"][BLOCK][BN])
    seen |= np.asarray(world.participation.sample(keys.for_purpose(key, "participation"), t))
  moved = np.abs(_norms(own)[2]).sum(1)  # running means start at 0
  assert (~seen).any() and np.all(moved[~seen] == 0) and np.all(moved[seen] > 0)


def test_without_batch_norm_it_is_fedavg_bit_for_bit():
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_epochs=1.0, batch_size=4,
                          model="mlp", hidden=6, holdout=0.2)
  hp = dict(client_lr=0.3, batch_size=4, local_epochs=1.0, weighting="data_size")
  mine, own, m = run_rounds(fedbn.build(task, world, hp))
  reference, _, m_ref = run_rounds(fedavg.build(task, world, hp))
  jax.tree.map(np.testing.assert_array_equal, mine.params, reference.params)
  assert float(m["client_loss"]) == float(m_ref["client_loss"]) and jax.tree.leaves(own) == []


@pytest.mark.parametrize("algo", ["fedbn", "fedper"])
def test_a_run_of_a_batch_norm_model_scores_each_clients_model(algo):
  curves = api.run(algo=algo, dataset="synthetic", num_clients=10, rounds=4, eval_every=4,
                   seeds=[0], progress=False, holdout_fraction=0.25, clients_per_round=5,
                   host_devices=1, model="mlp_bn", mlp_hidden=(8,)).curves
  assert np.all(np.isfinite(curves["personal_test_accuracy"]))
  assert not np.allclose(curves["personal_test_accuracy"], curves["client_test_accuracy"])
