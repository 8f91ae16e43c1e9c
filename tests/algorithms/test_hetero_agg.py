"""Loss-aware aggregation (docs/papers/hetero_agg.md): the weight functions, the exact
quadratic toys Q1/Q2 end to end through the algorithm, Q3 (stochastic) with the
weight functions, equivalences with FedAvg,
the vectorized loss pass, the partitions, the model and the curve statistics (Tables 3-4)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import toy_setup
from fedjax_bench import models
from fedjax_bench.algorithms import fedavg, fedmax, fednova, loss_weights as lw
from fedjax_bench.task.build import make_task
from fedjax_bench.data import partition
from fedjax_bench.data.federated import Dataset, FederatedData
from fedjax_bench.errors import UsageError
from fedjax_bench.sim import participation, world as world_lib

HP = dict(client_lr=0.1, batch_size=4, sampling="shuffle", server_opt="sgd", server_lr=1.0,
          client_width=0, softmax_beta=1.0, fedmax_k=2, alpha_floor=0.0)


def _random_cases():
  rng = np.random.default_rng(0)
  for n in (1, 2, 7, 50):
    p = rng.uniform(0.1, 1, n)
    yield rng.exponential(size=n), p / p.sum()
    yield np.round(rng.uniform(0, 3, n), 0), p / p.sum()  # many ties


# --- the weight functions (§2.3, eq. 8) -----------------------------------------------------

@pytest.mark.parametrize("name", lw.STRATEGIES)
def test_weights_are_on_the_simplex(name):
  for ell, p in _random_cases():
    for beta in (0.0, 1.0, 30.0):
      a = np.asarray(lw.WEIGHTS[name](jnp.asarray(ell), jnp.asarray(p), k=min(3, len(p)),
                                       beta=beta))
      assert (a >= 0).all() and abs(a.sum() - 1) < 1e-6, (name, ell, a)


def test_weight_limits():
  ell = jnp.array([0.3, 2.0, 0.7, 1.1, 0.2])
  p = jnp.array([0.1, 0.2, 0.3, 0.25, 0.15])
  np.testing.assert_allclose(lw.fedsoftmax(ell, p, beta=0.0), p, rtol=1e-6)
  np.testing.assert_array_equal(lw.fedsoftmax(ell, p, beta=1e4), lw.fedmax(ell, p))
  np.testing.assert_array_equal(lw.fedmax_k(ell, p, k=1), lw.fedmax(ell, p))
  np.testing.assert_allclose(lw.fedmax_k(ell, p, k=5), lw.uniform(ell, p))
  np.testing.assert_array_equal(lw.fedmax(ell, p), [0, 1, 0, 0, 0])
  np.testing.assert_allclose(lw.fedmax_k(ell, p, k=2), [0, .5, 0, .5, 0])
  # exact ties: FedMax splits, FedMax(k) takes the lower index (top_k order)
  tie = jnp.array([1.0, 3.0, 3.0, 0.5])
  q = jnp.full(4, 0.25)
  np.testing.assert_array_equal(lw.fedmax(tie, q), [0, .5, .5, 0])
  np.testing.assert_array_equal(lw.fedmax_k(tie, q, k=1), [0, 1, 0, 0])
  # clients outside the cohort (p = 0) never get weight
  out = jnp.array([0.0, 0.5, 0.0, 0.5])
  for name in lw.STRATEGIES:
    a = np.asarray(lw.WEIGHTS[name](jnp.array([9.0, 1.0, 9.0, 2.0]), out, k=2, beta=1.0))
    assert a[0] == a[2] == 0 and abs(a.sum() - 1) < 1e-6, name


def test_floor_mix_bounds_kappa_below():
  ell, p = jnp.array([5.0, 0.1, 0.2]), jnp.array([0.2, 0.5, 0.3])
  a = lw.floor_mix(lw.fedmax(ell, p), p, 0.25)
  assert np.all(np.asarray(a) / np.asarray(p) >= 0.25 - 1e-7)
  assert abs(float(a.sum()) - 1) < 1e-6


def test_rho_invariants():
  for ell, p in _random_cases():
    ell, p = jnp.asarray(ell) + 0.01, jnp.asarray(p)
    assert abs(float(lw.rho(lw.fedavg(ell, p), ell, p)) - 1) < 1e-5
    assert float(lw.rho(lw.fedsoftmax(ell, p, beta=2.0), ell, p)) >= 1 - 1e-5
    r_max = float(lw.rho(lw.fedmax(ell, p), ell, p))
    np.testing.assert_allclose(r_max, float(jnp.max(ell) / jnp.dot(p, ell)), rtol=1e-5)
    for name in lw.STRATEGIES:  # FedMax's ρ is the maximum over the simplex
      assert float(lw.rho(lw.WEIGHTS[name](ell, p, k=2, beta=3.0), ell, p)) <= r_max + 1e-5


def test_fednova_coefficients():
  p, tau = jnp.array([0.5, 0.3, 0.2]), jnp.array([2, 4, 8])
  c = np.asarray(lw.fednova_coefficients(p, tau))
  np.testing.assert_allclose(c, np.array([0.5, 0.3, 0.2]) * 3.8 / np.array([2, 4, 8]),
                             rtol=1e-6)
  np.testing.assert_allclose(lw.fednova_coefficients(p, jnp.array([3, 3, 3])), p, rtol=1e-6)


# --- the closed-form quadratic toys, end to end through the algorithm -------------------------

def _quadratic(a, c, copies):
  """Client i holds ``copies[i]`` copies of one example with loss (a_i/2)(w - c_i)^2,
  written ½(√a_i w − √a_i c_i)² for the bias-free ``linear`` model: F_i is exact and
  p_i ∝ copies[i]."""
  xs = [np.full((m, 1), np.sqrt(ai), np.float32) for ai, m in zip(a, copies)]
  ys = [np.full(m, np.sqrt(ai) * ci, np.float32) for ai, ci, m in zip(a, c, copies)]
  ds = Dataset("quadratic_toy", FederatedData.from_clients(xs, ys), xs[0], ys[0], 1, (1,),
               False)
  task = make_task(ds, models.make("linear", num_classes=1, is_image=False),
                   loss_type="squared_error", train_eval_examples=0)
  return task


def _trajectory(algo, task, hp, *, w0, rounds, local_steps):
  """w_0 .. w_rounds of full-batch GD (batch = the largest client) under ``algo``."""
  n = task.num_clients
  world = world_lib.make(participation.full(n), np.full(n, local_steps))
  hp = {**HP, **hp, "batch_size": task.max_count}
  alg = algo.build(task, world, hp)
  server, clients = alg.init(jax.random.PRNGKey(0))
  server = server._replace(params=jax.tree.map(lambda a: jnp.full_like(a, w0), server.params))

  def step(carry, t):
    server, clients = carry
    server, clients, _ = alg.round(server, clients, jax.random.fold_in(jax.random.PRNGKey(1), t))
    return (server, clients), jax.tree.leaves(server.params)[0].reshape(())

  _, ws = jax.jit(lambda s, c: jax.lax.scan(step, (s, c), jnp.arange(rounds)))(server, clients)
  return np.concatenate([[w0], np.asarray(ws)])


Q1 = dict(a=(0.25, 0.5, 0.75, 1.0), c=(0.0,) * 4, copies=(4, 3, 2, 1))
# Q1 (Γ = 0, r_i = (1 − η a_i)^E, w_t+1 = Σ α_i r_i w_t): (algorithm, hyperparameters) -> w_1, w_2,
# w_3, w_10
Q1_TABLE = [
    (fedmax.fedsoftmax, dict(softmax_beta=0.0), (2.3125, 1.336914, 0.772903, 1.668e-02)),
    (fedmax.fedmax, {}, (1.0, 0.25, 0.0625, 3.815e-06)),
    (fedmax.fedmax_k, dict(fedmax_k=2), (1.28125, 0.410400, 0.131456, 4.548e-05)),
    (fedmax.fedsoftmax, dict(softmax_beta=0.1), (2.16348, 1.227879, 0.705726, 1.519e-02)),
    (fedmax.fedsoftmax, dict(softmax_beta=1.0), (1.180741, 0.644471, 0.366546, 7.851e-03)),
    (fedmax.fedsoftmax, dict(softmax_beta=10.0), (1.0, 0.357686, 0.196213, 4.142e-03)),
]


@pytest.mark.parametrize("algo,hp,expected", Q1_TABLE)
def test_q1_error_free_toy_matches_the_closed_form(algo, hp, expected):
  w = _trajectory(algo, _quadratic(**Q1), {**hp, "client_lr": 0.5}, w0=4.0, rounds=10,
                  local_steps=2)
  # the table's precision: 6 decimals for w_1..w_3, 4 significant digits for w_10
  np.testing.assert_allclose(w[1:4], expected[:3], atol=1e-6, rtol=1e-6)
  np.testing.assert_allclose(w[10], expected[3], rtol=2e-3)


def test_q1_fedmax_is_the_fastest_aggregation_and_softmax_tends_to_fedavg_rate():
  task = _quadratic(**Q1)
  run = lambda algo, **hp: _trajectory(algo, task, {"client_lr": 0.5, **hp}, w0=4.0,
                                       rounds=10, local_steps=2)
  w_max = run(fedmax.fedmax)
  for algo, hp, _ in Q1_TABLE:
    assert np.all(w_max[1:] <= run(algo, **hp)[1:] + 1e-7)
  w = run(fedmax.fedsoftmax, softmax_beta=1.0)
  np.testing.assert_allclose(w[10] / w[9], 0.578125, atol=1e-4)


def test_q1_counter_check_large_steps_make_fedmax_slower():
  task = _quadratic(**Q1)
  w_max = _trajectory(fedmax.fedmax, task, {"client_lr": 1.8}, w0=4.0, rounds=3, local_steps=2)
  w_avg = _trajectory(fedmax.fedsoftmax, task, {"client_lr": 1.8, "softmax_beta": 0.0},
                      w0=4.0, rounds=3, local_steps=2)
  np.testing.assert_allclose(w_max[1] / 4.0, 0.64, rtol=1e-5)
  np.testing.assert_allclose(w_avg[1] / 4.0, 0.2125, rtol=1e-5)


Q2 = dict(a=(1.0, 1.0, 1.0), c=(-1.0, 0.0, 2.0), copies=(5, 3, 2))


@pytest.mark.parametrize("algo,hp,limit", [
    (fedmax.fedsoftmax, dict(softmax_beta=0.0), -0.1),
    (fedmax.fedsoftmax, dict(softmax_beta=0.1), -0.030381),
    (fedmax.fedsoftmax, dict(softmax_beta=0.5), 0.159139),
    (fedmax.fedsoftmax, dict(softmax_beta=1.0), 0.275689),
    (fedmax.fedsoftmax, dict(softmax_beta=2.0), 0.371285),
    (fedmax.fedmax_k, dict(fedmax_k=2), 0.5),
])
def test_q2_biased_limits_match_the_closed_form(algo, hp, limit):
  w = _trajectory(algo, _quadratic(**Q2), {**hp, "client_lr": 0.1}, w0=5.0, rounds=400,
                  local_steps=2)
  np.testing.assert_allclose(w[-1], limit, atol=1e-5)


def test_q2_fedmax_two_cycle_and_softmax_beta5_cycle():
  task = _quadratic(**Q2)
  w = _trajectory(fedmax.fedmax, task, {"client_lr": 0.1}, w0=5.0, rounds=400, local_steps=2)
  np.testing.assert_allclose(sorted(w[-2:]), [0.342541, 0.657459], atol=1e-5)
  w = _trajectory(fedmax.fedsoftmax, task, {"client_lr": 0.1, "softmax_beta": 5.0}, w0=5.0,
                  rounds=400, local_steps=2)
  np.testing.assert_allclose(sorted(w[-2:]), [0.34802, 0.54533], atol=1e-4)


@pytest.mark.parametrize("algo,hp", [(fedmax.fedsoftmax, dict(softmax_beta=1.0)),
                                     (fedmax.fedmax, {}), (fedavg, {})])
def test_lr_decay_per_round_is_the_client_schedule(algo, hp):
  """One client, F(w) = (a/2)(w − c)², one GD step per round: w_{t+1} = w_t − η_t a (w_t − c)
  with η_t = η_0 · 0.99^t, for the paper's algorithms and for FedAvg alike
  (core/schedules.py applies it)."""
  a, c, eta0, w0 = 0.5, 1.0, 0.3, 4.0
  w = _trajectory(algo, _quadratic((a,), (c,), (3,)),
                  {**hp, "client_lr": eta0, "lr_decay_per_round": 0.99}, w0=w0, rounds=2,
                  local_steps=1)
  w1 = w0 - eta0 * a * (w0 - c)              # 3.55
  w2 = w1 - eta0 * 0.99 * a * (w1 - c)       # 3.171325
  np.testing.assert_allclose(w[1:], [w1, w2], rtol=1e-6)
  w_const = _trajectory(algo, _quadratic((a,), (c,), (3,)), {**hp, "client_lr": eta0}, w0=w0,
                        rounds=2, local_steps=1)
  assert abs(w_const[2] - w[2]) > 1e-3  # the decay is not a no-op

def test_q1_q2_weight_functions_in_float64():
  """The Q1/Q2 recursions with the library's weight functions in float64, to 1e-6."""
  with jax.enable_x64(True):
    a, p = np.array(Q1["a"]), np.array([0.4, 0.3, 0.2, 0.1])
    r = (1 - 0.5 * a) ** 2
    w = 4.0
    for _ in range(3):
      alpha = lw.fedsoftmax(jnp.asarray(a * w * w / 2), jnp.asarray(p), beta=1.0)
      w = float(np.dot(np.asarray(alpha), r)) * w
    np.testing.assert_allclose(w, 0.366546, atol=1e-6)
    c, p = np.array(Q2["c"]), np.array([0.5, 0.3, 0.2])
    w = 5.0
    for _ in range(400):
      alpha = np.asarray(lw.fedsoftmax(jnp.asarray((w - c) ** 2 / 2), jnp.asarray(p), beta=2.0))
      w = float(np.dot(alpha, c + 0.81 * (w - c)))
    np.testing.assert_allclose(w, 0.371285, atol=1e-6)
    np.testing.assert_allclose(alpha, [0.5074, 0.0533, 0.4393], atol=1e-4)



