"""IFCA (Ghosh, Chung, Yin & Ramchandran 2020): Algorithm 1 (option II) written as a plain
per-client loop, round by round under partial participation; k = 1 is FedAvg bit for bit;
on a planted mixture of two client groups, k = 2 recovers the groups exactly."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import client_sampling_key, loop_sgd, one_line, run_rounds, toy_setup
from fedjax_bench import api, config, models
from fedjax_bench.algorithms import fedavg, ifca
from fedjax_bench.core import keys
from fedjax_bench.data import holdout as holdout_lib
from fedjax_bench.data.federated import Dataset, FederatedData
from fedjax_bench.errors import UsageError
from fedjax_bench.sim import participation, world as world_lib
from fedjax_bench.task.build import make_task

N, COHORT = 8, 4


def planted(*, num_clients=N, per_client=40, dim=4, classes=3, seed=3):
  """Gaussian classes; the odd clients' labels are shifted by one (y -> y + 1 mod C): two
  groups that no single model fits. Returns (task over a 25% holdout, group of each
  client)."""
  rng = np.random.default_rng(seed)
  centers = rng.normal(size=(classes, dim)) * 3
  n = num_clients * per_client
  owner = np.repeat(np.arange(num_clients), per_client)
  group = np.arange(num_clients) % 2
  y = rng.integers(0, classes, n)
  x = (centers[y] + rng.normal(size=(n, dim))).astype(np.float32)
  y = np.where(group[owner] == 1, (y + 1) % classes, y)
  data = FederatedData.from_partition(x, y, np.split(np.arange(n), num_clients))
  ds = holdout_lib.split(Dataset("planted", data, x[:20], y[:20].astype(np.int32), classes,
                                 (dim,), False), 0.25, 0)
  return make_task(ds, models.make("logreg", num_classes=classes, is_image=False)), group


def planted_setup(cohort=COHORT, local_steps=5, batch_size=8, seed=3):
  task, group = planted(seed=seed)
  steps = world_lib.client_steps(task.counts, local_steps=local_steps, local_epochs=0.0,
                                 batch_size=batch_size)
  return task, world_lib.make(participation.uniform(N, cohort), steps), group


def _loop_round(task, world, hp, thetas, key, t):
  """Algorithm 1, option II, with NumPy arrays: each sampled client takes the cluster of
  lowest loss on all of its data (np.argmin: ties to the lowest), runs local SGD from it,
  and each chosen cluster becomes the (weighted) average of its clients' models."""
  mask = np.asarray(world.participation.sample(keys.for_purpose(key, "participation"), t))
  loss, grad = jax.jit(task.loss), jax.jit(jax.grad(task.loss))
  train_key = keys.for_purpose(key, "local_train")
  members = [[] for _ in thetas]
  for i in np.flatnonzero(mask):
    off, cnt = int(task.offsets[i]), int(task.counts[i])
    xi, yi = task.x[off:off + cnt], task.y[off:off + cnt]
    j = int(np.argmin([float(loss(th, xi, yi, jnp.ones(cnt))) for th in thetas]))
    v = loop_sgd(grad, task, thetas[j], client_sampling_key(train_key, i), i,
                 int(world.client_steps[i]), batch_size=hp["batch_size"], lr=hp["client_lr"])
    weight = float(cnt) if hp.get("weighting") == "data_size" else 1.0
    members[j].append((weight, v))
  new = []
  for theta, chosen in zip(thetas, members):
    if not chosen:
      new.append(theta)
      continue
    total = sum(w for w, _ in chosen)
    new.append(jax.tree.map(lambda *vs: sum(w * np.asarray(a, np.float64)
                                            for (w, _), a in zip(chosen, vs)) / total,
                            *[v for _, v in chosen]))
  return new, np.asarray([len(c) for c in members]), mask


