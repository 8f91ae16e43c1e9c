"""FedAWE and the unavailability baselines against independent NumPy references (docs/papers/fedawe.md).

Most tests run a scalar quadratic toy like Example 1 (§4): client i holds targets with mean u_i,
F_i(x) = mean_j 0.5 (x - y_ij)^2, the model is a zero-initialised bias (LogReg with one
output over an all-zero feature), and local training is full-batch GD (`shuffle` with a
batch as large as the largest client). s steps of size eta from x then give the closed form
Delta_i = (1 - (1 - eta)^s) (u_i - x), so the NumPy side needs no autodiff.

The helpers here are shared with test_unavailability_toys.py.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import toy_setup
from fedjax_bench import algorithms, engine, models
from fedjax_bench.algorithms import fedau
from fedjax_bench.core import keys
from fedjax_bench.task.build import make_task
from fedjax_bench.data.federated import Dataset, FederatedData
from fedjax_bench.sim import participation, world as world_lib

UNBIASED_FULL = ("fedawe", "fedavg_all", "fedavg_known", "fedau", "mifa", "fedvarp")


# ---------------------------------------------------------------------------------------
# Shared helpers



def _fedau_record_one(i, active, n, S, M, K):
  """FedAU's per-client interval bookkeeping (IBM/fedau's `adaptive`), in place."""
  if active:
    S[i] += n[i] + 1
    M[i] += 1
    n[i] = 0
  else:
    n[i] += 1
    if n[i] >= K:
      S[i] += n[i]
      M[i] += 1
      n[i] = 0

def quadratic_task(targets):
  """targets[i]: client i's regression targets; the model's output is its bias alone."""
  xs = [np.zeros((len(y), 1), np.float32) for y in targets]
  ys = [np.asarray(y, np.float32) for y in targets]
  ds = Dataset("quadratic", FederatedData.from_clients(xs, ys), np.zeros((1, 1), np.float32),
               np.zeros(1, np.float32), 1, (1,), False)
  model = models.make("logreg", num_classes=1, is_image=False, zero_init=True)
  return make_task(ds, model, loss_type="squared_error")


def bias(params):
  """The toy's scalar model (the kernel multiplies an all-zero feature); [m] for client rows."""
  return params["DenseOI_0"]["bias"][..., 0]


def kernel(params):
  return params["DenseOI_0"]["kernel"]


def init_key(seed):
  """What engine.run uses to initialise seed `seed`."""
  return keys.init_key(keys.root(seed))


def round_key(seed, t):
  """engine.run's key of round t of seed `seed`."""
  return keys.round_key(keys.root(seed), t)


def scripted(masks) -> participation.Participation:
  """Availability read from a fixed [rounds, m] table (round t uses row t)."""
  table = jnp.asarray(np.asarray(masks, bool))
  return participation.stateless(table.shape[1], table.shape[1], lambda key, t: table[t])


def bernoulli_traced(p) -> participation.Participation:
  """participation.bernoulli's draw with p a (possibly traced) array, cap = m, so that
  vmapped simulations can sweep p in one compiled program."""
  m = p.shape[0]
  return participation.stateless(m, m, lambda key, t: jax.random.uniform(key, (m,)) < p,
                                 lambda t: p)


def local_factor(eta, steps):
  """1 - c, c = (1 - eta)^s: Delta = (1 - c) (u - x) for s full-batch GD steps."""
  return 1.0 - (1.0 - np.asarray(eta, np.float64)) ** np.asarray(steps, np.float64)


# ---------------------------------------------------------------------------------------
# 1. Every algorithm against a NumPy transcription of its pseudocode (Algorithm 1, the §7
# baselines; docs/papers/fedawe.md)

# Client targets: means u = (-3, 0, 2, 5, 9, 20) with spread, so full batches matter.
TARGETS = [[-4.5, -1.5], [0.0], [1.0, 2.0, 3.0], [3.0, 7.0], [9.0], [18.0, 20.0, 22.0]]
U = np.array([np.mean(y) for y in TARGETS])
STEPS = np.array([1, 2, 3, 1, 2, 3])
BASE_P = np.array([0.15, 0.3, 0.45, 0.6, 0.8, 0.9])
ROUNDS = 30
HP = dict(client_lr=0.25, client_lr_schedule="inv_sqrt", server_lr=0.8, batch_size=3,
          sampling="shuffle", fedawe_clip=0.0)  # FedAWE as Algorithm 1 writes it


