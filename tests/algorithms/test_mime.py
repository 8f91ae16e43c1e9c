"""Mime and MimeLite (Karimireddy et al., NeurIPS 2021): Algorithm 1 written as a plain
per-client loop with the paper's base algorithms B = (U, V), round by round under partial
participation; MimeLite with SGD (or momentum at beta = 0) is FedAvg bit for bit; Mime with
one local step is the base optimizer's step on the cohort's full-batch gradient; a round
with nobody changes nothing; bad settings are one-line errors."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import one_line, run_rounds, toy_setup
from fedjax_bench import config
from fedjax_bench.algorithms import fedavg, mime
from fedjax_bench.core import keys, local
from fedjax_bench.errors import UsageError
from fedjax_bench.sim import participation, world as world_lib

N, COHORT = 8, 3


class PaperBase:
  """The paper's base algorithms as B = (U, V) on float64 NumPy trees (Section 3):
  momentum U = V = (1 - beta) g + beta m (its form, not optax's heavy ball); Adam as Kingma
  & Ba's Algorithm 1, U the bias-corrected step of step t + 1 and V its moments."""

  def __init__(self, name, hp):
    self.name, self.hp = name, hp

  def init(self, x):
    zeros = lambda: {k: np.zeros_like(v) for k, v in x.items()}
    return {"sgd": None, "momentum": zeros(), "adam": (0, zeros(), zeros())}[self.name]

  def _adam(self, g, s):
    t, m, v = s
    b1, b2, eps = self.hp["mime_beta1"], self.hp["mime_beta2"], self.hp["mime_eps"]
    m = {k: b1 * m[k] + (1 - b1) * g[k] for k in g}
    v = {k: b2 * v[k] + (1 - b2) * g[k] ** 2 for k in g}
    step = {k: (m[k] / (1 - b1 ** (t + 1))) / (np.sqrt(v[k] / (1 - b2 ** (t + 1))) + eps)
            for k in g}
    return step, (t + 1, m, v)

  def U(self, g, s):
    if self.name == "sgd":
      return g
    if self.name == "momentum":
      beta = self.hp["mime_momentum"]
      return {k: (1 - beta) * g[k] + beta * s[k] for k in g}
    return self._adam(g, s)[0]

  def V(self, g, s):
    if self.name == "sgd":
      return s
    if self.name == "momentum":
      return self.U(g, s)
    return self._adam(g, s)[1]

  def eta(self, client_lr):
    """The paper's eta: optax's heavy ball at lr is the paper's momentum at lr / (1 - beta)."""
    return client_lr / (1 - self.hp["mime_momentum"]) if self.name == "momentum" else client_lr


def _flat(tree):
  return {"/".join(str(p.key) for p in path): np.asarray(leaf, np.float64)
          for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _all_examples(task, i):
  """Client i's examples as one batch (padded to the largest client, weight 0)."""
  off, cnt = int(task.offsets[i]), int(task.counts[i])
  rows = off + np.minimum(np.arange(task.max_count), cnt - 1)
  return task.x[rows], task.y[rows], (np.arange(task.max_count) < cnt).astype(np.float32)


def _paper_round(task, world, hp, B, x, s, key, t, *, control_variate):
  """Algorithm 1 with NumPy arrays: Python loops over the sampled clients and their steps.
  ``x`` and ``s`` are flat {path: float64 array} trees."""
  treedef = jax.tree.structure(task.init_params(jax.random.PRNGKey(0)))
  names = list(x)  # the leaves' order
  as_params = lambda flat: jax.tree.unflatten(treedef, [flat[k].astype(np.float32)
                                                        for k in names])
  loss_grad = jax.jit(jax.grad(task.loss))
  grad = lambda p, xb, yb, w: _flat(loss_grad(as_params(p), xb, yb, w))
  mask = np.asarray(world.participation.sample(keys.for_purpose(key, "participation"), t))
  cohort = np.flatnonzero(mask)
  by_size = hp.get("weighting") == "data_size"
  w = {i: float(task.counts[i]) if by_size else 1.0 for i in cohort}
  mean = lambda trees: {k: sum(w[i] * trees[i][k] for i in cohort) / sum(w.values())
                        for k in names}
  # c <- (1/|S|) sum_S grad f_i(x): each client's whole data in one batch.
  full = {i: grad(x, *_all_examples(task, i)) for i in cohort}
  c = mean(full)
  eta = B.eta(hp["client_lr"])
  train_key = keys.for_purpose(key, "local_train")
  ys = {}
  for i in cohort:
    k = keys.for_purpose(jax.random.fold_in(train_key, int(i)), "local_sampling")
    off, cnt, steps = int(task.offsets[i]), int(task.counts[i]), int(world.client_steps[i])
    y, perm = dict(x), jnp.arange(task.max_count, dtype=jnp.int32)
    for step in range(steps):
      pos, wb, perm = local.batch_positions(k, step, cnt, perm, batch_size=hp["batch_size"],
                                            sampling="shuffle")
      xb, yb = task.x[off + pos], task.y[off + pos]
      g = grad(y, xb, yb, wb)
      if control_variate:  # g_i(y) - g_i(x) + c on the same minibatch
        gx = grad(x, xb, yb, wb)
        g = {n: g[n] - gx[n] + c[n] for n in names}
      u = B.U(g, s)  # s frozen during the local steps
      y = {n: y[n] - eta * u[n] for n in names}
    ys[i] = y
  s = B.V(c, s)  # the statistics advance with the full-batch gradients at x
  y_bar = mean(ys)
  x = {n: x[n] + hp.get("server_lr", 1.0) * (y_bar[n] - x[n]) for n in names}
  return x, s, len(cohort)


def _ours_as_paper(B, aux):
  """Our optax statistics in the paper's terms: heavy-ball m is the paper's m / (1 - beta)."""
  if B.name == "sgd":
    return None
  if B.name == "momentum":
    return {k: (1 - B.hp["mime_momentum"]) * v for k, v in _flat(aux[0].trace).items()}
  adam = aux[0]
  return int(adam.count), _flat(adam.mu), _flat(adam.nu)


CASES = [  # (variant, base optimizer, weighting, model)
    ("mime", "momentum", "uniform", "logreg"),
    ("mime_lite", "momentum", "data_size", "logreg"),
    ("mime", "adam", "data_size", "mlp"),
    ("mime_lite", "adam", "uniform", "logreg"),
]


@pytest.mark.parametrize("name,opt,weighting,model", CASES)
def test_rounds_equal_algorithm_1(name, opt, weighting, model):
  # Clients of 7..14 examples, batch 4, one epoch: 2 to 4 local steps, so K_i differs.
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_epochs=1.0, batch_size=4,
                          model=model)
  hp = dict(client_lr=0.1, server_lr=0.8, batch_size=4, local_epochs=1.0, weighting=weighting,
            mime_opt=opt)
  if opt == "momentum":
    hp["mime_momentum"] = 0.7
  if opt == "adam":
    hp.update(mime_beta1=0.8, mime_beta2=0.95, mime_eps=1e-3, client_lr=0.03)
  B = PaperBase(opt, {"mime_momentum": 0.9, "mime_beta1": 0.9, "mime_beta2": 0.999,
                      "mime_eps": 1e-8, **hp})
  variant = getattr(mime, name)
  alg = variant.build(task, world, hp)
  server, clients = alg.init(jax.random.PRNGKey(0))
  step = jax.jit(alg.round)
  x = _flat(server.params)
  s = B.init(x)
  close = lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6)
  for t in range(3):
    key = jax.random.PRNGKey(40 + t)
    x, s, size = _paper_round(task, world, hp, B, x, s, key, t,
                              control_variate=name == "mime")
    assert 0 < size < N  # partial participation
    server, clients, metrics = step(server, clients, key)
    mine = _flat(server.params)
    for k in x:
      close(mine[k], x[k])
    ours = _ours_as_paper(B, server.aux)
    if opt == "momentum":
      for k in s:
        close(ours[k], s[k])
    elif opt == "adam":
      assert ours[0] == s[0] == t + 1
      for a, b in zip(ours[1:], s[1:]):
        for k in a:
          close(a[k], b[k])
    assert float(metrics["num_active"]) == COHORT


