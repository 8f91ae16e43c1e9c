"""Fed-SGD / Fed-AMS / Fed-EF (the Fed-EF paper's Algorithms 1-3; docs/papers/fedef.md): golden runs against an independent NumPy
transcription of the pseudocode (Algorithms 1-4), the identities of Algorithms 2-3, bits, the
per-round diagnostics (Appendix C's q_A², Figures 8-9's gradient norm) and bad input.

The golden runs use a regression MLP 4 -> 3 (ReLU) -> 1 with squared error: four parameter
tensors of 3, 12, 1 and 3 entries, so per-tensor grouping (our "layer-wise") decides what TopK,
Sign and heavy-Sign keep. Local training is full-batch GD (`shuffle` with a batch as large as the
largest client), so the NumPy side writes ClientUpdate with a hand-derived gradient and
needs no autodiff. The compressors on the NumPy side are written from §3.1 and Appendix A, not
imported.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import toy_dataset, toy_setup
from fedjax_bench import engine, models, settings
from fedjax_bench.algorithms import compression, fedavg, fedef
from fedjax_bench.core import device_memory, keys, rounds
from fedjax_bench.task.build import make_task
from fedjax_bench.data.federated import Dataset, FederatedData
from fedjax_bench.errors import UsageError
from fedjax_bench.sim import participation, world as world_lib

# ---------------------------------------------------------------------------------------
# Keys and pytree <-> NumPy


def init_key(seed):
  """What engine.run uses to initialise seed `seed`."""
  return keys.init_key(keys.root(seed))


def round_key(seed, t):
  """engine.run's key of round t of seed `seed`."""
  return keys.round_key(keys.root(seed), t)


def flat(tree) -> dict:
  """{key path: float64 array}, one entry per parameter tensor."""
  return {jax.tree_util.keystr(p): np.asarray(a, np.float64)
          for p, a in jax.tree_util.tree_flatten_with_path(tree)[0]}


def row(tree: dict, i) -> dict:
  return {k: v[i] for k, v in tree.items()}


def add(a, b, s=1.0):
  return {k: a[k] + s * b[k] for k in a}


def zeros_like(a):
  return {k: np.zeros_like(v) for k, v in a.items()}


def sqnorm(a) -> float:
  return float(sum(np.sum(v * v) for v in a.values()))


def masks_of(world, seed, rounds_):
  """The participation masks the algorithm sees, drawn through the world's own API."""
  return [np.asarray(world.observe(round_key(seed, t), t, ())[0]) for t in range(rounds_)]


# ---------------------------------------------------------------------------------------
# The compressors of §3.1 and Appendix A, per parameter tensor (docs/papers/fedef.md)


def kept(k, d):
  """k_i = max(1, floor(k d_i)) (§5.1, footnote 2)."""
  return max(1, int(np.floor(k * d + 1e-9)))


def compress_tensor(name, x, k):
  f = x.ravel()
  out = np.zeros_like(f)
  if name == "identity":
    return x.copy()
  if name == "sign":      # ‖x‖₁/d_i · sign(x), sign(0) = 0 (Definition 1)
    out = np.mean(np.abs(f)) * np.sign(f)
  else:                   # exactly k_i largest |x|, ties to the lower index (ours)
    ki = kept(k, f.size)
    s = np.argsort(-np.abs(f), kind="stable")[:ki]
    if name == "topk":
      out[s] = f[s]
    elif name == "hvsign":  # mean |x| over the support, its signs (Definition 2, "support")
      out[s] = np.sum(np.abs(f[s])) / ki * np.sign(f[s])
    else:
      raise ValueError(name)
  return out.reshape(x.shape)


def compress(name, tree, k):
  return {key: compress_tensor(name, v, k) for key, v in tree.items()}


# ---------------------------------------------------------------------------------------
# The golden problem: six clients, three of them per round

D, H = 4, 3
SIZES = [2, 3, 4, 2, 3, 4]
STEPS = np.array([1, 2, 3, 2, 1, 3])
N, M = len(SIZES), 3
W1, B1 = "['DenseOI_0']['kernel']", "['DenseOI_0']['bias']"
W2, B2 = "['DenseOI_1']['kernel']", "['DenseOI_1']['bias']"
GOLDEN_SEED, GOLDEN_ROUNDS = 5, 12
CLIENT_LR = 0.1
AMS = dict(server_beta1=0.9, server_beta2=0.999, server_eps=1e-8)