def _probs(t):
  """Non-stationary p_i^t = BASE_P * f(t), and nobody available when t % 8 == 5."""
  t = jnp.asarray(t, jnp.float32)
  f = 0.75 + 0.25 * jnp.sin(2 * jnp.pi * t / 7)
  return jnp.where(t % 8 == 5, 0.0, jnp.asarray(BASE_P, jnp.float32) * f)


def _golden_world():
  m = len(TARGETS)
  part = participation.stateless(m, m, lambda key, t: jax.random.uniform(key, (m,)) < _probs(t),
                                 _probs)
  return world_lib.make(part, STEPS)


def _client_lr(t):
  return HP["client_lr"] / np.sqrt(t / 10 + 1)


def _masks(world, seed):
  """The availability masks the algorithm will see, drawn through the world's own API."""
  observe = lambda t: world.observe(round_key(seed, t), t, ())[0]
  return np.asarray(jax.jit(jax.vmap(observe))(jnp.arange(ROUNDS)))


GOLDEN_SEED = 3


@pytest.fixture(scope="module")
def golden():
  """(task, world, masks) of the golden runs: the masks are drawn once for all cases."""
  world = _golden_world()
  return quadratic_task(TARGETS), world, _masks(world, GOLDEN_SEED)


def _ref_fedavg_family(name, hp, masks):
  """fedavg (1/|A|), fedavg_all (1/m), fedavg_known (1/(m p_i^t)): the §7 baselines."""
  m, x, out = len(U), 0.0, []
  for t, a in enumerate(masks):
    d = local_factor(_client_lr(t), STEPS) * (U - x)
    if a.any():
      if name == "fedavg":
        step = d[a].mean()
      elif name == "fedavg_all":
        step = d[a].sum() / m
      else:
        p = np.asarray(_probs(t), np.float64)
        step = (d[a] / p[a]).sum() / m
      x = x + hp["server_lr"] * step
    out.append(dict(server=x))
  return out


def _ref_fedau(hp, masks):
  """FedAU (IBM/fedau's `adaptive`), the per-client loop as written (omega from intervals
  recorded before)."""
  m, K, x, out = len(U), hp.get("fedau_k", 50), 0.0, []
  n, S, M = [0] * m, [0.0] * m, [0] * m
  for t, a in enumerate(masks):
    d = local_factor(_client_lr(t), STEPS) * (U - x)
    total = 0.0
    for i in range(m):
      if a[i]:
        total += (S[i] / M[i] if M[i] > 0 else 1.0) * d[i]
      _fedau_record_one(i, a[i], n, S, M, K)
    if a.any():
      x = x + hp["server_lr"] * total / m
    omega = np.array([S[i] / M[i] if M[i] else 1.0 for i in range(m)])
    out.append(dict(server=x, omega=omega, absent=np.array(n), total=np.array(S),
                    recorded=np.array(M)))
  return out


def _ref_f3ast(hp, masks):
  """F3AST (reconstructed, docs/papers/fedawe.md): r updated with the selected clients, then
  the weights use the updated r."""
  m, x, out = len(U), 0.0, []
  beta, variant = hp["f3ast_beta"], hp.get("f3ast_variant", "literal")
  budget = hp.get("f3ast_budget", 0)
  r = np.full(m, 1.0 if variant == "selfnorm" else 1.0 / m)
  for t, a in enumerate(masks):
    sel = a.copy()
    if 0 < budget < m:
      order = sorted(np.flatnonzero(a), key=lambda k: (r[k], k))  # smallest r, then lower id
      sel = np.zeros(m, bool)
      sel[order[:budget]] = True
    d = local_factor(_client_lr(t), STEPS) * (U - x)
    r = (1 - beta) * r + beta * sel
    if sel.any():
      if variant == "literal":
        step = np.sum((1 / m) / r[sel] * d[sel]) / sel.sum()
      elif variant == "selfnorm":
        w = 1 / r[sel]
        step = np.sum(w * d[sel]) / w.sum()
      else:
        step = np.sum(d[sel] / r[sel]) / m
      x = x + hp["server_lr"] * step
    out.append(dict(server=x, rates=r.copy(), selected=sel))
  return out