def _q3(weights, c, *, rounds=3000, seed=0):
  """Q3 (Research Question 3) in float64: N = 10, d = 5, F_i = (a_i/2)‖w − c_i‖²,
  a_i ~ U(0.2, 1), E = 5 local SGD steps with N(0, I) gradient noise at η = 1/(μ(s + γ)), s the
  global step (the theory counts local steps), μ = min a, L = max a, γ = 4L/μ; ℓ_i = F_i(w_t)
  (F_i* = 0). p is ours (p_i ∝ U(0.5, 1.5) here). Per round: ‖α − p‖₁, α and ρ."""
  n, d, steps = 10, 5, 5
  rng = np.random.default_rng(seed)
  a = rng.uniform(0.2, 1.0, n)
  p = rng.uniform(0.5, 1.5, n)
  p = p / p.sum()
  mu, gamma = a.min(), 4 * a.max() / a.min()
  a, p, c = jnp.asarray(a), jnp.asarray(p), jnp.asarray(c, jnp.float64)

  def one_round(w, r):
    ell = 0.5 * a * jnp.sum((w - c) ** 2, axis=1)
    alpha = weights(ell, p)
    wi = jnp.broadcast_to(w, (n, d))
    for e in range(steps):
      noise = jax.random.normal(jax.random.fold_in(jax.random.PRNGKey(seed), r * steps + e),
                                (n, d), jnp.float64)
      wi = wi - (a[:, None] * (wi - c) + noise) / (mu * (r * steps + e + gamma))
    return alpha @ wi, (jnp.sum(jnp.abs(alpha - p)), alpha, lw.rho(alpha, ell, p))

  _, out = jax.jit(lambda w: jax.lax.scan(one_round, w, jnp.arange(rounds)))(jnp.full(d, 5.0))
  return np.asarray(p), *map(np.asarray, out)


