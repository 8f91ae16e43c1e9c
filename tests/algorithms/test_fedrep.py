"""FedRep (Collins et al. 2021): Algorithm 1 written as a plain per-client loop, round by
round under partial participation (head steps with the body fixed, then body steps with the
new head fixed; only the body averaged; the others' heads untouched); with no head it is
FedAvg bit for bit; models with batch norm are refused."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import run_rounds, toy_setup
from fedjax_bench.algorithms import fedavg, fedrep
from fedjax_bench.core import keys, local
from fedjax_bench.errors import UsageError

N, COHORT = 8, 3
BODY, HEAD = "DenseOI_0", "DenseOI_1"  # the MLP's hidden and output layers (--head_layers=1)


def _sgd(task, p, part, i, key, steps, hp, grad):
  """``steps`` SGD steps of client i on the ``part`` (BODY or HEAD) of p, the other part
  fixed, minibatches from the client's "local_sampling" key under ``key``."""
  k = keys.for_purpose(jax.random.fold_in(key, int(i)), "local_sampling")
  off, cnt = int(task.offsets[i]), int(task.counts[i])
  perm = jnp.arange(task.max_count, dtype=jnp.int32)
  for s in range(steps):
    pos, w, perm = local.batch_positions(k, s, cnt, perm, batch_size=hp["batch_size"],
                                         sampling="shuffle")
    g = grad(p, task.x[off + pos], task.y[off + pos], w)
    p = {**p, part: jax.tree.map(lambda a, b: np.asarray(a) - hp["client_lr"] * np.asarray(b),
                                 p[part], g[part])}
  return p


def _loop_round(task, world, hp, body, heads, key, t):
  """Algorithm 1 with NumPy arrays: tau_h head steps (body phi^t), then the client's local
  steps on the body (its new head), phi^{t+1} = the mean of the clients' bodies."""
  mask = np.asarray(world.participation.sample(keys.for_purpose(key, "participation"), t))
  grad = jax.jit(jax.grad(task.loss))
  head_key = keys.for_purpose(keys.for_purpose(key, "head_train"), "local_train")
  body_key = keys.for_purpose(key, "local_train")
  heads = jax.tree.map(np.array, heads)
  bodies = []
  for i in np.flatnonzero(mask):
    p = {BODY: body, HEAD: jax.tree.map(lambda a: a[i], heads)}
    p = _sgd(task, p, HEAD, i, head_key, hp["head_steps"], hp, grad)
    p = _sgd(task, p, BODY, i, body_key, int(world.client_steps[i]), hp, grad)
    for name in ("kernel", "bias"):
      heads[name][i] = p[HEAD][name]
    bodies.append(p[BODY])
  return jax.tree.map(lambda *b: sum(b) / len(b), *bodies), heads


def test_rounds_equal_algorithm_1():
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_steps=2, batch_size=4,
                          model="mlp", hidden=6, holdout=0.2)
  hp = dict(client_lr=0.3, batch_size=4, local_steps=2, head_steps=4)
  alg = fedrep.build(task, world, hp)
  server, heads_jax = alg.init(jax.random.PRNGKey(0))
  first_head = jax.tree.map(np.asarray, server.params[HEAD])
  step = jax.jit(alg.round)
  body, heads = server.params[BODY], heads_jax[HEAD]
  seen = np.zeros(N, bool)
  for t in range(3):
    key = jax.random.PRNGKey(50 + t)
    body, heads = _loop_round(task, world, hp, body, heads, key, t)
    server, heads_jax, m = step(server, heads_jax, key)
    close = lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
    jax.tree.map(close, server.params[BODY], body)
    jax.tree.map(close, heads_jax[HEAD], heads)
    jax.tree.map(np.testing.assert_array_equal, server.params[HEAD], first_head)
    seen |= np.asarray(world.participation.sample(keys.for_purpose(key, "participation"), t))
    assert float(m["head_loss.count"]) == COHORT and np.isfinite(float(m["head_loss"]))
  moved = np.abs(np.asarray(heads_jax[HEAD]["kernel"]) - first_head["kernel"]).reshape(N, -1)
  assert (~seen).any() and np.all(moved[~seen].sum(1) == 0) and np.all(moved[seen].sum(1) > 0)


def test_head_epochs_follow_each_clients_examples():
  task, world = toy_setup(num_clients=N, cohort=COHORT, model="mlp", hidden=4, holdout=0.2)
  hp = fedrep.Hparams(batch_size=4, head_epochs=2.0)
  np.testing.assert_array_equal(fedrep.head_world(task, world, hp).client_steps,
                                2 * np.ceil(np.asarray(task.counts) / 4))


def test_no_head_is_fedavg_bit_for_bit():
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_epochs=1.0, batch_size=4,
                          model="mlp", hidden=6, holdout=0.2)
  hp = dict(client_lr=0.3, batch_size=4, local_epochs=1.0, weighting="data_size")
  mine, _, m = run_rounds(fedrep.build(task, world, {**hp, "head_layers": 0}))
  reference, _, m_ref = run_rounds(fedavg.build(task, world, hp))
  jax.tree.map(np.testing.assert_array_equal, mine.params, reference.params)
  assert float(m["client_loss"]) == float(m_ref["client_loss"]) and "head_loss" not in m


def test_refuses_batch_norm_models():
  task, world = toy_setup(num_clients=4, model="mlp_bn", hidden=4, holdout=0.3)
  with pytest.raises(UsageError, match="without batch norm"):
    fedrep.build(task, world, {})