def _ref_mifa(hp, masks):
  """MIFA (the authors' code): U_i = latest Delta_i (0 before), x += eta_g mean_all U every
  round."""
  m, x, mem, out = len(U), 0.0, np.zeros(len(U)), []
  for t, a in enumerate(masks):
    d = local_factor(_client_lr(t), STEPS) * (U - x)
    mem[a] = d[a]
    x = x + hp["server_lr"] * mem.sum() / m
    out.append(dict(server=x))
  return out


def _ref_fedvarp(hp, masks):
  """FedVARP (the authors' code): x += eta_g (mean_A (Delta_i - y_i) + ybar_old); nothing
  when A is empty."""
  x, y, out = 0.0, np.zeros(len(U)), []
  for t, a in enumerate(masks):
    d = local_factor(_client_lr(t), STEPS) * (U - x)
    if a.any():
      x = x + hp["server_lr"] * ((d[a] - y[a]).mean() + y.mean())
      y[a] = d[a]
    out.append(dict(server=x))
  return out


def _ref_fedawe(hp, masks):
  """Algorithm 1 (echo then average), or the code's clipped form when clip > 0."""
  m, clip = len(U), hp.get("fedawe_clip", 0.0)
  local, count, server, out, clipped = np.zeros(m), np.ones(m), 0.0, [], 0
  for t, a in enumerate(masks):
    d = local_factor(_client_lr(t), STEPS) * (U - local)
    if a.any():
      if clip:
        step = np.mean(count[a] * d[a])
        clipped += abs(step) > clip
        step = step * min(1.0, clip / abs(step))
        server = local[a].mean() + hp["server_lr"] * step
      else:
        echoed = local[a] + hp["server_lr"] * count[a] * d[a]
        server = echoed.mean()
      local[a] = server
    count = np.where(a, 1, count + 1)
    out.append(dict(server=server, local=local.copy(), count=count.copy(),
                    eval=local.mean()))
  return out, clipped


GOLDEN_CASES = [
    ("fedavg", {}),
    ("fedavg_all", {}),
    ("fedavg_known", {}),
    ("fedau", {}),                              # K = 50: no cutoff within 30 rounds
    ("fedau", {"fedau_k": 3}),                  # cutoffs recorded
    ("f3ast", {"f3ast_beta": 0.1}),             # literal
    ("f3ast", {"f3ast_beta": 0.1, "f3ast_variant": "selfnorm"}),
    ("f3ast", {"f3ast_beta": 0.1, "f3ast_variant": "unbiased"}),
    ("f3ast", {"f3ast_beta": 0.1, "f3ast_budget": 2}),
    ("mifa", {}),
    ("fedvarp", {}),
    ("fedawe", {"fedawe_clip": 0.0}),
    ("fedawe", {"fedawe_clip": 0.5}),
]


def _close(actual, expected, what, t):
  np.testing.assert_allclose(np.asarray(actual, np.float64), expected, rtol=1e-5, atol=1e-5,
                             err_msg=f"{what} after round {t}")


@pytest.mark.parametrize("name,extra", GOLDEN_CASES,
                         ids=[f"{n}-{'-'.join(f'{k}={v}' for k, v in e.items())}"
                              for n, e in GOLDEN_CASES])