def test_mime_lite_with_sgd_is_fedavg_bit_for_bit():
  """MimeLite's client steps with SGD, or with momentum at beta = 0 (whose statistics then
  hold the last mean gradient and multiply it by 0), are FedAvg's, its mean and server
  step the same: parameters and losses bitwise equal (data-size weights)."""
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_epochs=1.0, batch_size=4)
  # XLA's loop on both sides: the fused kernel takes FedAvg's plain SGD only (it is pinned
  # to the loop to rounding in tests/core/test_logreg_sgd.py).
  hp = dict(client_lr=0.3, server_lr=0.7, batch_size=4, local_epochs=1.0,
            weighting="data_size", fused_logreg=False)
  (sgd, m_sgd), (beta0, m_beta0), (ref, m_ref) = [
      (server, float(m["client_loss"])) for server, _, m in map(run_rounds, (
          mime.mime_lite.build(task, world, {**hp, "mime_opt": "sgd"}),
          mime.mime_lite.build(task, world, {**hp, "mime_opt": "momentum",
                                             "mime_momentum": 0.0}),
          fedavg.build(task, world, hp)))]
  for server, loss in ((sgd, m_sgd), (beta0, m_beta0)):
    jax.tree.map(np.testing.assert_array_equal, server.params, ref.params)
    assert loss == m_ref
  assert float(jnp.max(jnp.abs(jax.tree.leaves(beta0.aux)[0]))) > 0  # statistics, not zero