def test_q3_stochastic_alpha_tends_to_p_at_rate_1_over_t_iid_and_to_a_tilt_non_iid():
  softmax = lambda ell, p: lw.fedsoftmax(ell, p, beta=1.0)
  with jax.enable_x64(True):
    # Γ = 0: ‖α_r − p‖₁ · r stays O(1) (an independent NumPy calibration: 0.03–0.13 over
    # rounds 10–3000).
    # Single-run values are noisy, so compare medians over windows of rounds.
    _, l1, _, rho = _q3(softmax, np.zeros((10, 5)))
    r = np.arange(len(l1))
    windows = [(10, 20), (30, 60), (100, 200), (300, 600), (1000, 2000), (2000, 3000)]
    scaled = [np.median((l1 * r)[lo:hi]) for lo, hi in windows]
    assert 0.01 <= min(scaled) and max(scaled) <= 0.2, scaled
    assert np.median(l1[2000:]) < np.median(l1[10:20]) / 50
    assert rho.min() >= 1 - 1e-12  # exponential tilting
    # Γ > 0, one outlier client: ‖α − p‖₁ settles at a fixed limit (calibration: 0.55–0.58) and
    # α up-weights the outlier (calibration: 0.20 -> 0.44).
    c = np.zeros((10, 5))
    c[0] = 2.0
    p, l1, alpha, rho = _q3(softmax, c)
    settled = [np.median(l1[lo:hi]) for lo, hi in ((10, 20), (100, 1000), (2000, 3000))]
    assert all(0.5 <= v <= 0.6 for v in settled) and abs(settled[2] - settled[1]) < 0.01, settled
    assert alpha[2000:, 0].mean() > 2.5 * p[0]
    assert rho.min() >= 1 - 1e-12
    # ρ ≡ 1 for FedAvg; ρ_FedMax = max ℓ / p·ℓ, recomputed from its one-hot α
    _, _, _, rho = _q3(lw.fedavg, c, rounds=200)
    np.testing.assert_allclose(rho, 1.0, rtol=1e-12)
    _, _, alpha, rho = _q3(lw.fedmax, c, rounds=200)
    np.testing.assert_array_equal(alpha.max(axis=1), 1.0)
    assert (rho >= 1).all() and (rho > 1.5).any()

