"""Availability models of the FedAWE paper (§7, Appendix J.3; docs/papers/fedawe.md): golden
tables, marginals, states, Lemma 2."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_bench.errors import UsageError
from fedjax_bench.sim import availability as av
from fedjax_bench.sim import participation

# Appendix J.3's sine, f(t) = 0.3 sin(2 pi t / 20) + 0.7.
SINE_GOLDEN = [0.7, 0.7927, 0.8763, 0.9427, 0.9853, 1.0, 0.9853, 0.9427, 0.8763, 0.7927,
               0.7, 0.6073, 0.5237, 0.4573, 0.4147, 0.4, 0.4147, 0.4573, 0.5237, 0.6073]


def _sigma4(p, draws):
  return 4 * np.sqrt(p * (1 - p) / draws)


def _masks_over_keys(part, rounds, draws):
  """Masks [len(rounds), draws, n]: one stateless draw per key and round."""
  keys = jax.random.split(jax.random.PRNGKey(1), draws)
  per_round = jax.vmap(part.sample, in_axes=(0, None))
  return np.asarray(jax.jit(jax.vmap(per_round, in_axes=(None, 0)))(
      keys, jnp.asarray(rounds, jnp.int32)))


def test_factor_tables_match_the_golden_values():
  np.testing.assert_allclose(av.factor_table("sine"), SINE_GOLDEN, atol=1e-4)
  np.testing.assert_allclose(av.factor_table("interleaved_sine"), SINE_GOLDEN, atol=1e-4)
  assert av.factor_table("stationary").tolist() == [1.0] * 20
  # The official code's staircase: 0.4 p if (t // 10) % 2 == 1 else p.
  code = [0.4 if (t // 10) % 2 == 1 else 1.0 for t in range(20)]
  assert av.factor_table("staircase").tolist() == code
  assert av.factor_table("staircase", period=5, staircase_low=0.25).tolist() == [
      1, 1, 1, 0.25, 0.25]
  np.testing.assert_allclose(av.factor_table("sine", period=4, gamma=0.5), [0.5, 1, 0.5, 0])


def test_probs_follow_the_factor_and_clip():
  base = np.array([0.0, 0.2, 0.5, 1.0])
  for name in ("stationary", "staircase", "sine"):
    part = av.make(name, base)
    table = av.factor_table(name)
    got = np.asarray(jax.jit(jax.vmap(part.probs))(jnp.arange(45)))
    want = base[None, :] * table[np.arange(45) % 20][:, None]
    np.testing.assert_allclose(got, want, rtol=1e-6)
  floored = av.make("sine", base, p_min=0.3)
  np.testing.assert_allclose(np.asarray(floored.probs(5)), [0.3, 0.3, 0.5, 1.0], rtol=1e-6)


@pytest.mark.parametrize("p, kept", [
    (0.1, [5]),
    (0.125, list(range(2, 9))),
    (0.2, list(range(13)) + [18, 19]),
    (0.25, list(range(20))),
    (0.5, list(range(20))),
])
def test_interleaved_sine_cuts_below_delta0(p, kept):
  part = av.make("interleaved_sine", [p, 0.0])
  probs = np.asarray(jax.vmap(part.probs)(jnp.arange(40)))
  assert np.nonzero(probs[:20, 0] > 0)[0].tolist() == kept
  np.testing.assert_array_equal(probs[20:], probs[:20])  # periodic
  assert not probs[:, 1].any()
  np.testing.assert_allclose(probs[kept, 0], p * np.asarray(SINE_GOLDEN)[kept], atol=1e-4)
  cut = sorted(set(range(20)) - set(kept))
  if cut:  # a cut round never draws the client
    assert not _masks_over_keys(part, cut, 200).any()


def test_interleaved_cut_phases_are_client_specific():
  base = np.array([0.1, 0.125, 0.2, 0.3])
  part = av.make("interleaved_sine", base)
  probs = np.asarray(jax.vmap(part.probs)(jnp.arange(20)))
  assert (probs > 0).sum(0).tolist() == [1, 7, 15, 20]


def test_phi_modes():
  np.testing.assert_array_equal(av.draw_phi("stress", 10, 0), [0.9] * 5 + [0.1] * 5)
  phis = np.stack([av.draw_phi("paper", 10, s) for s in range(400)])
  assert phis.shape == (400, 10)
  assert np.all(phis >= 0)
  assert np.all(phis[:, :5] < 1) and np.all(phis[:, 5:] < 0.5)
  assert phis[:, :5].max() > 0.99 and phis[:, 5:].max() > 0.49  # the full ranges are used
  assert abs(phis[:, :5].mean() - 0.5) < 0.02 and abs(phis[:, 5:].mean() - 0.25) < 0.01
  np.testing.assert_array_equal(av.draw_phi("paper", 10, 7), av.draw_phi("paper", 10, 7))
  assert not np.array_equal(av.draw_phi("paper", 10, 7), av.draw_phi("paper", 10, 8))
  assert av.draw_phi("stress", 3, 0).tolist() == [0.9, 0.9, 0.1]  # "first half": c < C/2


def test_base_probs_is_histogram_dot_phi():
  hist = np.array([[2, 0, 2], [0, 0, 0], [1, 3, 0]])
  phi = np.array([0.5, 1.0, 0.1])
  want = [0.5 * 0.5 + 0.5 * 0.1, 0.0, 0.25 * 0.5 + 0.75 * 1.0]
  np.testing.assert_allclose(av.base_probs(hist, phi), want)
  fractions = hist / np.maximum(hist.sum(1, keepdims=True), 1)
  np.testing.assert_allclose(av.base_probs(fractions, phi), want)


def test_bernoulli_frequencies_match_probs():
  base = np.array([0.0, 0.1, 0.3, 0.6, 0.9, 1.0])
  part = av.make("sine", base)
  draws, rounds = 4000, (0, 5, 13)
  for t, masks in zip(rounds, _masks_over_keys(part, rounds, draws)):
    freq = masks.mean(0)
    p = np.asarray(part.probs(t), np.float64)
    assert np.all(np.abs(freq - p) <= _sigma4(p, draws) + 1e-12), (t, freq, p)
  # Stationary availability is Bernoulli(base) draw for draw.
  key = jax.random.PRNGKey(3)
  np.testing.assert_array_equal(av.make("stationary", base).sample(key, 11),
                                participation.bernoulli(base).sample(key, 11))


@pytest.mark.parametrize("dynamics", av.DYNAMICS)
def test_same_key_round_and_state_give_the_same_mask(dynamics):
  part = av.make(dynamics, np.linspace(0, 1, 30))
  state = part.init(jax.random.PRNGKey(0))
  key, t = jax.random.PRNGKey(5), jnp.int32(7)
  eager, _ = part.step(key, t, state)
  jitted, _ = jax.jit(part.step)(key, t, state)
  again, _ = part.step(key, t, state)
  np.testing.assert_array_equal(eager, jitted)
  np.testing.assert_array_equal(eager, again)
  assert eager.shape == (30,) and eager.dtype == jnp.bool_
  assert part.probs(t).shape == (30,) and part.probs(t).dtype == jnp.float32


def _scan_rounds(part, seeds, rounds):
  """Masks [seeds, rounds, n] from init + lax.scan of step, vmapped over seeds."""
  def run(seed_key):
    def body(state, t):
      mask, state = part.step(jax.random.fold_in(seed_key, t), t, state)
      return state, mask
    _, masks = jax.lax.scan(body, part.init(jax.random.fold_in(seed_key, 1 << 30)),
                            jnp.arange(rounds, dtype=jnp.int32))
    return masks
  keys = jax.random.split(jax.random.PRNGKey(0), seeds)
  return np.asarray(jax.jit(jax.vmap(run))(keys))


def test_markov_chain_is_stationary_and_persistent():
  levels = np.array([0.0, 0.1, 0.3, 0.6, 1.0])
  per_level, seeds, rounds, a = 1000, 2, 200, 0.05
  part = av.make("markov", np.repeat(levels, per_level), markov_a=a)
  assert part.cap == participation.cap_for(np.repeat(levels, per_level))
  masks = _scan_rounds(part, seeds, rounds).reshape(seeds, rounds, len(levels), per_level)
  up, down = av.markov_rates(levels, a)
  np.testing.assert_allclose(up, [0, 0.05, 0.05, 0.05, 0.05])
  np.testing.assert_allclose(down, [1, 0.45, 0.35 / 3, 0.1 / 3, 0])
  # b = 0.05 * 99 > 1: both rates are divided by b.
  np.testing.assert_allclose(av.markov_rates(np.array([0.01]), a), ([0.05 / 4.95], [1.0]))
  assert not masks[:, :, 0].any() and masks[:, :, 4].all()
  for j in (1, 2, 3):
    p, lam = levels[j], 1 - up[j] - down[j]
    m = masks[:, :, j]
    # Autocorrelation lam^k inflates the variance of a time average by (1 + lam) / (1 - lam).
    tol = 4 * np.sqrt(p * (1 - p) * (1 + lam) / (1 - lam) / m.size)
    assert abs(m.mean() - p) < tol, (p, m.mean(), tol)
    stay = (m[:, 1:] & m[:, :-1]).sum() / m[:, :-1].sum()
    rise = (m[:, 1:] & ~m[:, :-1]).sum() / (~m[:, :-1]).sum()
    assert abs(stay - (1 - down[j])) < 0.02, (p, stay, 1 - down[j])
    assert abs(rise - up[j]) < 0.01, (p, rise, up[j])
  assert jnp.allclose(part.probs(jnp.int32(3)), jnp.repeat(levels, per_level))


def test_markov_initial_state_is_bernoulli_p():
  part = av.make("markov", [0.0, 0.25, 1.0])
  states = np.asarray(jax.vmap(part.init)(jax.random.split(jax.random.PRNGKey(2), 4000)))
  assert not states[:, 0].any() and states[:, 2].all()
  assert abs(states[:, 1].mean() - 0.25) < _sigma4(0.25, 4000)


def test_cyclic_lengths_and_rounding():
  active, inactive = av.cyclic_lengths(np.array([0.0, 0.1, 0.125, 0.375, 0.5, 1.0]), 20)
  # P p = 2.5 and 7.5 round half to even (fedau's np.round); p = 0 still gets one round.
  assert active.tolist() == [1, 2, 2, 8, 10, 20]
  assert inactive.tolist() == [19, 18, 18, 12, 10, 1]


def _runs(row):
  """Lengths of the maximal runs of True and of False in a 1-D bool array, edges dropped."""
  edges = np.flatnonzero(np.diff(row.astype(np.int8))) + 1
  pieces = np.split(row, edges)[1:-1]
  return ({len(x) for x in pieces if x[0]}, {len(x) for x in pieces if not x[0]})


def test_cyclic_active_fraction_and_run_lengths():
  base = np.array([0.1, 0.375, 0.5, 1.0, 0.0])
  part = av.make("cyclic", base, period=20)
  np.testing.assert_allclose(part.probs(0), [2 / 20, 8 / 20, 10 / 20, 20 / 21, 1 / 20])
  masks = _scan_rounds(part, seeds=3, rounds=420)  # 420 = lcm(20, 21)
  active, inactive = [2, 8, 10, 20, 1], [18, 12, 10, 1, 19]
  for i in range(len(base)):
    length = active[i] + inactive[i]
    for s in range(3):
      row = masks[s, :, i]
      assert row.mean() == pytest.approx(active[i] / length)
      assert _runs(row) == ({active[i]}, {inactive[i]})
      np.testing.assert_array_equal(row[length:], row[:-length])  # periodic


def test_cyclic_phase_is_uniform_over_the_cycle():
  part = av.make("cyclic", [0.1, 0.5])
  draws = 4000
  phases = jax.vmap(part.init)(jax.random.split(jax.random.PRNGKey(4), draws))
  for t in (0, 19, 37):  # fedau's inactive start would give 0 at t = 19 for p = 0.1
    masks = np.asarray(jax.vmap(lambda s, t=t: part.step(None, jnp.int32(t), s)[0])(phases))
    for i, p in enumerate((0.1, 0.5)):
      assert abs(masks[:, i].mean() - p) < _sigma4(p, draws), (t, i, masks[:, i].mean())


def _staleness(masks, t):
  """t - tau_i(t) from masks [rounds, n]: rounds since last active before t (t + 1 if never)."""
  before = masks[:t]
  last = np.where(before.any(0), t - 1 - np.argmax(before[::-1], axis=0), -1)
  return t - last


@pytest.mark.parametrize("p", [0.1, 0.3, 0.7])
def test_lemma2_staleness_moments(p):
  n, t = 60_000, 200
  part = av.make("stationary", av.homogeneous(n, p))
  keys = jax.vmap(lambda r: jax.random.fold_in(jax.random.PRNGKey(9), r))(jnp.arange(t))
  masks = np.asarray(jax.jit(jax.vmap(part.sample))(keys, jnp.arange(t)))
  gap = _staleness(masks, t).astype(np.float64)
  k = np.arange(1, t + 1)
  law = np.append(p * (1 - p) ** (k - 1), (1 - p) ** t)  # P(gap = 1..t, t + 1)
  mean, second = (np.append(k, t + 1) * law).sum(), (np.append(k, t + 1) ** 2 * law).sum()
  assert mean == pytest.approx((1 - (1 - p) ** (t + 1)) / p)
  assert abs(gap.mean() - mean) < 4 * gap.std() / np.sqrt(n)
  assert abs((gap ** 2).mean() - second) < 4 * (gap ** 2).std() / np.sqrt(n)
  assert gap.mean() <= 1 / p + 4 * gap.std() / np.sqrt(n)
  assert (gap ** 2).mean() <= 2 / p ** 2


def test_lemma2_bound_with_nonstationary_floor():
  n, t, p = 20_000, 200, 0.5
  part = av.make("sine", av.homogeneous(n, p))  # p_i^t >= 0.5 * 0.4 = delta
  delta = p * 0.4
  keys = jax.vmap(lambda r: jax.random.fold_in(jax.random.PRNGKey(10), r))(jnp.arange(t))
  masks = np.asarray(jax.jit(jax.vmap(part.sample))(keys, jnp.arange(t)))
  gap = _staleness(masks, t).astype(np.float64)
  assert gap.mean() <= 1 / delta and (gap ** 2).mean() <= 2 / delta ** 2


def test_caps():
  assert av.make("stationary", np.ones(7)).cap == 7
  assert av.make("staircase", [1, 1, 0, 0, 1]).cap == 3  # deterministic: the exact maximum
  assert av.make("markov", [0, 0, 0]).cap == 1
  assert av.make("sine", np.full(1000, 0.1)).cap == participation.cap_for(
      np.full(1000, 0.1))
  assert av.make("sine", np.full(1000, 0.1), cap=5).cap == 5
  assert av.make("sine", np.full(10, 0.1), cap=50).cap == 10
  # The busiest interleaved round counts only clients that are ever kept.
  assert av.make("interleaved_sine", np.full(50, 0.05)).cap == 1
  assert av.make("cyclic", np.full(1000, 0.1)).cap == participation.cap_for(
      np.full(1000, 0.1))


def test_homogeneous():
  np.testing.assert_array_equal(av.homogeneous(3, 0.3), [0.3, 0.3, 0.3])


@pytest.mark.parametrize("call, match", [
    (lambda: av.make("weekly", [0.5]), "valid: stationary, staircase, sine, interleaved_sine"),
    (lambda: av.make("sine", [0.5], period=0), "period"),
    (lambda: av.make("sine", [0.5], period=2.5), "period"),
    (lambda: av.make("sine", [0.5], gamma=1.5), "gamma"),
    (lambda: av.make("markov", [0.5], markov_a=0.0), "markov_a"),
    (lambda: av.make("sine", [0.5], delta0=-0.1), "delta0"),
    (lambda: av.make("sine", [0.5], staircase_low=2.0), "staircase_low"),
    (lambda: av.make("sine", [0.5], p_min=1.5), "p_min"),
    (lambda: av.make("sine", [0.5], cap=-1), "cap"),
    (lambda: av.make("sine", [1.5]), r"\[0, 1\]"),
    (lambda: av.make("sine", [[0.5]]), "vector"),
    (lambda: av.make("sine", []), "vector"),
    (lambda: av.draw_phi("heavy", 10, 0), "valid: paper, stress"),
    (lambda: av.draw_phi("paper", 0, 0), "num_classes"),
    (lambda: av.base_probs(np.ones((3, 4)), np.ones(3)), "phi"),
    (lambda: av.base_probs(-np.ones((3, 2)), np.ones(2)), "non-negative"),
    (lambda: av.homogeneous(3, 1.2), r"\[0, 1\]"),
    (lambda: av.factor_table("markov"), "no factor table"),
])
def test_bad_arguments_are_usage_errors(call, match):
  with pytest.raises(UsageError, match=match):
    call()