def _golden_data():
  """Client i: y = x·w_i + 0.3 noise with its own w_i (heterogeneous objectives)."""
  rng = np.random.default_rng(11)
  xs, ys = [], []
  for s in SIZES:
    w = rng.normal(size=D) * 1.5
    x = rng.normal(size=(s, D))
    xs.append(x.astype(np.float32))
    ys.append((x @ w + 0.3 * rng.normal(size=s)).astype(np.float32))
  return xs, ys


@pytest.fixture(scope="module")
def golden():
  xs, ys = _golden_data()
  ds = Dataset("mlp_regression", FederatedData.from_clients(xs, ys), xs[0], ys[0], 1, (D,),
               False)
  task = make_task(ds, models.make("mlp", num_classes=1, is_image=False, mlp_hidden=(H,)),
                   loss_type="squared_error")
  world = world_lib.make(participation.uniform(N, M), STEPS)
  return task, world, xs, ys


def mlp_grad(p, x, y):
  """∇ of mean_j 0.5 (W2 relu(W1 x_j + b1) + b2 − y_j)², by hand."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  z = x @ p[W1].T + p[B1]
  h = np.maximum(z, 0.0)
  r = (h @ p[W2][0] + p[B2][0] - y) / len(y)
  dz = np.outer(r, p[W2][0]) * (z > 0)
  return {W1: dz.T @ x, B1: dz.sum(0), W2: (r @ h)[None], B2: np.array([r.sum()])}


def client_update(p, x, y, steps, lr):
  """ClientUpdate: K full-batch GD steps; Δ = θ_t − θ_local (uphill, as the proofs write it)."""
  q = dict(p)
  for _ in range(steps):
    q = add(q, mlp_grad(q, x, y), -lr)
  return add(p, q, -1.0)


def reference(theta, masks, xs, ys, *, server, lr, compressor, k=0.5, ef=True,
              restart_after=0, restart_from=0, down=None, down_k=0.5):
  """Algorithms 1-4 as written, with a cleaned reading of Algorithm 3 (two-way: H = C(u + ϕ),
  θ ← θ − η H); the implementation keeps η inside its ϕ, equal for positively homogeneous
  compressors with ϕ_impl = η ϕ. Returns the state after every round."""
  err = [zeros_like(theta) for _ in range(N)]
  last = np.full(N, -1)
  m, v, vh, phi = zeros_like(theta), zeros_like(theta), zeros_like(theta), zeros_like(theta)
  out, resets = [], 0
  for t, mask in enumerate(masks):
    ids = np.flatnonzero(mask)
    a, sent = [], []
    for i in ids:
      e = err[i]
      if restart_after and t >= restart_from and last[i] >= 0 and last[i] < t - restart_after:
        e = zeros_like(theta)
        resets += 1
      ai = add(client_update(theta, xs[i], ys[i], STEPS[i], CLIENT_LR), e) if ef else \
          client_update(theta, xs[i], ys[i], STEPS[i], CLIENT_LR)
      ci = compress(compressor, ai, k)
      if ef:
        err[i] = add(ai, ci, -1.0)
      last[i] = t
      a.append(ai)
      sent.append(ci)
    agg = {key: np.mean([c[key] for c in sent], 0) for key in theta}
    mean_a = {key: np.mean([x[key] for x in a], 0) for key in theta}
    if server == "sgd":
      u = agg
    else:
      m = {key: AMS["server_beta1"] * m[key] + (1 - AMS["server_beta1"]) * agg[key] for key in m}
      v = {key: AMS["server_beta2"] * v[key] + (1 - AMS["server_beta2"]) * agg[key] ** 2 for key in v}
      vh = {key: np.maximum(vh[key], v[key]) for key in v}
      u = {key: m[key] / np.sqrt(vh[key] + AMS["server_eps"]) for key in m}
    if down is not None:
      hh = compress(down, add(u, phi), down_k)
      phi = add(add(phi, u), hh, -1.0)
      u = hh
    theta = add(theta, u, -lr)
    diff = lambda x, y: sqnorm(add(x, y, -1.0)) / sqnorm(y)
    out.append(dict(theta=theta, err=[dict(e) for e in err], last=last.copy(), m=m, v=v,
                    v_hat=vh, phi=phi, q_a2=diff(agg, mean_a),
                    q_c2=diff(compress(compressor, mean_a, k), mean_a)))
  return out, resets


def close(actual, expected, what, t, floor=1e-6):
  """rtol 1e-5; atol 1e-5 of the quantity's own scale, at least `floor` (errors e_i are
  differences a − C(a) of larger numbers: float32 cancellation)."""
  expected = np.asarray(expected, np.float64)
  atol = max(1e-5 * float(np.max(np.abs(expected), initial=0.0)), floor)
  np.testing.assert_allclose(np.asarray(actual, np.float64), expected, rtol=1e-5, atol=atol,
                             err_msg=f"{what} after round {t}")


GOLDEN_CASES = [
    # (algo, hp extra, reference kwargs)
    ("fedsgd", dict(compressor="identity"), dict(compressor="identity", ef=False)),
    ("fedef_sgd", dict(compressor="sign"), dict(compressor="sign")),
    ("fedef_sgd", dict(compressor="hvsign", compress_k=0.5),
     dict(compressor="hvsign", k=0.5)),
    ("fedef_ams", dict(compressor="topk", compress_k=0.25), dict(compressor="topk", k=0.25)),
    ("fedsgd", dict(compressor="sign", error_feedback=False),
     dict(compressor="sign", ef=False)),
    ("fedams", dict(compressor="topk", compress_k=0.25, error_feedback=False),
     dict(compressor="topk", k=0.25, ef=False)),
    ("fedef_sgd", dict(compressor="topk", compress_k=0.25, ef_restart_after=2,
                       ef_restart_from=5),
     dict(compressor="topk", k=0.25, restart_after=2, restart_from=5)),
    ("fedef_sgd", dict(compressor="sign", down_compressor="topk", down_compress_k=0.25),
     dict(compressor="sign", down="topk", down_k=0.25)),
    ("fedef_ams", dict(compressor="hvsign", compress_k=0.5, down_compressor="sign"),
     dict(compressor="hvsign", k=0.5, down="sign")),
]


@pytest.mark.parametrize("algo,extra,ref_kw", GOLDEN_CASES,
                         ids=[f"{a}-{'-'.join(f'{k}={v}' for k, v in e.items())}"
                              for a, e, _ in GOLDEN_CASES])
def test_rounds_match_numpy_reference(algo, extra, ref_kw, golden):
  """Algorithms 1-4 under uniform partial participation (3 of 6): θ, every e_i, last_i, the
  AMSGrad moments, the server error ϕ and q_A², q_C² (Appendix C) after every round."""
  task, world, xs, ys = golden
  ams = algo in ("fedams", "fedef_ams")
  lr = 0.05 if ams else 0.7
  hp = dict(client_lr=CLIENT_LR, server_lr=lr, batch_size=max(SIZES), sampling="shuffle",
            client_width=1, **extra)
  if ams:
    hp.update(AMS)
  alg = getattr(fedef, algo).build(task, world, hp)
  server, clients = alg.init(init_key(GOLDEN_SEED))
  masks = masks_of(world, GOLDEN_SEED, GOLDEN_ROUNDS)
  ref, resets = reference(flat(server.params), masks, xs, ys, server="ams" if ams else "sgd",
                          lr=lr, **ref_kw)
  if ref_kw.get("restart_after"):
    # Coverage: resets happen; a lag of exactly S does not reset (strict <); nothing
    # resets before the start round although lags there exceed S. Rounds are the engine's
    # 0-based index t (server.round): ef_restart_from=R runs R plain rounds first.
    lags = _lags(masks)
    after = [lag for t, lag in lags if t >= ref_kw["restart_from"]]
    before = [lag for t, lag in lags if t < ref_kw["restart_from"]]
    assert resets == sum(lag > 2 for lag in after) >= 2
    assert 2 in after and any(lag > 2 for lag in before)
  step = jax.jit(alg.round)
  ef = ref_kw.get("ef", True) and ref_kw["compressor"] != "identity"
  for t in range(GOLDEN_ROUNDS):
    server, clients, metrics = step(server, clients, round_key(GOLDEN_SEED, t))
    r = ref[t]
    assert int(server.round) == t + 1 and float(metrics["num_active"]) == M
    for key, val in flat(server.params).items():
      close(val, r["theta"][key], f"θ {key}", t)
    np.testing.assert_array_equal(np.asarray(clients.last), r["last"])
    if ef:
      err = flat(clients.error)
      for i in range(N):
        for key in err:
          close(err[key][i], r["err"][i][key], f"e_{i} {key}", t)
    else:
      assert clients.error == ()
    if ams:
      for name in ("m", "v", "v_hat"):
        # m averages aggregates of both signs: cancellation, so the scale is the tree's.
        scale = max(float(np.max(np.abs(x))) for x in r[name].values())
        for key, val in flat(getattr(server.opt_state, name)).items():
          close(val, r[name][key], f"AMSGrad {name} {key}", t, floor=1e-5 * scale + 1e-15)
    if "down" in ref_kw:
      for key, val in flat(server.aux.phi).items():
        close(val, lr * r["phi"][key], f"ϕ {key}", t)
    np.testing.assert_allclose(float(metrics["q_a2"]), r["q_a2"], rtol=1e-4, atol=1e-7,
                               err_msg=f"q_a2 round {t}")
    np.testing.assert_allclose(float(metrics["q_c2"]), r["q_c2"], rtol=1e-4, atol=1e-7,
                               err_msg=f"q_c2 round {t}")
  # The compressors did something (test_numpy_compressors_are_per_tensor: per tensor).
  if ref_kw["compressor"] != "identity":
    assert max(x["q_a2"] for x in ref) > 1e-3


def _lags(masks):
  """(round, t − last_i) of every participation that follows an earlier one."""
  last, out = np.full(N, -1), []
  for t, mask in enumerate(masks):
    for i in np.flatnonzero(mask):
      if last[i] >= 0:
        out.append((t, t - last[i]))
      last[i] = t
  return out


def test_numpy_compressors_are_per_tensor():
  """The reference compresses each tensor by itself: a 1-entry tensor passes unchanged
  through TopK and Sign, and TopK-0.25 keeps 1 of 3 and 3 of 12."""
  rng = np.random.default_rng(0)
  tree = {W1: rng.normal(size=(3, 4)), B1: rng.normal(size=3), B2: np.array([-0.7])}
  for name in ("sign", "topk", "hvsign"):
    np.testing.assert_array_equal(compress(name, tree, 0.25)[B2], [-0.7])
  top = compress("topk", tree, 0.25)
  assert np.count_nonzero(top[W1]) == 3 and np.count_nonzero(top[B1]) == 1
  np.testing.assert_allclose(np.abs(compress("sign", tree, 1.0)[B1]), np.mean(np.abs(tree[B1])))


# ---------------------------------------------------------------------------------------
# 2. The error-feedback invariant and frozen errors (Algorithm 2, §4.3), with minibatches


def update_deltas(task, world, hp):
  """(server, key) -> (mask, Δ): every client's Δ_i (uphill sign) of the round from the
  library's ClientUpdate, which the golden test checks against the hand-written one; [n]
  rows, zero for absent clients."""
  @jax.jit
  def run(server, key):
    mask, c, _ = rounds.observe(world, server, key)
    deltas, _ = rounds.train(task, world, hp, server.params, c, key, server.round)
    return mask, c, deltas

  def fn(server, key):
    mask, c, deltas = run(server, key)
    ids = np.asarray(c.ids)[np.asarray(c.valid)]
    out = {}
    for k, v in flat(deltas).items():
      out[k] = np.zeros((world.num_clients,) + v.shape[1:])
      out[k][ids] = -v[:len(ids)]
    return np.asarray(mask), out

  return fn


@pytest.mark.parametrize("compressor,k", [("sign", 0.1), ("topk", 0.2), ("stoc", 0.1)])
def test_error_feedback_invariant_and_frozen_errors(compressor, k):
  """Δ̃_i + e_new == Δ_i + e_old on every participant, where Δ̃_i is C(Δ_i + e_old) (the
  compressors above on the NumPy side; for Stoc the implied Δ̃ = a − e_new must lie on the QSGD
  lattice), and
  mean_M Δ̃_i is exactly the server's step (θ_t − θ_{t+1}) / η. Absent clients' errors
  stay bitwise as they were (§4.3)."""
  task, world = toy_setup(num_clients=6, cohort=3, local_steps=3, batch_size=4)
  eta = 0.8
  hp = dict(client_lr=0.2, server_lr=eta, batch_size=4, compressor=compressor, compress_k=k,
            stoc_bits=2, client_width=1)
  alg = fedef.fedef_sgd.build(task, world, hp)
  server, clients = alg.init(init_key(0))
  step, deltas_of = jax.jit(alg.round), update_deltas(task, world, hp)
  for t in range(5):
    key = round_key(0, t)
    mask, delta = deltas_of(server, key)
    old_err, old_theta = flat(clients.error), flat(server.params)
    old_raw = jax.tree.map(np.asarray, clients.error)
    server, clients, _ = step(server, clients, key)
    new_err, new_raw = flat(clients.error), jax.tree.map(np.asarray, clients.error)
    sent = []
    for i in np.flatnonzero(mask):
      a = add(row(delta, i), row(old_err, i))
      if compressor == "stoc":
        tilde = add(a, row(new_err, i), -1.0)
        for key_, x in a.items():
          level = tilde[key_] / np.linalg.norm(x) * 2  # s = 2 levels for b = 2
          np.testing.assert_allclose(level, np.round(level), atol=1e-4)
          assert np.all(np.abs(np.round(level)) <= 2)
          assert np.all(np.round(level) * np.sign(x) >= 0)
      else:
        tilde = compress(compressor, a, k)
        lhs, rhs = add(tilde, row(new_err, i)), a
        for key_ in a:
          np.testing.assert_allclose(lhs[key_], rhs[key_], rtol=1e-5, atol=1e-6)
      sent.append(tilde)
    for key_ in old_theta:
      step_ = (old_theta[key_] - flat(server.params)[key_]) / eta
      np.testing.assert_allclose(step_, np.mean([s[key_] for s in sent], 0), rtol=1e-4,
                                 atol=1e-6)
    for old, new in zip(jax.tree.leaves(old_raw), jax.tree.leaves(new_raw)):
      np.testing.assert_array_equal(old[~mask], new[~mask])
      assert np.any(old[mask] != new[mask])


# ---------------------------------------------------------------------------------------
# 3. Identity compression is full precision, and Fed-SGD is FedAvg


def _trajectory(alg, rounds_=5, seed=0):
  server, clients = alg.init(init_key(seed))
  step = jax.jit(alg.round)
  out = []
  for t in range(rounds_):
    server, clients, _ = step(server, clients, round_key(seed, t))
    out.append((server.params, server.opt_state, clients))
  return out


@pytest.mark.parametrize("server_opt", ["sgd", "amsgrad"])
def test_identity_equals_full_precision_and_fedavg(server_opt):
  """Algorithm 2 with identity ≡ Fed-SGD / Fed-AMS; Fed-SGD (Algorithm 4) with η ≡ FedAvg with
  server_lr η, uniform weights; bitwise, same keys, minibatches, 3 of 6 clients."""
  task, world = toy_setup(num_clients=6, cohort=3, local_steps=3, batch_size=4)
  base = dict(client_lr=0.3, batch_size=4, server_lr=0.6 if server_opt == "sgd" else 0.05,
              client_width=1,
              **(AMS if server_opt == "amsgrad" else {}))
  ef_name, full_name = (("fedef_sgd", "fedsgd") if server_opt == "sgd"
                        else ("fedef_ams", "fedams"))
  ef = _trajectory(getattr(fedef, ef_name).build(task, world, {**base, "compressor": "identity"}))
  full = _trajectory(getattr(fedef, full_name).build(task, world, base))
  avg = _trajectory(fedavg.build(task, world, {**base, "server_opt": server_opt,
                                               "weighting": "uniform"}))
  for (p_ef, o_ef, c_ef), (p_full, o_full, _), (p_avg, o_avg, _) in zip(ef, full, avg):
    jax.tree.map(np.testing.assert_array_equal, p_ef, p_full)
    jax.tree.map(np.testing.assert_array_equal, p_ef, p_avg)
    jax.tree.map(np.testing.assert_array_equal, o_ef, o_avg)
    assert all(not np.any(e) for e in jax.tree.leaves(c_ef.error))  # no error to keep
  # The runs moved (the equalities are not of frozen models).
  first = jax.tree.leaves(ef[0][0])[0]
  assert not np.allclose(first, jax.tree.leaves(ef[-1][0])[0])


# ---------------------------------------------------------------------------------------
# 4. Virtual sequences (§4.3 under partial participation, §6 two-way)


@pytest.mark.parametrize("compressor", ["topk", "sign"])
def test_virtual_sequence_under_partial_participation(compressor):
  """x_t = θ_t − (η/m) Σ_{i=1..n} e_{t,i} obeys x_{t+1} = x_t − η (1/m) Σ_{i∈M_t} Δ_{t,i}."""
  task, world = toy_setup(num_clients=6, cohort=3, local_steps=3, batch_size=4)
  eta, m = 0.8, 3
  hp = dict(client_lr=0.2, server_lr=eta, batch_size=4, compressor=compressor, compress_k=0.1,
            client_width=1)
  alg = fedef.fedef_sgd.build(task, world, hp)
  server, clients = alg.init(init_key(1))
  step, deltas_of = jax.jit(alg.round), update_deltas(task, world, hp)
  virtual = lambda s, c: {k: v - eta / m * flat(c.error)[k].sum(0)
                          for k, v in flat(s.params).items()}
  for t in range(6):
    key = round_key(1, t)
    mask, delta = deltas_of(server, key)
    x = virtual(server, clients)
    server, clients, _ = step(server, clients, key)
    x_new = virtual(server, clients)
    assert mask.sum() == m
    for k in x:
      np.testing.assert_allclose(x_new[k], x[k] - eta / m * delta[k][mask].sum(0),
                                 rtol=1e-5, atol=1e-6)
    theta_step = sum(np.sum((flat(server.params)[k] - x_new[k]) ** 2) for k in x)
    assert theta_step > 0  # errors are nonzero: θ and x differ


@pytest.mark.parametrize("server_opt", ["sgd", "amsgrad"])
def test_two_way_virtual_sequence(server_opt):
  """Algorithm 3 in the implementation's form (η inside the server error ϕ): the server sends
  H = C_down(η u_t + ϕ_t) and keeps ϕ_{t+1} = η u_t + ϕ_t − H, so θ̃_t = θ_t − ϕ_t obeys
  θ̃_{t+1} = θ̃_t − η u_t (u_t = Δ̄̃_t for SGD, m_t / sqrt(v̂_t + ε) for AMSGrad), and with the
  clients' errors x_t = θ̃_t − (η/m) Σ_i e_{t,i} obeys x_{t+1} = x_t − (η/m) Σ_{M_t} Δ_{t,i}."""
  task, world = toy_setup(num_clients=6, cohort=3, local_steps=3, batch_size=4)
  eta, m = (0.8, 3) if server_opt == "sgd" else (0.05, 3)
  hp = dict(client_lr=0.2, server_lr=eta, batch_size=4, compressor="sign",
            down_compressor="topk", down_compress_k=0.2, **AMS, client_width=1)
  alg = (fedef.fedef_sgd if server_opt == "sgd" else fedef.fedef_ams).build(task, world, hp)
  server, clients = alg.init(init_key(2))
  step, deltas_of = jax.jit(alg.round), update_deltas(task, world, hp)
  for t in range(6):
    key = round_key(2, t)
    mask, delta = deltas_of(server, key)
    theta, phi, err = flat(server.params), flat(server.aux.phi), flat(clients.error)
    server, clients, _ = step(server, clients, key)
    theta2, phi2, err2 = flat(server.params), flat(server.aux.phi), flat(clients.error)
    if server_opt == "sgd":
      u = {k: (delta[k][mask] + err[k][mask] - err2[k][mask]).mean(0) for k in theta}
    else:
      mo, vh = flat(server.opt_state.m), flat(server.opt_state.v_hat)
      u = {k: mo[k] / np.sqrt(vh[k] + AMS["server_eps"]) for k in theta}
    for k in theta:
      np.testing.assert_allclose(theta2[k] - phi2[k], theta[k] - phi[k] - eta * u[k],
                                 rtol=1e-5, atol=1e-6)
      x, x2 = (theta[k] - phi[k] - eta / m * err[k].sum(0),
               theta2[k] - phi2[k] - eta / m * err2[k].sum(0))
      if server_opt == "sgd":
        np.testing.assert_allclose(x2, x - eta / m * delta[k][mask].sum(0), rtol=1e-5,
                                   atol=1e-6)
    assert sqnorm(phi2) > 0  # the downlink drops something