# --- equivalences and the vectorized pieces ---------------------------------------------------

def _run_rounds(build, rounds=3, seed=0):
  alg = build
  server, clients = alg.init(jax.random.PRNGKey(seed))
  out = []
  for t in range(rounds):
    server, clients, m = jax.jit(alg.round)(server, clients, jax.random.fold_in(
        jax.random.PRNGKey(seed + 1), t))
    out.append(m)
  return server, out


def test_fedsoftmax_beta0_and_fednova_equal_steps_are_fedavg_data_size():
  task, world = toy_setup(num_clients=6, part=participation.full(6), local_steps=3)
  ref, _ = _run_rounds(fedavg.build(task, world, {**HP, "weighting": "data_size"}))
  for alg in (fedmax.fedsoftmax.build(task, world, {**HP, "softmax_beta": 0.0}),
              fednova.build(task, world, HP)):
    got, _ = _run_rounds(alg)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                 got.params, ref.params)


def test_partial_participation_weights_only_the_cohort():
  task, world = toy_setup(num_clients=6, cohort=3, local_steps=2)
  alg = fedmax.fedsoftmax.build(task, world, {**HP, "record_alpha": True})
  _, metrics = _run_rounds(alg, rounds=2)
  for m in metrics:
    alpha = np.array([float(m[fedmax.alpha_name(i)]) for i in range(6)])
    assert (alpha > 0).sum() == 3 and abs(alpha.sum() - 1) < 1e-6