def test_iterates_match_numpy_reference(name, extra, golden):
  """Algorithm 1 and the §7 baselines: 30 rounds of heterogeneous, non-stationary availability
  with empty rounds; server iterates (and FedAWE's local models and counters, FedAU's omega
  and intervals, F3AST's rates) equal a NumPy transcription of their pseudocode at every round."""
  seed = GOLDEN_SEED
  task, world, masks = golden
  # One client at a time compiles fastest; FedAWE keeps the default (chunks of 4 clients
  # of the 6-row slab, with a remainder) for its per-client starting points.
  hp = {**HP, "client_width": -1 if name == "fedawe" else 1, **extra}
  assert (~masks.any(1)).sum() >= 3 and masks.any(1).sum() >= 20  # empty rounds are covered
  assert 0 < masks[:, 0].sum() < 10  # the rare client is sometimes there, mostly absent
  if name == "fedawe":
    ref, clipped = _ref_fedawe(hp, masks)
    if hp["fedawe_clip"]:
      assert 5 <= clipped < masks.any(1).sum()  # the clip binds in some rounds, not all
  elif name == "fedau":
    ref = _ref_fedau(hp, masks)
  elif name == "f3ast":
    ref = _ref_f3ast(hp, masks)
  elif name == "mifa":
    ref = _ref_mifa(hp, masks)
  elif name == "fedvarp":
    ref = _ref_fedvarp(hp, masks)
  else:
    ref = _ref_fedavg_family(name, hp, masks)

  alg = algorithms.get(name).build(task, world, hp)
  server, clients = alg.init(init_key(seed))
  step = jax.jit(alg.round)
  for t in range(ROUNDS):
    server, clients, metrics = step(server, clients, round_key(seed, t))
    r = ref[t]
    assert int(server.round) == t + 1
    _close(bias(server.params), r["server"], "server model", t)
    assert not np.any(np.asarray(kernel(server.params)))
    if name == "fedawe":
      _close(bias(clients.params), r["local"], "local models", t)
      np.testing.assert_array_equal(np.asarray(clients.since_last), r["count"])
      _close(bias(alg.eval_params(server, clients)), r["eval"], "mean of local models", t)
    elif name == "fedau":
      _close(fedau.weights(clients), r["omega"], "omega", t)
      np.testing.assert_array_equal(np.asarray(clients.absent), r["absent"])
      _close(clients.total, r["total"], "interval sums", t)
      np.testing.assert_array_equal(np.asarray(clients.recorded), r["recorded"])
    elif name == "f3ast":
      _close(clients, r["rates"], "rates", t)
      assert float(metrics["num_active"]) == r["selected"].sum()
    if name != "f3ast":
      assert float(metrics["num_active"]) == masks[t].sum()
  if name == "f3ast" and extra.get("f3ast_budget"):
    assert any(m.sum() > 2 for m in masks)  # the budget had to choose


def test_fedawe_clip_can_be_swept_in_an_engine_grid(golden):
  """engine.run traces swept scalars (docs/design.md, "The shape of a run"); a grid over
  `fedawe_clip` in {0, 0.5} must give each point's own iterates (Algorithm 1 with and
  without the code's clip), here the NumPy reference's after 30 rounds."""
  task, world, masks = golden
  out = engine.run(lambda hp: algorithms.get("fedawe").build(task, world, hp), task, HP,
                   seeds=[GOLDEN_SEED], rounds=ROUNDS, eval_every=ROUNDS,
                   grid=[{"fedawe_clip": 0.0}, {"fedawe_clip": 0.5}])
  server, clients, _ = out.state
  for g, clip in enumerate([0.0, 0.5]):
    ref = _ref_fedawe({**HP, "fedawe_clip": clip}, masks)[0][-1]
    _close(bias(server.params)[g], ref["server"], f"server model (clip {clip})", ROUNDS - 1)
    _close(bias(clients.params)[g], ref["local"], f"local models (clip {clip})", ROUNDS - 1)


def test_fedawe_evaluates_the_mean_of_local_models_or_on_request_the_server(golden):
  """§6 and the authors' code: FedAWE scores x_bar = mean_i x_i over ALL clients by default,
  and x^{t+1} with `fedawe_eval="server"`."""
  task, world, _ = golden
  local = jnp.asarray([1.0, 2.0, 4.0, 8.0, 16.0, 32.0])
  for evaluate, expected in [("mean_local", 63.0 / 6), ("server", -5.0)]:
    alg = algorithms.get("fedawe").build(task, world, {**HP, "fedawe_eval": evaluate})
    server, clients = alg.init(init_key(GOLDEN_SEED))
    server = server._replace(params=jax.tree.map(lambda a: a - 5.0, server.params))
    clients = clients._replace(params={"DenseOI_0": {
        "kernel": clients.params["DenseOI_0"]["kernel"], "bias": local[:, None]}})
    np.testing.assert_allclose(float(bias(alg.eval_params(server, clients))), expected,
                               rtol=1e-6)


