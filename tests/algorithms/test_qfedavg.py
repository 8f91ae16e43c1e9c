"""q-FedAvg (Li et al. 2020): Algorithm 2 written as a plain per-client loop, round by
round under partial participation, and q = 0 against FedAvg's step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import run_rounds, toy_setup
from fedjax_bench.algorithms import fedavg, qfedavg
from fedjax_bench.core import keys, local

N, COHORT = 8, 3


def _full_loss(task, params, i):
  off, cnt = int(task.offsets[i]), int(task.counts[i])
  out = task.logits(params, task.x[off:off + cnt])
  return float(np.mean(np.asarray(task.pointwise_loss(out, task.y[off:off + cnt]))))


def _loop_round(task, world, hp, w0, key, t):
  mask = np.asarray(world.participation.sample(keys.for_purpose(key, "participation"), t))
  grad = jax.jit(jax.grad(task.loss))
  train_key = keys.for_purpose(key, "local_train")
  eta, q = hp["client_lr"], hp["qffl_q"]
  lip = 1.0 / eta
  flat = lambda tree: np.concatenate([np.ravel(np.asarray(a)) for a in jax.tree.leaves(tree)])
  num, den = 0.0, 0.0
  for i in np.flatnonzero(mask):
    f = _full_loss(task, w0, i)
    k = keys.for_purpose(jax.random.fold_in(train_key, int(i)), "local_sampling")
    off, cnt, steps = int(task.offsets[i]), int(task.counts[i]), int(world.client_steps[i])
    w, perm = w0, jnp.arange(task.max_count, dtype=jnp.int32)
    for s in range(steps):
      pos, wb, perm = local.batch_positions(k, s, cnt, perm, batch_size=hp["batch_size"],
                                            sampling="shuffle")
      g = grad(w, task.x[off + pos], task.y[off + pos], wb)
      w = jax.tree.map(lambda a, b: np.asarray(a) - eta * np.asarray(b), w, g)
    dw = lip * (flat(w0) - flat(w))
    num = num + f ** q * dw
    den += q * f ** (q - 1) * dw @ dw + lip * f ** q
  new = flat(w0) - num / den
  sizes = [np.asarray(a).size for a in jax.tree.leaves(w0)]
  parts = np.split(new, np.cumsum(sizes)[:-1])
  return jax.tree.unflatten(jax.tree.structure(w0), [
      p.reshape(np.shape(a)) for p, a in zip(parts, jax.tree.leaves(w0))])


@pytest.mark.parametrize("q,model", [(1.0, "logreg"), (5.0, "mlp"), (0.5, "logreg")])
def test_rounds_equal_algorithm_2(q, model):
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_epochs=1.0, batch_size=4,
                          model=model)
  hp = dict(client_lr=0.2, batch_size=4, local_epochs=1.0, qffl_q=q)
  alg = qfedavg.build(task, world, hp)
  server, clients = alg.init(jax.random.PRNGKey(0))
  step = jax.jit(alg.round)
  params = server.params
  for t in range(3):
    key = jax.random.PRNGKey(60 + t)
    expected = _loop_round(task, world, hp, params, key, t)
    server, clients, _ = step(server, clients, key)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5),
                 server.params, expected)
    params = server.params


def test_q_zero_is_fedavg_bit_for_bit():
  """q = 0: Delta_k / h_k = (w^t - wbar_k) / |S_t|, FedAvg's step with uniform weights: the
  same streamed sum and mean, bit for bit. Swept (traced) q = 0 multiplies that mean by
  L sum_k F_k^0 / h, which is 1 up to float rounding."""
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_epochs=1.0, batch_size=4)
  hp = dict(client_lr=0.3, batch_size=4, local_epochs=1.0)
  out = []
  for alg in (qfedavg.build(task, world, {**hp, "qffl_q": 0.0}),
              qfedavg.build(task, world, {**hp, "qffl_q": jnp.float32(0.0)}),
              fedavg.build(task, world, hp)):
    out.append(run_rounds(alg)[0].params)
  jax.tree.map(np.testing.assert_array_equal, out[0], out[2])
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-7),
               out[1], out[2])


def test_padding_rows_and_clients_of_several_chunks():
  """Bernoulli availability (a cohort slab with padding rows, whose scored F is 0) at
  q = 0.5, and a client of more examples than one scoring chunk
  (`client_scores.COHORT_CHUNK`): still Algorithm 2's loop."""
  from fedjax_bench.core import client_scores
  from fedjax_bench.sim import participation
  sizes = [7, 600, 9, 30, 5, 12, 20, 8]
  assert max(sizes) > client_scores.COHORT_CHUNK
  part = participation.bernoulli(np.full(N, 0.4), cap=5)
  task, world = toy_setup(num_clients=N, local_epochs=1.0, batch_size=4, sizes=sizes, part=part)
  hp = dict(client_lr=0.05, batch_size=4, local_epochs=1.0, qffl_q=0.5)
  alg = qfedavg.build(task, world, hp)
  server, clients = alg.init(jax.random.PRNGKey(0))
  step = jax.jit(alg.round)
  padded = 0
  for t in range(3):
    key = jax.random.PRNGKey(70 + t)
    padded += 5 - int(np.sum(world.participation.sample(keys.for_purpose(key, "participation"),
                                                        t)))
    expected = _loop_round(task, world, hp, server.params, key, t)
    server, clients, _ = step(server, clients, key)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5),
                 server.params, expected)
  assert padded > 0  # some round's slab had padding rows