# ---------------------------------------------------------------------------------------
# 5. Bits (docs/papers/fedef.md, bits per message) through engine.run

MLP_D = 784 * 200 + 200 + 200 * 10 + 10     # 159,010 in 4 tensors
FULL_BITS = 32 * MLP_D                      # 5,088,320
SIGN_BITS = MLP_D + 4 * 32                  # 159,138
TOPK_01_BITS = 32 * (1568 + 2 + 20 + 1)     # nnz 1,591 -> 50,912
HVSIGN_1_BITS = (15680 + 20 + 200 + 1) + 4 * 32  # 16,029


@pytest.fixture(scope="module")
def mnist_mlp():
  """The 784-200-10 MLP on 4 clients of random 784-feature data, 2 of them per round."""
  ds = toy_dataset(num_clients=4, dim=784, classes=10, sizes=[3, 4, 3, 4])
  task = make_task(ds, models.make("mlp", num_classes=10, is_image=False, mlp_hidden=(200,)))
  world = world_lib.make(participation.uniform(4, 2), np.full(4, 1))
  return task, world


def test_message_bits_of_the_784_200_10_mlp(mnist_mlp):
  """The message sizes: Sign 159,138; TopK-0.01 nnz 1,591 -> 50,912; hv-Sign-0.1 16,029; full
  precision 32 d; the ratios ≈ 32×, ≈ 100×, ≈ 317×."""
  assert (FULL_BITS, SIGN_BITS, TOPK_01_BITS) == (5_088_320, 159_138, 50_912)
  task, _ = mnist_mlp
  shapes = jax.eval_shape(task.init_params, jax.random.PRNGKey(0))
  assert sum(a.size for a in jax.tree.leaves(shapes)) == MLP_D
  for hp, bits in ((dict(compressor="identity"), FULL_BITS), (dict(compressor="sign"), SIGN_BITS),
                   (dict(compressor="topk", compress_k=0.01), TOPK_01_BITS),
                   (dict(compressor="hvsign", compress_k=0.1), HVSIGN_1_BITS)):
    assert settings.make(compression.Compression, hp).compressor_of().bits(shapes) == bits, hp
  assert (round(FULL_BITS / SIGN_BITS, 1), round(FULL_BITS / TOPK_01_BITS, 1),
          round(FULL_BITS / HVSIGN_1_BITS)) == (32.0, 99.9, 317)