# ---------------------------------------------------------------------------------------
# 2. Full availability: everything reduces to FedAvg (t - tau_i(t) = 1 in Algorithm 1)


def _full_setup():
  task, world = toy_setup(num_clients=6, local_steps=3, batch_size=4,
                          part=participation.full(6))
  hp = dict(client_lr=0.2, server_lr=0.7, batch_size=4, sampling="shuffle", client_width=1,
            fedawe_clip=0.0)
  return task, world, hp


@pytest.fixture(scope="module")
def fedavg_full_trajectory():
  task, world, hp = _full_setup()
  alg = algorithms.get("fedavg").build(task, world, hp)
  server, clients = alg.init(init_key(0))
  step, states = jax.jit(alg.round), [server]
  for t in range(10):
    server, clients, _ = step(server, clients, round_key(0, t))
    states.append(server)
  return states


@pytest.mark.parametrize("name", UNBIASED_FULL)
def test_full_availability_reduces_to_fedavg(name, fedavg_full_trajectory):
  """With p = 1 FedAWE (no clip; at x_bar and at the server), FedAvg-all, -known,
  FedAU (all omega = 1), MIFA and FedVARP give FedAvg's iterates on a minibatch logreg."""
  task, world, hp = _full_setup()
  alg = algorithms.get(name).build(task, world, hp)
  server, clients = alg.init(init_key(0))
  step = jax.jit(alg.round)
  for t in range(10):
    server, clients, _ = step(server, clients, round_key(0, t))
    expected = fedavg_full_trajectory[t + 1].params
    checked = [server.params]
    if name == "fedawe":
      checked.append(alg.eval_params(server, clients))
      assert np.all(np.asarray(clients.since_last) == 1)
    for params in checked:
      jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                   params, expected)
  if name == "fedau":
    np.testing.assert_array_equal(np.asarray(fedau.weights(clients)), 1.0)
  # The iterates moved: the equality is not that of two standing models.
  moved = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))),
                       fedavg_full_trajectory[-1].params, fedavg_full_trajectory[0].params)
  assert max(jax.tree.leaves(moved)) > 0.1


@pytest.mark.parametrize("variant", ["literal", "selfnorm", "unbiased"])
def test_full_availability_f3ast_moves_along_fedavg_direction(variant, fedavg_full_trajectory):
  """Under full availability F3AST's weights are equal across clients, so from FedAvg's
  iterate x_t its step is k_t times FedAvg's: literal 1/(m r_{t+1}), unbiased 1/r_{t+1},
  selfnorm 1, with r_{t+1} = 1 - (1 - beta)^{t+1} (1 - r_0)."""
  task, world, hp = _full_setup()
  m, beta = 6, 0.1
  alg = algorithms.get("f3ast").build(task, world, {**hp, "f3ast_beta": beta,
                                                    "f3ast_variant": variant})
  server, rates = alg.init(init_key(0))
  step = jax.jit(alg.round)
  r0 = 1.0 if variant == "selfnorm" else 1.0 / m
  scales = []
  for t in range(10):
    x_t, x_avg = fedavg_full_trajectory[t].params, fedavg_full_trajectory[t + 1].params
    after, rates, _ = step(server._replace(params=x_t), rates, round_key(0, t))
    r = 1 - (1 - beta) ** (t + 1) * (1 - r0)
    np.testing.assert_allclose(np.asarray(rates), r, rtol=1e-6)
    k = {"literal": 1 / (m * r), "unbiased": 1 / r, "selfnorm": 1.0}[variant]
    scales.append(k)
    jax.tree.map(lambda a, x, b: np.testing.assert_allclose(a - x, k * (b - x), rtol=2e-4,
                                                            atol=1e-6),
                 after.params, x_t, x_avg)
    server = after
  if variant != "selfnorm":
    assert max(abs(k - 1) for k in scales) > 0.3  # only the direction is FedAvg's