def test_client_losses_equal_a_per_client_loop():
  task, _ = toy_setup(num_clients=6, model="mlp", sizes=[7, 0, 9, 3000, 1, 12])
  params = task.init_params(jax.random.PRNGKey(3))
  got = np.asarray(jax.jit(lambda p: lw.client_losses(task, p))(params))
  off, cnt = np.asarray(task.offsets), np.asarray(task.counts)
  for i in range(6):
    s = slice(off[i], off[i] + cnt[i])
    want = 0.0 if cnt[i] == 0 else float(task.loss(params, task.x[s], task.y[s],
                                                   jnp.ones(cnt[i])))
    np.testing.assert_allclose(got[i], want, rtol=1e-5, atol=1e-7)


def test_cohort_losses_equal_a_per_client_loop_and_skip_the_rest():
  """The cohort's own pass: clients of several chunks (3,000 examples), of none, a padding
  row that repeats a cohort client; the full-population slab takes `client_losses`."""
  from fedjax_bench.core import client_scores
  from fedjax_bench.core.cohort import Cohort
  task, _ = toy_setup(num_clients=6, model="mlp", sizes=[7, 0, 9, 3000, 1, 12])
  params = task.init_params(jax.random.PRNGKey(3))
  assert task.max_count > client_scores.COHORT_CHUNK  # client 3 takes several chunks
  off, cnt = np.asarray(task.offsets), np.asarray(task.counts)
  want = [0.0 if c == 0 else float(task.loss(params, task.x[o:o + c], task.y[o:o + c],
                                             jnp.ones(c))) for o, c in zip(off, cnt)]
  ids, valid = jnp.array([3, 1, 5, 3]), jnp.array([True, True, True, False])
  cohort = Cohort(ids=ids, valid=valid)
  for width in (0, 1, 4):
    got = np.asarray(jax.jit(lambda p: lw.cohort_losses(task, p, cohort, width=width))(params))
    np.testing.assert_allclose(got, [0, want[1], 0, want[3], 0, want[5]], rtol=1e-5,
                               atol=1e-7)
  everyone = Cohort(ids=jnp.arange(6), valid=jnp.ones(6, bool))
  np.testing.assert_array_equal(lw.cohort_losses(task, params, everyone),
                                lw.client_losses(task, params))


