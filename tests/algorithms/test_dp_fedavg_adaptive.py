"""DP-FedAvg with adaptive clipping (Andrew, Thakkar, McMahan & Ramaswamy, NeurIPS 2021):
Algorithm 1 transcribed as a per-client loop (clipping to C^t, the noisy unclipped count,
the geometric clip update, the noisy mean) against the vectorized rounds under Poisson and
fixed-size sampling; the clip tracking a known quantile in a noiseless run; eta_C = 0 as
fixed-clip DP-FedAvg bit for bit; the noise split; dp_epsilon against dp-accounting."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import loop_local_update, toy_setup
from fedjax_bench import api, config, experiment
from fedjax_bench.algorithms import dp_fedavg
from fedjax_bench.core import keys
from fedjax_bench.errors import UsageError
from fedjax_bench.sim import participation


def _paper_round(task, world, hp, params, clip, key, t, m, fixed_size):
  """One round of Algorithm 1 written plainly, in float64: Python loops over the sampled
  users and their local steps; Delta_i clipped to C by its norm over all leaves, b_i =
  [||Delta_i|| <= C]; sigma_Delta = z_Delta C on the sum, one normal draw per leaf from
  the round's "dp_noise" key split per leaf; sigma_b on the count, from its "dp_count_noise"
  key; C <- C exp(-eta_C (b - gamma)). The count is Algorithm 1's (sum_i b_i + noise) / m
  when m users are sampled, and centred, (sum_i (b_i - 1/2) + noise) / m + 1/2, under
  Poisson sampling. Returns (theta^{t+1}, C^{t+1}, b, the users' b_i)."""
  mask = np.asarray(world.participation.sample(keys.for_purpose(key, "participation"), t))
  train_key = keys.for_purpose(key, "local_train")
  grad = jax.jit(jax.grad(task.loss))
  total = jax.tree.map(lambda a: np.zeros(a.shape, np.float64), params)
  b = []
  for i in np.flatnonzero(mask):
    d = loop_local_update(grad, task, world, hp, params, train_key, i)
    norm = np.sqrt(sum(np.sum(np.square(a)) for a in jax.tree.leaves(d)))
    b.append(1.0 if norm <= clip else 0.0)
    total = jax.tree.map(lambda s_, a: s_ + min(1.0, clip / norm) * a, total, d)
  z, sigma_b = hp["dp_noise_multiplier"], hp["dp_clip_count_stddev"]
  z_delta = (z ** -2 - (2 * sigma_b) ** -2) ** -0.5
  leaves, treedef = jax.tree.flatten(total)
  noise_keys = jax.random.split(keys.for_purpose(key, "dp_noise"), len(leaves))
  noised = [a + z_delta * clip * np.asarray(jax.random.normal(k, a.shape), np.float64)
            for a, k in zip(leaves, noise_keys)]
  count_noise = sigma_b * float(jax.random.normal(keys.for_purpose(key, "dp_count_noise"), ()))
  if fixed_size:
    assert len(b) == m
    b_bar = (sum(b) + count_noise) / m
  else:
    b_bar = (sum(bi - 0.5 for bi in b) + count_noise) / m + 0.5
  theta = jax.tree.map(lambda a, s_: np.asarray(a, np.float64) + s_ / m, params,
                       jax.tree.unflatten(treedef, noised))
  return theta, clip * np.exp(-hp["dp_clip_lr"] * (b_bar - hp["dp_target_quantile"])), b_bar, b


@pytest.mark.parametrize("sampling", ["bernoulli", "uniform"])
def test_rounds_equal_algorithm_1_per_client(sampling):
  n = 8
  if sampling == "bernoulli":  # Poisson sampling, q = 1/2: E|Q| = 4
    part, m = participation.bernoulli(np.full(n, 0.5), cap=n), 4.0
  else:
    part, m = participation.uniform(n, 4), 4
  task, world = toy_setup(num_clients=n, local_steps=3, batch_size=4, part=part)
  hp = dict(client_lr=0.3, batch_size=4, local_steps=3, dp_clip=0.4, dp_noise_multiplier=0.6,
            dp_clip_count_stddev=0.5, dp_target_quantile=0.5, dp_clip_lr=0.5)
  alg = dp_fedavg.build_adaptive(task, world, hp)
  server, clients = alg.init(jax.random.PRNGKey(0))
  assert float(server.aux) == np.float32(0.4)  # C^0
  round_fn = jax.jit(alg.round)
  sizes, decisions, clips = [], [], [float(server.aux)]
  for t in range(4):
    key = jax.random.PRNGKey(30 + t)
    theta, clip, b_bar, b = _paper_round(task, world, hp, server.params, float(server.aux),
                                         key, t, m, sampling == "uniform")
    server, clients, metrics = round_fn(server, clients, key)
    jax.tree.map(lambda a, e: np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6),
                 server.params, theta)
    np.testing.assert_allclose(float(server.aux), clip, rtol=1e-5)
    np.testing.assert_allclose(float(metrics["dp_unclipped_fraction"]), b_bar, rtol=1e-5,
                               atol=1e-6)
    assert float(metrics["dp_clip"]) == clips[-1]  # the metric is the round's C^t
    assert float(metrics["num_active"]) == len(b)
    sizes.append(len(b))
    decisions += b
    clips.append(float(server.aux))
  assert 0 < sum(decisions) < len(decisions)  # some updates clipped, some not
  assert len(set(clips)) == len(clips)        # the clip moved every round
  if sampling == "bernoulli":
    assert len(set(sizes)) > 1 and max(sizes) < n  # Poisson: not everyone, not always m