def test_one_local_step_of_mime_is_the_centralized_step():
  """With K = 1 every client's corrected gradient is c itself (g_i(x) - g_i(x) + c), so a
  Mime round is the base optimizer's step on the cohort's full-batch gradient: the paper's
  'mimicking' in its plainest case (heavy-ball momentum over three rounds)."""
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_steps=1, batch_size=4)
  lr, beta = 0.2, 0.6
  alg = mime.mime.build(task, world, dict(client_lr=lr, batch_size=4, local_steps=1,
                                          mime_momentum=beta))
  server, clients = alg.init(jax.random.PRNGKey(0))
  step, loss_grad = jax.jit(alg.round), jax.jit(jax.grad(task.loss))
  x, m = _flat(server.params), None
  for t in range(3):
    key = jax.random.PRNGKey(7 + t)
    mask = np.asarray(world.participation.sample(keys.for_purpose(key, "participation"), t))
    params = jax.tree.unflatten(jax.tree.structure(server.params),
                                [v.astype(np.float32) for v in x.values()])
    grads = [_flat(loss_grad(params, *_all_examples(task, i))) for i in np.flatnonzero(mask)]
    c = {k: np.mean([g[k] for g in grads], 0) for k in x}
    m = c if m is None else {k: c[k] + beta * m[k] for k in x}  # heavy ball on c
    x = {k: x[k] - lr * m[k] for k in x}
    server, clients, _ = step(server, clients, key)
    mine = _flat(server.params)
    for k in x:
      np.testing.assert_allclose(mine[k], x[k], rtol=1e-5, atol=1e-6)


def test_a_round_with_nobody_changes_nothing():
  """No client available in round 2: parameters and Adam's statistics (its step count too)
  stay bitwise as round 1 left them; V is not applied to the empty mean."""
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_steps=2, batch_size=4)
  some = participation.uniform(N, COHORT)
  gap = participation.stateless(N, some.cap, lambda key, t: some.sample(key, t) & (t != 2))
  alg = mime.mime.build(task, world_lib.make(gap, world.client_steps),
                        dict(client_lr=0.1, batch_size=4, local_steps=2, mime_opt="adam"))
  server, clients, _ = run_rounds(alg, rounds=2)
  after, _, metrics = jax.jit(alg.round)(server, clients, jax.random.PRNGKey(3))
  assert float(metrics["num_active"]) == 0 and int(after.round) == 3
  jax.tree.map(np.testing.assert_array_equal, after.params, server.params)
  jax.tree.map(np.testing.assert_array_equal, after.aux, server.aux)
  assert int(server.aux[0].count) == 2


@pytest.mark.parametrize("values,message", [
    (dict(mime_opt="rmsprop"), "--mime_opt='rmsprop' is not valid; valid: sgd, momentum, adam"),
    (dict(mime_opt="adam", mime_momentum=0.5), "--mime_momentum has no effect on --algo=mime"),
    (dict(mime_beta1=0.5), "--mime_beta1 has no effect on --algo=mime"),
    (dict(mime_momentum=1.0), "--mime_momentum must be in [0, 1)"),
    # Mime's statistics are its server optimizer, and its base optimizer its client's.
    (dict(server_opt="adam"), "--server_opt has no effect on --algo=mime"),
    (dict(client_opt="adam"), "--client_opt has no effect on --algo=mime"),
])
def test_bad_settings_are_one_line_errors(values, message):
  with pytest.raises(UsageError) as e:
    config.resolve(algo="mime", **values)
  assert re.search(re.escape(message), one_line(e))


def test_batch_norm_models_are_refused():
  task, world = toy_setup(num_clients=N, cohort=COHORT, model="mlp_bn")
  with pytest.raises(UsageError) as e:
    mime.mime_lite.build(task, world, {})
  assert "use a model without batch norm" in one_line(e)