def test_partial_participation_weights_follow_the_cohorts_losses():
  """FedSoftMax with 3 of 6 clients a round: α ∝ p exp(β ℓ) over the cohort, ℓ from a
  per-client loop at the round's start model."""
  task, world = toy_setup(num_clients=6, cohort=3, local_steps=2, model="mlp",
                          sizes=[7, 300, 9, 40, 5, 12])
  beta = 2.0
  alg = fedmax.fedsoftmax.build(task, world, {**HP, "record_alpha": True,
                                              "softmax_beta": beta})
  server, clients = alg.init(jax.random.PRNGKey(0))
  _, _, m = jax.jit(alg.round)(server, clients, jax.random.PRNGKey(5))
  alpha = np.array([float(m[fedmax.alpha_name(i)]) for i in range(6)])
  cohort = np.flatnonzero(alpha > 0)
  assert len(cohort) == 3
  off, cnt = np.asarray(task.offsets), np.asarray(task.counts)
  ell = np.array([float(task.loss(server.params, task.x[off[i]:off[i] + cnt[i]],
                                  task.y[off[i]:off[i] + cnt[i]], jnp.ones(cnt[i])))
                  for i in cohort])
  want = cnt[cohort] * np.exp(beta * ell)
  np.testing.assert_allclose(alpha[cohort], want / want.sum(), rtol=1e-5)