def _norm_population(task, params, lr):
  """The norm of each client's one full-batch step from ``params``: with the model held
  there, a fixed population of update norms."""
  grad = jax.jit(jax.grad(task.loss))
  rows, out = np.arange(int(task.max_count)), []
  for i in range(task.counts.shape[0]):
    off, cnt = int(task.offsets[i]), int(task.counts[i])
    idx = off + np.minimum(rows, cnt - 1)  # one shape for all: padding rows weigh 0
    g = grad(params, task.x[idx], task.y[idx], (rows < cnt).astype(np.float32))
    out.append(lr * np.sqrt(sum(np.sum(np.square(np.asarray(a, np.float64)))
                                for a in jax.tree.leaves(g))))
  return np.asarray(out)


@pytest.mark.parametrize("gamma,start", [(0.2, 20.0), (0.8, 0.05)])
def test_noiseless_clip_tracks_the_target_quantile(gamma, start):
  """z = 0, sigma_b = 0, 20 of 40 users a round, the model held at theta^0 (each user's
  update is then one fixed full-batch step): C^t moves from far above (or below) to the
  gamma-quantile of the 40 norms and stays near it."""
  n, lr = 40, 0.5
  task, world = toy_setup(num_clients=n, cohort=20, local_steps=1, batch_size=64,
                          sizes=[6 + (7 * i) % 31 for i in range(n)])
  hp = dict(client_lr=lr, batch_size=64, local_steps=1, dp_noise_multiplier=0.0,
            dp_clip_count_stddev=0.0, dp_target_quantile=gamma, dp_clip_lr=0.1)
  theta0 = dp_fedavg.build_adaptive(task, world, hp).init(jax.random.PRNGKey(0))[0].params
  norms = _norm_population(task, theta0, lr)
  median = float(np.median(norms))
  alg = dp_fedavg.build_adaptive(task, world, {**hp, "dp_clip": start * median})

  def one(server, key):  # a round, then the model back at theta^0
    server, _, m = alg.round(server, (), key)
    return server._replace(params=theta0), m["dp_clip"]

  run = jax.jit(lambda server: jax.lax.scan(one, server, jax.random.split(
      jax.random.PRNGKey(1000), 300))[1])
  clips = np.asarray(run(alg.init(jax.random.PRNGKey(0))[0]), np.float64)
  assert clips[0] == np.float32(start * median)
  late = np.exp(np.mean(np.log(clips[-100:])))  # the clip after it settled
  assert np.mean(norms <= late) == pytest.approx(gamma, abs=0.05)
  lo, hi = np.quantile(norms, [gamma - 0.15, gamma + 0.15])
  assert lo <= min(clips[-100:]) and max(clips[-100:]) <= hi
  assert np.ptp(norms) > 0.3 * median  # a spread of norms, not one value


