"""FedProx (Li et al. 2020): a per-client loop transcription of Algorithm 2 with the
paper's stragglers, round by round under partial participation, and its reduction to
FedAvg."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import run_rounds, toy_setup
from fedjax_bench.algorithms import fedavg, fedprox
from fedjax_bench.core import keys, local
from fedjax_bench.errors import UsageError


def _loop_round(task, world, hp, params, key, t):
  """One round written plainly: Python loops over the cohort and the local steps, the
  gradient of F_k plus mu (w - w_t), stragglers drawn from the round's "stragglers" key
  (all but round((1 - f) |S_t|) of S_t, the smallest uniforms kept; e uniform in
  {1, ..., E - 1}; each client's key split in two for the two draws). Returns (new params, the cohort's mean data loss, #stragglers)."""
  mask = np.asarray(world.participation.sample(keys.for_purpose(key, "participation"), t))
  active = np.flatnonzero(mask)
  sk = keys.for_purpose(key, "stragglers")
  pair = {int(i): jax.random.split(jax.random.fold_in(sk, int(i))) for i in active}
  u = {i: float(jax.random.uniform(p[0])) for i, p in pair.items()}
  kept = int(np.round((1 - hp["straggler_fraction"]) * len(active)))
  late = set(sorted(active.tolist(), key=lambda i: u[i])[kept:])
  train_key = keys.for_purpose(key, "local_train")
  grad = jax.jit(jax.grad(task.loss))
  loss = jax.jit(task.loss)
  deltas, weights, losses = [], [], []
  for i in active:
    budget = int(world.client_steps[i])
    steps = budget
    if i in late:
      if hp["straggler_policy"] == "drop":
        continue
      units = int(hp["local_epochs"]) or budget
      e = int(jax.random.randint(pair[int(i)][1], (), 1, units))
      steps = budget * e // units
    k = keys.for_purpose(jax.random.fold_in(train_key, int(i)), "local_sampling")
    off, cnt = int(task.offsets[i]), int(task.counts[i])
    p, perm, seen = params, jnp.arange(task.max_count, dtype=jnp.int32), []
    for s in range(steps):
      pos, w, perm = local.batch_positions(k, s, cnt, perm, batch_size=hp["batch_size"],
                                           sampling="shuffle")
      xb, yb = task.x[off + pos], task.y[off + pos]
      seen.append(float(loss(p, xb, yb, w, None)))
      g = grad(p, xb, yb, w)
      p = jax.tree.map(lambda a, b, x0: a - hp["client_lr"] * (b + hp["prox_mu"] * (a - x0)),
                       p, g, params)
    deltas.append(jax.tree.map(lambda a, b: np.asarray(a) - np.asarray(b), p, params))
    weights.append(float(cnt) if hp.get("weighting") == "data_size" else 1.0)
    losses.append(np.mean(seen))
  if not deltas:
    return params, 0.0, len(late)
  weights = np.asarray(weights) / np.sum(weights)
  mean = jax.tree.map(lambda *ds: sum(w * d for w, d in zip(weights, ds)), *deltas)
  new = jax.tree.map(lambda a, d: np.asarray(a) + d, params, mean)
  return new, float(np.mean(losses)), len(late)


@pytest.mark.parametrize("policy,local_steps,local_epochs,mu,weighting", [
    ("keep", 0, 3.0, 0.5, None),         # whole epochs: stragglers run 1 or 2 of 3
    ("drop", 0, 3.0, 0.5, "data_size"),  # the paper's FedAvg baseline, with a proximal term
    ("keep", 4, 0.0, 1.0, "data_size"),  # --local_steps: stragglers run 1 to 3 steps
])
def test_rounds_equal_the_per_client_loop_of_algorithm_2(policy, local_steps, local_epochs, mu,
                                                         weighting):
  """None: the default weighting, uniform (every algorithm's); data_size, the paper's."""
  task, world = toy_setup(num_clients=8, cohort=5, local_steps=local_steps or 3,
                          local_epochs=local_epochs, batch_size=4)
  hp = dict(client_lr=0.2, batch_size=4, prox_mu=mu, straggler_fraction=0.5,
            straggler_policy=policy, local_steps=local_steps or 3, local_epochs=local_epochs,
            **({"weighting": weighting} if weighting else {}))
  alg = fedprox.build(task, world, hp)
  server, clients = alg.init(jax.random.PRNGKey(0))
  round_fn = jax.jit(alg.round)
  params, lates = server.params, []
  for t in range(3):
    key = jax.random.PRNGKey(50 + t)
    expected, loss, late = _loop_round(task, world, hp, params, key, t)
    server, clients, m = round_fn(server, clients, key)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6),
                 server.params, expected)
    np.testing.assert_allclose(float(m["client_loss"]), loss, rtol=1e-5)
    assert float(m["num_stragglers"]) == late
    assert float(m["num_active"]) == 5 - (late if policy == "drop" else 0)
    params = server.params
    lates.append(late)
  assert lates == [3, 3, 3]  # all but round(0.5 * 5) = 2 (half to even, as Python's round)