@pytest.mark.parametrize("algo,extra,up,down", [
    ("fedef_sgd", dict(compressor="sign", down_compressor="topk", down_compress_k=0.01),
     SIGN_BITS, TOPK_01_BITS),
    ("fedsgd", dict(compressor="hvsign", compress_k=0.1, error_feedback=False),
     HVSIGN_1_BITS, None),
])
def test_cumulative_bits_through_the_engine(algo, extra, up, down, mnist_mlp):
  """cum uplink bits averaged over all n clients = t (m/n) bits, per participant = t bits;
  downlink: the dense model to each participant (t (m/n) 32 d), or with two-way compression
  the compressed broadcast to every client (t bits(C_down)); an engine block reports the last
  value of a cum_* metric (not the block mean)."""
  task, world = mnist_mlp
  hp = dict(client_lr=0.01, server_lr=0.1, batch_size=4, client_width=1, **extra)
  out = engine.run(lambda h: getattr(fedef, algo).build(task, world, h), task, hp, seeds=[0],
                   rounds=6, eval_every=3)
  h = out.history
  np.testing.assert_array_equal(h.rounds, [0, 3, 6])
  t = np.array([3.0, 6.0])
  got = lambda name: h.metrics[name][1:, 0, 0]
  assert np.isnan(h.metrics["cum_uplink_bits"][0, 0, 0])
  np.testing.assert_array_equal(got("cum_uplink_bits"), t * 2 / 4 * up)
  np.testing.assert_array_equal(got("cum_uplink_bits_per_participant"), t * up)
  np.testing.assert_array_equal(got("cum_downlink_bits"),
                                t * down if down else t * 2 / 4 * FULL_BITS)
  np.testing.assert_allclose(got("compression_ratio"), FULL_BITS / up, rtol=1e-7)
  assert np.all(got("num_active") == 2)