def test_with_a_fixed_clip_it_is_dp_fedavg_with_z_delta_bit_for_bit():
  """eta_C = 0: C^t stays C^0 and the round is fixed-clip DP-FedAvg whose noise multiplier
  is z_Delta (the updates' share of z; the count's noise has a key of its own), bit for
  bit. DP-FedAvg gets z_Delta as a traced value, as a swept --dp_noise_multiplier is (a
  compile-time constant lets XLA fuse the noise's scaling otherwise: 1 ulp apart); C^0 =
  0.5 makes z_Delta C^0 exact."""
  n = 8
  task, world = toy_setup(num_clients=n, local_steps=3, batch_size=4,
                          part=participation.bernoulli(np.full(n, 0.5), cap=n))
  hp = dict(client_lr=0.3, batch_size=4, local_steps=3, dp_clip=0.5, dp_noise_multiplier=0.6)
  z_delta = dp_fedavg.update_noise_multiplier(0.6, 0.5)
  adaptive = dp_fedavg.build_adaptive(task, world, {**hp, "dp_clip_count_stddev": 0.5,
                                                    "dp_clip_lr": 0.0})
  fixed_round = jax.jit(lambda z, server, key: dp_fedavg.build(
      task, world, {**hp, "dp_noise_multiplier": z}).round(server, (), key)[0])
  a, _ = adaptive.init(jax.random.PRNGKey(0))
  f = dp_fedavg.build(task, world, hp).init(jax.random.PRNGKey(0))[0]
  round_fn = jax.jit(adaptive.round)
  for t in range(4):
    key = jax.random.PRNGKey(9 + t)
    a, _, metrics = round_fn(a, (), key)
    f = fixed_round(z_delta, f, key)
    jax.tree.map(np.testing.assert_array_equal, a.params, f.params)
    assert float(a.aux) == 0.5 and float(metrics["dp_clip"]) == 0.5
  with_z = fixed_round(jnp.float32(0.6), f, key)  # DP-FedAvg's own z: other noise
  assert not np.array_equal(jax.tree.leaves(with_z)[0], jax.tree.leaves(
      fixed_round(z_delta, f, key))[0])


def test_the_noise_split_is_one_gaussian_mechanism_of_multiplier_z():
  """z_Delta = (z^-2 - (2 sigma_b)^-2)^-1/2: the update noise (multiplier z_Delta) and the
  count noise (sensitivity 1/2, multiplier 2 sigma_b) composed have dp-accounting's RDP of
  one Gaussian mechanism of multiplier z."""
  import dp_accounting as dpa
  from dp_accounting.rdp import RdpAccountant
  for z, sigma_b in [(0.6, 0.5), (1.1, 5.0), (0.3, 0.2)]:
    z_delta = float(dp_fedavg.update_noise_multiplier(z, sigma_b))
    assert z_delta == pytest.approx((z ** -2 - (2 * sigma_b) ** -2) ** -0.5, rel=1e-6)
    assert z < z_delta  # the updates get more noise than z alone would give them
    split, whole = RdpAccountant(), RdpAccountant()
    split.compose(dpa.ComposedDpEvent([dpa.GaussianDpEvent(z_delta),
                                       dpa.GaussianDpEvent(2 * sigma_b)]), 10)
    whole.compose(dpa.GaussianDpEvent(z), 10)
    assert split.get_epsilon(1e-5) == pytest.approx(whole.get_epsilon(1e-5), rel=1e-5)
  assert float(dp_fedavg.update_noise_multiplier(0.0, 0.0)) == 0.0
  assert dp_fedavg.count_stddev(-1.0, 30.0) == 1.5  # the paper's expected cohort / 20
  assert config.resolve(algo="dp_fedavg_adaptive").hparams.dp_clip_count_stddev == -1.0