# ---------------------------------------------------------------------------------------
# 3. Bookkeeping: Prop. 1, FedAU intervals, the mixing matrix, Lemma 4 (§5, §6)


def _taus(masks):
  """t - tau_i(t) straight from the definition tau_i(t) = max{t' < t: i in A_t'} (-1)."""
  T, m = masks.shape
  out = np.zeros((T, m), np.int64)
  for t in range(T):
    for i in range(m):
      seen = [s for s in range(t) if masks[s, i]]
      out[t, i] = t - (seen[-1] if seen else -1)
  return out


def _fedawe_scripted(masks, hp, targets=None):
  """Runs FedAWE on the quadratic toy under a scripted mask table; returns per-round
  (counters before, local models before, local models after, server after)."""
  targets = targets or [[float(5 * i - 3)] for i in range(masks.shape[1])]
  world = world_lib.make(scripted(masks), np.ones(masks.shape[1], np.int32))
  alg = algorithms.get("fedawe").build(quadratic_task(targets), world,
                                       {"batch_size": 1, "fedawe_clip": 0.0, **hp})
  server, clients = alg.init(init_key(0))

  def step(carry, t):
    server, clients = carry
    before = (clients.since_last, bias(clients.params))
    server, clients, _ = alg.round(server, clients, round_key(0, t))
    return (server, clients), before + (bias(clients.params), bias(server.params))

  _, out = jax.jit(lambda s, c: jax.lax.scan(step, (s, c), jnp.arange(masks.shape[0])))(
      server, clients)
  return [np.asarray(a, np.float64) for a in out]


def test_fedawe_echo_counters_reequalize_weights_prop1():
  """Prop. 1 (§5): FedAWE's counter is t - tau_i(t), and a client active at round R-1
  has sum_{t<R} 1{active} (t - tau_i(t)) = R, for any availability sequence."""
  rng = np.random.default_rng(0)
  T, m = 60, 5
  masks = rng.random((T, m)) < np.array([0.05, 0.2, 0.4, 0.7, 1.0])
  masks[[7, 8, 30]] = False        # rounds with nobody
  masks[:, 0] = False
  masks[[2, 3, 7], 0] = True       # multipliers 3, 1, 4 (sums 3, 4, 8), then never again
  counts, *_ = _fedawe_scripted(masks, {"client_lr": 0.1})
  np.testing.assert_array_equal(counts, _taus(masks))
  assert counts[[2, 3, 7], 0].tolist() == [3, 1, 4]
  assert counts[-1, 0] == T - 1 - 7
  checked = 0
  for i in range(m):
    for R in range(1, T + 1):
      if masks[R - 1, i]:
        assert np.sum(masks[:R, i] * counts[:R, i]) == R, (i, R)
        checked += 1
  assert checked > 80


def test_fedawe_local_models_follow_the_mixing_matrix():
  """Eq. 4 (§5): x^{t+1} = W^(t) x^{t+dagger} with the echoed models of the active
  clients and the stale ones of the others; W^(t) is symmetric, doubly stochastic and
  idempotent (W = I in a round with nobody)."""
  rng = np.random.default_rng(1)
  T, m, eta, eta_g = 25, 5, 0.2, 0.9
  masks = rng.random((T, m)) < np.array([0.1, 0.3, 0.5, 0.7, 0.9])
  masks[4] = False
  u = np.array([5.0 * i - 3 for i in range(m)])
  counts, before, after, _ = _fedawe_scripted(masks, {"client_lr": eta, "server_lr": eta_g})
  for t in range(T):
    a = masks[t]
    W = np.diag((~a).astype(float))
    if a.any():
      W[np.ix_(a, a)] = 1.0 / a.sum()
    np.testing.assert_allclose(W, W.T)
    np.testing.assert_allclose(W.sum(0), 1.0)
    np.testing.assert_allclose(W.sum(1), 1.0)
    np.testing.assert_allclose(W @ W, W, atol=1e-15)
    dagger = np.where(a, before[t] + eta_g * counts[t] * eta * (u - before[t]), before[t])
    np.testing.assert_allclose(after[t], W @ dagger, rtol=1e-5, atol=1e-5)
  assert np.ptp(after[-1]) > 1.0  # the local models do differ