@pytest.mark.parametrize("clusters,weighting", [(3, "uniform"), (2, "data_size")])
def test_rounds_equal_algorithm_1_option_ii(clusters, weighting):
  task, world, _ = planted_setup()
  hp = dict(ifca_clusters=clusters, client_lr=0.3, batch_size=8, local_steps=5,
            weighting=weighting)
  alg = ifca.build(task, world, hp)
  server, clients = alg.init(jax.random.PRNGKey(0))
  step = jax.jit(alg.round)
  thetas = [jax.tree.map(lambda a: np.asarray(a[j]), server.params) for j in range(clusters)]
  counts_seen = []
  for t in range(4):
    key = jax.random.PRNGKey(40 + t)
    before = server.params
    thetas, counts, mask = _loop_round(task, world, hp, thetas, key, t)
    server, clients, m = step(server, clients, key)
    for j in range(clusters):
      jax.tree.map(lambda a, b: np.testing.assert_allclose(a[j], b, rtol=1e-4, atol=1e-5),
                   server.params, thetas[j])
      assert float(m[f"cluster{j}_clients"]) == counts[j]
      if counts[j] == 0:  # a cluster nobody chose keeps its model, bit for bit
        jax.tree.map(lambda a, b: np.testing.assert_array_equal(a[j], b[j]), server.params,
                     before)
    counts_seen.append(counts)
    assert mask.sum() == COHORT < N  # partial participation
  counts_seen = np.asarray(counts_seen)
  # The test exercises what it claims: clients split over clusters in some round, and (with
  # 3 clusters for 2 groups) some round left a cluster without clients.
  assert ((counts_seen > 0).sum(axis=1) > 1).any(), counts_seen
  assert (counts_seen == 0).any() or clusters == 2, counts_seen


def test_one_cluster_is_fedavg_bit_for_bit():
  task, world = toy_setup(num_clients=8, cohort=3, local_steps=3, batch_size=4, holdout=0.3)
  for hp in (dict(client_lr=0.3, batch_size=4, local_steps=3),
             dict(client_lr=0.3, batch_size=4, local_steps=3, weighting="data_size",
                  server_opt="momentum", server_momentum=0.5)):
    alg = ifca.build(task, world, {**hp, "ifca_clusters": 1})
    ours, clients, m = run_rounds(alg)
    theirs, _, m_avg = run_rounds(fedavg.build(task, world, hp))
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(a[0], b), ours.params,
                 theirs.params)
    assert float(m["client_loss"]) == float(m_avg["client_loss"])
    assert float(m["cluster0_clients"]) == 3
    jax.tree.map(np.testing.assert_array_equal, alg.eval_params(ours, clients), theirs.params)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, np.broadcast_to(b, a.shape)),
                 alg.personal_params(ours, clients), theirs.params)


def test_two_clusters_recover_the_planted_groups():
  task, world, group = planted_setup()

  def trained(clusters):
    alg = ifca.build(task, world, dict(ifca_clusters=clusters, client_lr=0.3, batch_size=8,
                                       local_steps=5))
    server, clients, _ = run_rounds(alg, rounds=10, first_key=100)
    scores = task.evaluate_clients(alg.personal_params(server, clients), "personal",
                                   per_client=True)
    return server, float(scores["personal_accuracy"])

  server, accuracy = trained(2)
  picks = np.asarray(ifca.assign(task, server.params))
  # Exactly the planted groups (cluster names are arbitrary: either labelling).
  assert (picks == group).all() or (picks == 1 - group).all(), (picks, group)
  assert accuracy == 1.0
  # One model cannot fit both labellings: FedAvg's clients score far lower.
  assert trained(1)[1] < 0.75


def test_bad_settings_are_one_line_errors():
  task, world = toy_setup(num_clients=4, cohort=2)
  with pytest.raises(UsageError, match="give --holdout_fraction") as e:
    ifca.build(task, world, {})
  one_line(e)
  with pytest.raises(UsageError) as e:
    config.resolve(algo="ifca", ifca_clusters=0)
  assert "ifca_clusters" in one_line(e)
  # A model that starts at zero starts every cluster at the same point.
  zero = make_task(holdout_lib.split(_small_dataset(), 0.25, 0),
                   models.make("logreg", num_classes=3, is_image=False, zero_init=True))
  with pytest.raises(UsageError) as e:
    ifca.build(zero, world, {"ifca_clusters": 2})
  assert "zero" in one_line(e) and "valid:" in one_line(e)
  ifca.build(zero, world, {"ifca_clusters": 1})  # one cluster is FedAvg: nothing to separate


def _small_dataset():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(40, 4)).astype(np.float32)
  y = rng.integers(0, 3, 40)
  return Dataset("small", FederatedData.from_partition(x, y, np.split(np.arange(40), 4)),
                 x[:8], y[:8].astype(np.int32), 3, (4,), False)


def test_a_run_reports_each_clients_pick_and_the_cluster_counts():
  curves = api.run(algo="ifca", dataset="synthetic", num_clients=20, rounds=4, eval_every=2,
                   seeds=[0], progress=False, holdout_fraction=0.25, clients_per_round=6,
                   ifca_clusters=2, host_devices=1).curves
  assert {"personal_test_accuracy", "personal_test_accuracy_worst10", "cluster0_clients",
          "cluster1_clients"} <= set(curves)
  total = np.asarray(curves["cluster0_clients"][1:]) + np.asarray(curves["cluster1_clients"][1:])
  np.testing.assert_array_equal(total, 6.0)