def test_dp_epsilon_is_what_dp_accounting_gives_for_z():
  import dp_accounting as dpa
  from dp_accounting.rdp import RdpAccountant
  z, delta, n = 1.1, 1e-4, 12
  r = api.run(algo="dp_fedavg_adaptive", dataset="synthetic", num_clients=n, rounds=6,
              eval_every=3, seeds=[0, 1], progress=False, dp_noise_multiplier=z,
              dp_clip_count_stddev=1.0, dp_delta=delta, host_devices=1,
              participation="bernoulli", participation_prob=0.25)
  got = np.asarray(r.curves["dp_epsilon"]).reshape(3, -1)
  want = [0.0]
  for t in (3, 6):
    acc = RdpAccountant(neighboring_relation=dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
    acc.compose(dpa.PoissonSampledDpEvent(0.25, dpa.GaussianDpEvent(z)), t)
    want.append(acc.get_epsilon(delta))
  np.testing.assert_allclose(got, np.repeat(np.array(want)[:, None], 2, 1), rtol=1e-12)
  assert 0 < want[1] < want[2] < np.inf
  # The same z and m-of-N sampling: SampledWithoutReplacement, replace-one neighbours.
  cfg = config.resolve(algo="dp_fedavg_adaptive", dp_noise_multiplier=z,
                       dp_clip_count_stddev=1.0, participation="uniform", clients_per_round=3)
  acc = RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
  acc.compose(dpa.SampledWithoutReplacementDpEvent(n, 3, dpa.GaussianDpEvent(z)), 5)
  np.testing.assert_allclose(dp_fedavg.privacy(cfg.hparams, cfg.world, n, np.array([5])),
                             [acc.get_epsilon(1e-5)], rtol=1e-12)


def test_bad_settings_fail_in_one_line():
  task, world = toy_setup(num_clients=8, cohort=4)  # m = 4: sigma_b = 0.2 by default
  build = lambda **hp: dp_fedavg.build_adaptive(task, world, hp)
  with pytest.raises(UsageError, match=r"--dp_noise_multiplier=1 needs "
                                       r"--dp_clip_count_stddev above z/2 = 0.5 \(sigma_b is 0.2"):
    build(dp_noise_multiplier=1.0)
  with pytest.raises(UsageError, match="above z/2 = 0.3"):
    build(dp_noise_multiplier=0.6, dp_clip_count_stddev=0.3)
  with pytest.raises(UsageError, match="initial clip C\\^0 must be finite"):
    build(dp_clip=float("inf"), dp_noise_multiplier=0.0)
  build(dp_noise_multiplier=0.3)  # below 2 sigma_b = 0.4
  with pytest.raises(UsageError, match="--dp_noise_multiplier=0.5 needs"):
    build()  # the default z needs more than 4 a round
  # ... and runs with the default cohort of 10 (sigma_b = 0.5).
  experiment.setup(config.resolve(algo="dp_fedavg_adaptive", num_clients=20))
  for name, value, rule in [("dp_target_quantile", 1.5, "must be in \\[0, 1\\]"),
                            ("dp_clip_lr", -0.1, "must be >= 0"),
                            ("dp_clip_count_stddev", -0.5, "must be >= 0, or -1")]:
    with pytest.raises(UsageError, match=f"--{name} {rule}"):
      config.resolve(algo="dp_fedavg_adaptive", **{name: value})
  with pytest.raises(UsageError, match="has no effect on --algo=dp_fedavg"):
    config.resolve(algo="dp_fedavg", dp_clip_lr=0.1)