def test_without_proximal_term_and_stragglers_it_is_fedavg_bit_for_bit():
  task, world = toy_setup(num_clients=8, cohort=3, local_epochs=2.0, batch_size=4)
  # Both on XLA's loop: FedProx's own objective never takes the fused kernel that FedAvg's
  # logistic regression would (tests/core/test_logreg_sgd.py pins the two to rounding).
  hp = dict(client_lr=0.3, batch_size=4, local_epochs=2.0, weighting="data_size",
            fused_logreg=False)
  runs = []
  for alg in (fedprox.build(task, world, {**hp, "prox_mu": 0.0}), fedavg.build(task, world, hp)):
    runs.append(run_rounds(alg, first_key=7)[0].params)
  jax.tree.map(np.testing.assert_array_equal, *runs)


def test_stragglers_partial_work_is_kept_or_dropped():
  task, world = toy_setup(num_clients=8, cohort=4, local_epochs=4.0, batch_size=4)
  hp = dict(client_lr=0.3, batch_size=4, local_epochs=4.0, prox_mu=0.0)
  out = {}
  for name, extra in (("none", {}), ("keep", {"straggler_fraction": 0.5}),
                      ("drop", {"straggler_fraction": 0.5, "straggler_policy": "drop"})):
    alg = fedprox.build(task, world, {**hp, **extra})
    server, clients = alg.init(jax.random.PRNGKey(0))
    server, _, m = jax.jit(alg.round)(server, clients, jax.random.PRNGKey(3))
    out[name] = (server.params, m)
  assert float(out["keep"][1]["num_active"]) == 4 and float(out["drop"][1]["num_active"]) == 2
  flat = {k: np.concatenate([np.ravel(a) for a in jax.tree.leaves(v[0])]) for k, v in out.items()}
  assert not np.allclose(flat["none"], flat["keep"]) and not np.allclose(flat["keep"], flat["drop"])


@pytest.mark.parametrize("extra,match", [
    (dict(local_steps=1), "needs --local_steps of at least 2"),
    (dict(local_epochs=1.5), "needs a whole --local_epochs of at least 2"),
    (dict(local_epochs=1.0), "needs a whole --local_epochs of at least 2"),
])
def test_stragglers_need_a_budget_to_cut(extra, match):
  task, world = toy_setup(num_clients=4, cohort=2)
  with pytest.raises(UsageError, match=match):
    fedprox.build(task, world, dict(straggler_fraction=0.5, **extra))


def test_aggregating_algorithms_share_one_weighting_setting_and_default():
  """FedAvg against FedProx (or SCAFFOLD, FedDyn, Ditto) at their defaults changes only
  the algorithm: one --weighting declaration, uniform unless given; the prioritized-FL
  algorithms take their objective's data-size weights from their paper's preset."""
  from fedjax_bench import algorithms, config, settings
  readers = [a for a, alg in algorithms.ALGORITHMS.items()
             if "weighting" in settings.specs(alg.Hparams)]
  assert {"fedavg", "fedprox", "scaffold", "feddyn", "ditto"} <= set(readers)
  for a in readers:
    assert settings.specs(algorithms.get(a).Hparams)["weighting"] == \
        settings.specs(fedavg.Hparams)["weighting"], a
    expected = ("data_size" if algorithms.get(a).kind == algorithms.PRIORITIZED
                else "uniform")
    assert config.resolve({"algo": a}).flat()["weighting"] == expected, a
    assert config.resolve({"algo": a, "weighting": "uniform"}).flat()["weighting"] == \
        "uniform", a