def test_fedmax_round_equals_a_per_client_python_loop():
  """The vectorized round against a loop: losses per client, argmax, that client's model."""
  task, world = toy_setup(num_clients=5, part=participation.full(5), local_epochs=2,
                          batch_size=4, model="mlp")
  alg = fedmax.fedmax.build(task, world, {**HP, "batch_size": 4})
  server, clients = alg.init(jax.random.PRNGKey(0))
  key = jax.random.PRNGKey(7)
  new, _, m = jax.jit(alg.round)(server, clients, key)
  off, cnt = np.asarray(task.offsets), np.asarray(task.counts)
  losses = [float(task.loss(server.params, task.x[o:o + c], task.y[o:o + c], jnp.ones(c)))
            for o, c in zip(off, cnt)]
  worst = int(np.argmax(losses))
  from fedjax_bench.core import rounds as rounds_lib
  from fedjax_bench.core.cohort import Cohort
  one = Cohort(jnp.array([worst], jnp.int32), jnp.array([True]))
  deltas, _ = rounds_lib.train(task, world, {**HP, "batch_size": 4}, server.params, one, key,
                               server.round)
  want = jax.tree.map(lambda p, d: p + d[0], server.params, deltas)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7),
               new.params, want)
  assert float(m["alpha_max"]) == 1.0


def test_data_size_driven_local_steps():
  """With E epochs each client runs exactly E * ceil(n_i / b) steps (§3.1's τ_i)."""
  steps = world_lib.client_steps(np.array([1, 64, 65, 200, 500]), local_steps=1,
                                 local_epochs=2, batch_size=64)
  np.testing.assert_array_equal(steps, [2, 2, 4, 8, 16])


def test_bad_fedmax_k_is_a_usage_error():
  task, world = toy_setup(num_clients=4, part=participation.full(4))
  with pytest.raises(UsageError, match="--fedmax_k=5 must be between 1 and"):
    fedmax.fedmax_k.build(task, world, {**HP, "fedmax_k": 5})


# --- partitions and the model (§3.1, Table 2) -------------------------------------------------

def _labels(n=20000, seed=0):
  return np.random.default_rng(seed).integers(0, 10, n)


@pytest.mark.parametrize("shard", [60, 100])
def test_unbalanced_shards(shard):
  labels = _labels()
  parts = partition.partition("noniid", labels, 50, seed=3, shard_size=shard)
  sizes = np.array([len(p) for p in parts])
  assert (sizes >= shard).all() and (sizes % shard == 0).all()
  assert sizes.sum() == (10000 // shard) * shard
  allidx = np.concatenate(parts)
  assert len(np.unique(allidx)) == len(allidx)
  for p in parts:  # a contiguous shard straddles at most 2 labels
    assert len(np.unique(labels[p])) <= 2 * len(p) // shard
  assert sizes.max() > 2 * shard  # unbalanced
  same = partition.partition("noniid", labels, 50, seed=3, shard_size=shard)
  assert all((a == b).all() for a, b in zip(parts, same))


def test_very_noniid_defaults_to_100_and_about_a_third_single_shard():
  parts = partition.partition("very_noniid", _labels(), 50, seed=0)
  sizes = np.array([len(p) for p in parts])
  assert sizes.sum() == 10000 and (sizes % 100 == 0).all()
  assert 5 <= (sizes == 100).sum() <= 30  # 1 + Binomial(50, 1/50): ~36% hold one shard


def test_iid_unbalanced_has_the_shard_sizes_and_the_global_label_mix():
  labels = _labels()
  iid = partition.partition("iid_unbalanced", labels, 50, seed=5)
  shards = partition.partition("noniid", labels, 50, seed=5)
  assert [len(p) for p in iid] == [len(p) for p in shards]
  pool = np.concatenate(iid)
  assert len(np.unique(pool)) == len(pool)
  glob = np.bincount(labels[pool], minlength=10) / len(pool)
  for p in iid:
    hist = np.bincount(labels[p], minlength=10)
    assert np.abs(hist - glob * len(p)).max() <= 2.5


def test_bad_shard_size_is_one_line():
  with pytest.raises(UsageError, match="fewer than the 50 clients"):
    partition.partition("noniid", _labels(), 50, seed=0, shard_size=300)


def test_paper_cnn_parameter_counts():
  for name, count in (("paper_cnn", 34826), ("paper_cnn_literal", 2596426)):
    m = models.make(name, num_classes=10, is_image=True)
    v = m.init(jax.random.PRNGKey(0), jnp.zeros((1, 28, 28, 1)))
    assert sum(a.size for a in jax.tree.leaves(v)) == count