def test_cumulative_bits_are_exact_after_many_rounds(mnist_mlp):
  """C6 (tests/claims/test_fedef_claims.py): after T rounds the uplink total is exactly
  T p bits(message); bit counts are kept exactly, not as float32 sums. Full precision, 3 of 4
  clients, 100 rounds:
  every increment 3/4 · 5,088,320 = 3,816,240 and the total 381,624,000 are float32 numbers,
  so a float32 metric can carry them exactly; a running float32 sum drifts (to 381,624,448)."""
  task, _ = mnist_mlp
  world = world_lib.make(participation.uniform(4, 3), np.full(4, 1))
  hp = dict(client_lr=0.01, server_lr=0.1, batch_size=4, client_width=1, compressor="identity")
  out = engine.run(lambda h: fedef.fedsgd.build(task, world, h), task, hp, seeds=[0],
                   rounds=100, eval_every=100)
  exact = 100 * 3 * FULL_BITS // 4
  assert float(np.float32(exact)) == exact and float(np.float32(exact // 100)) == exact // 100
  assert out.history.metrics["cum_uplink_bits"][-1, 0, 0] == exact
  assert out.history.metrics["cum_downlink_bits"][-1, 0, 0] == exact


# ---------------------------------------------------------------------------------------
# 6. The full-batch gradient norm (Figures 8-9)


@pytest.mark.parametrize("examples", [0, 17])
def test_grad_norm_sq_is_the_full_batch_gradient_norm(examples):
  """Task.grad_norm_sq = ‖∇ mean loss over the scored training set‖², in chunks with padding
  (chunk 7 does not divide the set); evaluate() reports it with eval_grad_norm."""
  ds = toy_dataset(num_clients=6, dim=5)
  task = make_task(ds, models.make("mlp", num_classes=3, is_image=False, mlp_hidden=(8,)),
                   train_eval_examples=examples, eval_grad_norm=True)
  task = dataclasses.replace(task, eval_chunk=7)
  n = 17 if examples else ds.train.num_examples
  assert task.train_eval_x.shape[0] == n and n % 7
  params = task.init_params(jax.random.PRNGKey(3))
  x, y = task.train_eval_x, task.train_eval_y
  if examples == 0:  # all of them
    np.testing.assert_array_equal(np.asarray(x), np.asarray(task.x))
  g = jax.grad(lambda p: task.loss(p, x, y, jnp.ones(n)))(params)
  expected = sum(float(jnp.sum(jnp.square(a))) for a in jax.tree.leaves(g))
  assert expected > 1e-3
  np.testing.assert_allclose(float(task.grad_norm_sq(params)), expected, rtol=1e-5)
  if examples:
    np.testing.assert_allclose(float(task.evaluate(params)["grad_norm_sq"]), expected,
                               rtol=1e-5)


# ---------------------------------------------------------------------------------------
# 7. Bad input


def test_bad_input_is_a_usage_error(monkeypatch):
  task, world = toy_setup()
  hp = dict(client_lr=0.1, batch_size=4, compressor="sign")
  with pytest.raises(UsageError, match="error_feedback"):
    fedef.fedef_sgd.build(task, world, {**hp, "error_feedback": False})
  with pytest.raises(UsageError, match="error_feedback"):
    fedef.fedef_ams.build(task, world, {**hp, "error_feedback": False})
  with pytest.raises(UsageError, match="adam"):
    fedef.fedams.build(task, world, {**hp, "server_opt": "adam"})
  with pytest.raises(UsageError, match="amsgrad"):
    fedef.fedsgd.build(task, world, {**hp, "server_opt": "amsgrad"})
  with pytest.raises(UsageError, match="--compressor='bogus' is not valid; valid: identity"):
    fedef.fedef_sgd.build(task, world, {**hp, "compressor": "bogus"})
  with pytest.raises(UsageError, match="--down_compressor='bogus' is not valid; valid: none"):
    fedef.fedsgd.build(task, world, {**hp, "down_compressor": "bogus"})
  # Memory: the n x d error state is refused in one line naming clients and parameters.
  d = sum(a.size for a in jax.tree.leaves(task.init_params(jax.random.PRNGKey(0))))
  monkeypatch.setattr(device_memory, "device_bytes", lambda: 6 * d * 4)  # 80% of it is too little
  with pytest.raises(UsageError) as info:
    fedef.fedef_sgd.build(task, world, hp)
  msg = str(info.value)
  assert "\n" not in msg and f"6 clients x {d} parameters" in msg, msg
  # Nothing to keep, nothing refused: full precision, and compression without feedback.
  fedef.fedef_sgd.build(task, world, {**hp, "compressor": "identity"})
  fedef.fedsgd.build(task, world, {**hp, "error_feedback": False})