def test_lemma4_spectral_gap_of_expected_mixing_matrix():
  """Lemma 4 (§6): for m = 4, E[W] over the 2^m availability patterns has
  lambda_2 < 1 and lambda_2 <= 1 - delta^4 (1 - (1 - delta)^m)^2 / 8."""
  m = 4
  for p in [np.full(m, 0.2), np.full(m, 0.5), np.full(m, 0.9), np.array([0.2, 0.4, 0.6, 0.9])]:
    M = np.zeros((m, m))
    for bits in itertools.product([False, True], repeat=m):
      a = np.array(bits)
      W = np.diag((~a).astype(float))
      if a.any():
        W[np.ix_(a, a)] = 1.0 / a.sum()
      M += np.prod(np.where(a, p, 1 - p)) * W
    np.testing.assert_allclose(M.sum(1), 1.0)
    lam = np.sort(np.linalg.eigvalsh(M))[::-1]
    delta = p.min()
    assert abs(lam[0] - 1) < 1e-12
    assert lam[1] < 1 - 1e-3
    assert lam[1] <= 1 - delta ** 4 * (1 - (1 - delta) ** m) ** 2 / 8


def _intervals(m=1):
  zeros = jnp.zeros(m, jnp.int32)
  return fedau.Intervals(zeros, jnp.zeros(m), zeros)


def _replay(pattern, cutoff):
  """omega used at each participation, and the intervals after the last round."""
  s, used = _intervals(), []
  for t, a in enumerate(pattern):
    if a:
      used.append((t, float(fedau.weights(s)[0])))
    s = fedau.record(s, jnp.array([bool(a)]), cutoff)
  return used, s


def test_fedau_interval_bookkeeping_examples():
  """By hand: 0,0,1,0,1,1 with K=50 uses omega 1, 3, 2.5 (records 3, 2, 1); K=3 with
  1,0,0,0,0,1 records 1, then 3 at the cutoff (t=3), uses omega 2 at t=5, then records 2."""
  used, s = _replay([0, 0, 1, 0, 1, 1], 50)
  assert used == [(2, 1.0), (4, 3.0), (5, 2.5)]
  assert (int(s.absent[0]), float(s.total[0]), int(s.recorded[0])) == (0, 6.0, 3)
  used, s = _replay([1, 0, 0, 0, 0, 1], 3)
  assert used == [(0, 1.0), (5, 2.0)]
  assert (int(s.absent[0]), float(s.total[0]), int(s.recorded[0])) == (0, 6.0, 3)
  _, s = _replay([1, 0, 0, 0], 3)  # the cutoff fires at the 3rd absence and resets n
  assert (int(s.absent[0]), float(s.total[0]), int(s.recorded[0])) == (0, 4.0, 2)


def test_fedau_record_matches_the_per_client_loop_on_random_patterns():
  """The vectorised `record` is FedAU's per-client loop (IBM/fedau's), for several K."""
  rng = np.random.default_rng(2)
  T, m = 120, 8
  masks = rng.random((T, m)) < rng.uniform(0.02, 0.9, m)
  for K in (1, 2, 5, 50):
    n, S, M = np.zeros(m, int), np.zeros(m), np.zeros(m, int)
    s = _intervals(m)
    for a in masks:
      omega = np.where(M > 0, S / np.maximum(M, 1), 1.0)
      np.testing.assert_allclose(np.asarray(fedau.weights(s)), omega, rtol=1e-6)
      for i in range(m):
        _fedau_record_one(i, a[i], n, S, M, K)
      s = fedau.record(s, jnp.asarray(a), K)
      np.testing.assert_array_equal(np.asarray(s.absent), n)
      np.testing.assert_array_equal(np.asarray(s.total), S)
      np.testing.assert_array_equal(np.asarray(s.recorded), M)
