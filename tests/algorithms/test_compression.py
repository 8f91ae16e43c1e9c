"""Compressors of Fed-EF (the Fed-EF paper's Section 3; docs/papers/fedef.md): golden values, contraction bounds, bit counts."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_bench import models
from fedjax_bench.algorithms import compression as C
from fedjax_bench.errors import UsageError

KEY = jax.random.PRNGKey(0)
stoc_levels = jax.jit(C._stoc, static_argnums=2)  # (x, uniforms, s): Stoc with given draws
discrepancy = jax.jit(C.discrepancy)


def arr(*v):
  return jnp.array(v, jnp.float32)


@functools.cache
def _jitted(name, kw):
  return jax.jit(C.make(name, **dict(kw)).apply)


def apply(name, x, key=KEY, **kw):
  """C(x) as NumPy, jitted: one compilation per compressor and shape instead of one per op."""
  return jax.tree.map(np.asarray, _jitted(name, tuple(sorted(kw.items())))(key, x))


def sq(tree):
  return float(sum(np.sum(np.square(np.asarray(a, np.float64))) for a in jax.tree.leaves(tree)))


def shapes(tree):
  return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s, jnp.float32), tree,
                      is_leaf=lambda s: isinstance(s, tuple))


# Concrete models (the Fed-EF MLP and CNN, docs/papers/fedef.md): flax-style parameter trees
# of shapes.
CNN = shapes({"Conv_0": {"kernel": (3, 3, 1, 32), "bias": (32,)},
              "Conv_1": {"kernel": (3, 3, 32, 64), "bias": (64,)},
              "Dense_0": {"kernel": (9216, 128), "bias": (128,)},
              "Dense_1": {"kernel": (128, 10), "bias": (10,)}})
DIGITS_MLP = shapes({"d0": {"kernel": (64, 200), "bias": (200,)},
                     "d1": {"kernel": (200, 10), "bias": (10,)}})


def mnist_mlp():
  """The repo's own 784-200-10 MLP, so the grouping is checked on a real parameter tree."""
  model = models.make("mlp", num_classes=10, is_image=False, mlp_hidden=(200,))
  return jax.eval_shape(model.init, KEY, jnp.zeros((1, 784)))


def _random_trees(rng, count=20):
  """Trees of one fixed structure (so each compressor compiles once), as float64 NumPy."""
  for i in range(count):
    shape = {"a": (37,), "b": (5, 7), "c": (1,), "d": (3,)}
    kind = i % 4 if i < 8 else int(rng.integers(4))
    tree = {}
    for name, s in shape.items():
      x = rng.normal(size=s)
      if kind == 1:       # heavy tails
        x = rng.standard_cauchy(size=s)
      elif kind == 2:     # one spike over a flat floor: the hv-Sign worst case
        x = np.full(s, 1e-3) * rng.choice([-1, 1], size=s)
        x.flat[0] = 10.0
      elif kind == 3:     # zeros present
        x = x * (rng.random(s) < 0.5)
      tree[name] = np.asarray(x, np.float32).astype(np.float64)
    yield tree


def nsq(x):
  return float(np.sum(np.square(x)))


# ---- golden values by hand ----

def test_topk_golden():
  np.testing.assert_array_equal(apply("topk", arr(1, -3, 2, 0.5), k=0.5), arr(0, -3, 2, 0))
  # k_i = max(1, floor(0.1 * 4)) = 1
  np.testing.assert_array_equal(apply("topk", arr(1, -3, 2, 0.5), k=0.1), arr(0, -3, 0, 0))
  np.testing.assert_array_equal(apply("topk", arr(1, -3, 2, 0.5), k=1.0), arr(1, -3, 2, 0.5))


def test_sign_golden_scale_is_mean_abs_and_sign_of_zero_is_zero():
  # mean |x| = (1 + 3 + 2 + 0) / 4 = 1.5
  np.testing.assert_array_equal(apply("sign", arr(1, -3, 2, 0)), arr(1.5, -1.5, 1.5, 0))


def test_hvsign_golden_both_scalings():
  x = arr(1, -3, 2, 0.5)   # TopK-2 support {1, 2}, ‖x_S‖₁ = 5
  np.testing.assert_allclose(apply("hvsign", x, k=0.5), arr(0, -2.5, 2.5, 0))   # 5 / k_i
  np.testing.assert_allclose(apply("hvsign", x, k=0.5, hvsign_scaling="group"),
                             arr(0, -1.25, 1.25, 0))                             # 5 / d_i


def test_stoc_golden():
  # Entries on a level are kept exactly, whatever the draw: a = 0.5 with s = 2, a = 1 any s.
  for key in jax.random.split(KEY, 5):
    np.testing.assert_allclose(apply("stoc", arr(1, 1, -1, 1), key, stoc_bits=2), arr(1, 1, -1, 1))
    np.testing.assert_allclose(apply("stoc", arr(0, 0, -5), key, stoc_bits=3), arr(0, 0, -5))
  # b = 1 (s = 1), x = (3, -4), ‖x‖ = 5, a = (0.6, 0.8): round up iff u < a.
  np.testing.assert_allclose(stoc_levels(arr(3, -4), arr(0.5, 0.9), 1), arr(5, 0))
  np.testing.assert_allclose(stoc_levels(arr(3, -4), arr(0.7, 0.1), 1), arr(0, -5))
  # b = 3 (s = 4): a·s = (2.4, 3.2) -> levels 2 or 3, 3 or 4 (l capped at s − 1 = 3).
  np.testing.assert_allclose(stoc_levels(arr(3, -4), arr(0.3, 0.1), 4), arr(3.75, -5))
  np.testing.assert_allclose(stoc_levels(arr(3, -4), arr(0.5, 0.3), 4), arr(2.5, -3.75))


def test_randk_golden():
  x = np.array([1, -3, 2, 0.5, 4, -1], np.float32)
  for key in jax.random.split(KEY, 5):
    y = apply("randk", x, key, k=0.5)
    kept = y != 0
    assert kept.sum() == 3
    np.testing.assert_array_equal(y[kept], x[kept])
    z = apply("randk", x, key, k=0.5, randk_unbiased=True)
    np.testing.assert_allclose(z, 2.0 * y)  # same support for the same key, scaled by d/k


def test_randk_picks_uniform_subsets():
  """Each coordinate is kept with probability k_i/d_i; the scaled variant is unbiased."""
  x, n = arr(1, -3, 2, 0.5, 4, -1), 4000
  y = np.asarray(_draws(C.make("randk", k=0.5, randk_unbiased=True), x, n), np.float64)
  p_hat = (y != 0).mean(0)
  assert np.all(np.abs(p_hat - 0.5) <= 4 * np.sqrt(0.25 / n))
  assert np.all(np.abs(y.mean(0) - np.asarray(x)) <= 4 * y.std(0) / n ** 0.5)


def test_identity_is_a_no_op_with_dense_bits():
  tree = {"w": jnp.arange(6.0).reshape(2, 3), "b": arr(1, 2)}
  comp = C.make("identity")
  assert comp.apply(KEY, tree) is tree
  assert comp.bits(tree) == C.dense_bits(tree) == 32 * 8
  assert C.dense_bits(tree, float_bits=16) == 16 * 8
  assert comp.q2(tree) == 0.0 and comp.unbiased


# ---- TopK and heavy-Sign select exactly k_i entries ----

@pytest.mark.parametrize("name", ["topk", "hvsign"])
def test_exactly_k_entries_with_ties(name):
  assert np.count_nonzero(apply(name, jnp.ones(10), k=0.3)) == 3
  y = apply(name, arr(5, 1, -5, 5, 2), k=0.4)          # three tied maxima, k_i = 2
  assert np.count_nonzero(y) == 2
  np.testing.assert_array_equal(y != 0, [True, False, True, False, False])  # lower index first
  y = apply(name, -jnp.ones((4, 5)), k=0.5)            # a 2-D leaf of ties
  assert y.shape == (4, 5) and np.count_nonzero(y) == 10


def test_topk_properties_on_random_leaves():
  """Per leaf: k_i non-zeros, kept values unchanged, the largest kept."""
  for k in (0.001, 0.05, 0.3, 1.0):
    for tree in _random_trees(np.random.default_rng(0), 8):
      for x, y in zip(jax.tree.leaves(tree), jax.tree.leaves(apply("topk", tree, k=k))):
        ki, kept = C.num_kept(k, x.size), y != 0
        assert ki == max(1, math.floor(k * x.size))
        assert kept.sum() == min(ki, np.count_nonzero(x))   # exactly k_i unless x has fewer
        np.testing.assert_array_equal(y[kept], x[kept])
        assert np.abs(x[~kept]).max(initial=0) <= np.abs(x[kept]).min(initial=np.inf)
        assert nsq(y - x) <= (1 - ki / x.size) * nsq(x) * (1 + 1e-6)


def test_num_kept_is_floor_with_a_floor_of_one():
  assert [C.num_kept(0.01, d) for d in (10, 99, 100, 288, 1_179_648)] == [1, 1, 1, 2, 11796]
  assert C.num_kept(0.07, 100) == 7 and C.num_kept(0.29, 100) == 29  # no float-rounding loss


# ---- grouping: one group per parameter tensor by default ----

def test_each_leaf_is_compressed_independently():
  tree = {"a": jnp.arange(1.0, 11.0), "b": arr(0.1, -0.2)}
  other = {"a": tree["a"], "b": arr(-30.0, 7.0)}
  for name in ("topk", "sign", "hvsign", "randk", "stoc"):
    out = apply(name, tree, k=0.2)
    np.testing.assert_array_equal(out["a"], apply(name, other, k=0.2)["a"])
    if name in ("topk", "sign", "hvsign"):
      np.testing.assert_array_equal(out["b"], apply(name, tree["b"], k=0.2))
  # The documented key rule: leaf j (tree.leaves order) draws U[0, 1) from fold_in(key, j).
  out = apply("stoc", tree, stoc_bits=2)
  for j, x in enumerate(jax.tree.leaves(tree)):
    u = jax.jit(jax.random.uniform, static_argnums=1)(jax.random.fold_in(KEY, j), x.shape)
    np.testing.assert_allclose(jax.tree.leaves(out)[j], stoc_levels(x, u, 2), rtol=1e-6)
  # TopK keeps k_i in each leaf: 2 of 10 and max(1, 0) = 1 of 2, although b is tiny.
  out = apply("topk", tree, k=0.2)
  np.testing.assert_array_equal(out["b"], arr(0, -0.2))
  np.testing.assert_allclose(apply("sign", tree)["b"], arr(0.15, -0.15))


def test_layer_and_global_grouping():
  tree = {"l0": {"kernel": arr(4, -2), "bias": arr(1.0)},
          "l1": {"kernel": arr(8.0), "bias": arr(-6.0)}}
  # layer: l0 = (bias 1, kernel 4, -2) -> mean |x| 7/3; l1 = (-6, 8) -> 7
  out = apply("sign", tree, grouping="layer")
  np.testing.assert_allclose(out["l0"]["kernel"], arr(7 / 3, -7 / 3), rtol=1e-6)
  np.testing.assert_allclose(out["l1"]["bias"], arr(-7.0))
  out = apply("sign", tree, grouping="global")   # mean |x| over all 5 = 21 / 5
  np.testing.assert_allclose(out["l0"]["bias"], arr(4.2), rtol=1e-6)
  out = apply("topk", tree, k=0.4, grouping="global")   # k_i = 2 of 5: 8 and -6
  assert [float(a[0]) for a in jax.tree.leaves(out)] == [0, 0, -6, 8]
  assert C.make("sign", grouping="layer").bits(tree) == 5 + 32 * 2
  assert C.make("sign", grouping="global").bits(tree) == 5 + 32
  assert C.make("topk", k=0.4, grouping="global").bits(tree) == 32 * 2


# ---- exact error formulas and the compression constants (Definition 1's q_C) ----

@pytest.mark.parametrize("kw", [dict(name="topk", k=0.1), dict(name="topk", k=0.5),
                                dict(name="sign"), dict(name="hvsign", k=0.1),
                                dict(name="hvsign", k=0.5, hvsign_scaling="group"),
                                dict(name="sign", grouping="global")])
def test_contraction_bounds(kw):
  comp = C.make(**kw)
  kw = dict(kw)
  name = kw.pop("name")
  for tree in _random_trees(np.random.default_rng(1)):
    q2 = comp.q2(tree)
    assert q2 < 1
    out = apply(name, tree, **kw)
    if kw.get("grouping", "tensor") == "tensor":   # the bound holds per group
      for x, y in zip(jax.tree.leaves(tree), jax.tree.leaves(out)):
        assert nsq(y - x) <= q2 * nsq(x) * (1 + 1e-5) + 1e-12
    assert float(discrepancy(out, tree)) <= q2 * (1 + 1e-5)


def test_q2_closed_forms():
  tree = {"a": jnp.zeros(10), "b": jnp.zeros((5, 40))}
  assert C.make("topk", k=0.05).q2(tree) == pytest.approx(1 - 10 / 200)   # 1 - 1/10 on a
  assert C.make("sign").q2(tree) == pytest.approx(1 - 1 / 200)
  assert C.make("hvsign", k=0.05).q2(tree) == pytest.approx(1 - 1 / 200)
  assert C.make("hvsign", k=0.05, hvsign_scaling="group").q2(tree) == pytest.approx(
      1 - 10 / 200 ** 2)
  assert C.make("stoc", stoc_bits=2).q2(tree) == pytest.approx(200 ** 0.5 / 2)  # s = 2, d = 200
  assert C.make("randk", k=0.5).q2(tree) == pytest.approx(0.5)
  assert C.make("randk", k=0.5, randk_unbiased=True).q2(tree) == pytest.approx(1.0)


def test_sign_exact_error():
  """Scaled sign: ‖C(x) − x‖² = ‖x‖² − (‖x‖₁²/d)(2 − nnz/d), = ‖x‖² − ‖x‖₁²/d without zeros."""
  for tree in _random_trees(np.random.default_rng(2), 8):
    for x, y in zip(jax.tree.leaves(tree), jax.tree.leaves(apply("sign", tree))):
      d, l1, nnz = x.size, np.abs(x).sum(), np.count_nonzero(x)
      np.testing.assert_allclose(y, np.abs(x).mean() * np.sign(x), rtol=1e-5)
      assert nsq(y - x) == pytest.approx(nsq(x) - l1 ** 2 / d * (2 - nnz / d), rel=1e-4, abs=1e-6)


def test_hvsign_structure_and_exact_error():
  """Heavy-Sign (Definition 2): TopK support, one magnitude = mean |x| over it, its exact
  error."""
  for k in (0.05, 0.3):
    for tree in _random_trees(np.random.default_rng(3), 8):
      hv, top = apply("hvsign", tree, k=k), apply("topk", tree, k=k)
      for x, y, t in zip(*(jax.tree.leaves(a) for a in (tree, hv, top))):
        support, ki = t != 0, C.num_kept(k, x.size)
        xs = x[support]
        np.testing.assert_array_equal(y != 0, support & (x != 0))
        np.testing.assert_allclose(np.abs(y[y != 0]), np.abs(xs).sum() / ki, rtol=1e-5)
        np.testing.assert_array_equal(np.sign(y), np.sign(x) * support)
        expected = nsq(x[~support]) + nsq(xs) - np.abs(xs).sum() ** 2 / ki
        assert nsq(y - x) == pytest.approx(expected, rel=1e-4, abs=1e-6)


# ---- Stoc: levels, unbiasedness, variance ----

def _draws(comp, x, n):
  return jax.jit(jax.vmap(comp.apply, in_axes=(0, None)))(jax.random.split(KEY, n), x)


STOC_CASES = [(1, "layer"), (2, "layer"), (4, "layer"), (1, "global")]
STOC_TREE = {"u": arr(0.3, -1.2, 0.0, 2.5, -0.01, 0.7), "v": arr(10.0, -0.5, 4.0)}
STOC_DRAWS = 20_000


@functools.cache
def _stoc_draws():
  """20k draws of every case in one program (one compilation instead of four)."""
  comps = [C.make("stoc", stoc_bits=b, stoc_norm=norm) for b, norm in STOC_CASES]
  keys = jax.random.split(KEY, STOC_DRAWS)
  draws = jax.jit(jax.vmap(lambda key: [c.apply(key, STOC_TREE) for c in comps]))(keys)
  return [{k: np.asarray(v, np.float64) for k, v in d.items()} for d in draws]


@pytest.mark.parametrize("case", range(len(STOC_CASES)))
def test_stoc_is_unbiased_and_within_the_variance_bound(case):
  (b, norm), tree, n = STOC_CASES[case], STOC_TREE, STOC_DRAWS
  comp, q = C.make("stoc", stoc_bits=b, stoc_norm=norm), _stoc_draws()[case]
  x = {k: np.asarray(v, np.float64) for k, v in tree.items()}
  for name in x:
    mean, se = q[name].mean(0), q[name].std(0) / n ** 0.5
    assert np.all(np.abs(mean - x[name]) <= 4 * se + 1e-6), (name, mean, x[name])
  err = sum(np.sum(np.square(q[k] - x[k]), axis=1) for k in x)
  assert err.mean() <= comp.q2(tree) * sq(tree)
  # Stoc is unbiased (Appendix A, eq. (4)): relative error of the Monte-Carlo mean < 2 %
  assert np.linalg.norm(np.concatenate([q[k].mean(0) - x[k] for k in x])) < 0.02 * sq(tree) ** 0.5
  # QSGD's levels: every |Q_j| is a level j‖x‖/s of the norm of its leaf (layer) or of the
  # tree (global), signs match x, and zeros stay zero.
  s = 2 ** (b - 1)
  for name in x:
    ref = np.linalg.norm(x[name]) if norm == "layer" else sq(tree) ** 0.5
    levels = np.abs(q[name]) * s / ref
    np.testing.assert_allclose(levels, np.round(levels), atol=1e-4)
    assert levels.max() <= s + 1e-4 and np.all(np.sign(q[name]) * np.sign(x[name]) >= 0)
  assert np.all(q["u"][:, 2] == 0)
  assert not np.any(apply("stoc", jnp.zeros((3, 2)), stoc_bits=2, stoc_norm=norm))
  if b == 1:  # P(Q_j ≠ 0) = |x_j| / ‖x‖ with the norm of the leaf (layer) or of the tree
    ref = np.linalg.norm(x["u"]) if norm == "layer" else sq(tree) ** 0.5
    p, p_hat = np.abs(x["u"]) / ref, (q["u"] != 0).mean(0)
    assert np.all(np.abs(p_hat - p) <= 4 * np.sqrt(p * (1 - p) / n) + 1e-6)


def test_stoc_global_norm_uses_one_norm():
  tree = {"a": arr(3.0, 0.0), "b": arr(0.0, 4.0)}   # global norm 5
  out = apply("stoc", tree, stoc_bits=1, stoc_norm="global")
  assert set(np.abs(np.concatenate([out["a"], out["b"]])).tolist()) <= {0.0, 5.0}
  out = apply("stoc", tree, stoc_bits=1)              # per leaf: a = 1 on both, kept exactly
  np.testing.assert_allclose(out["a"], arr(3, 0))
  np.testing.assert_allclose(out["b"], arr(0, 4))


# ---- bits (docs/papers/fedef.md, bits per message) ----

def test_bits_of_the_fedef_models():
  mlp = mnist_mlp()
  assert C.dense_bits(mlp) == 32 * 159_010
  assert C.make("sign").bits(mlp) == 159_138                        # d + 32 per tensor
  assert C.make("topk", k=0.01).bits(mlp) == 32 * 1_591 == 50_912
  assert C.make("stoc", stoc_bits=1).bits(mlp) == 159_010 + 32 * 4
  assert C.make("stoc", stoc_bits=4, stoc_norm="global").bits(mlp) == 4 * 159_010 + 32
  assert C.make("hvsign", k=0.01).bits(mlp) == 1_591 + 32 * 4
  assert C.dense_bits(mlp) / C.make("hvsign", k=0.01).bits(mlp) == pytest.approx(2960, abs=0.5)
  # CNN (cnn_mnist): k_i = 2, 1, 184, 1, 11796, 1, 12, 1
  assert C.dense_bits(CNN) == 32 * 1_199_882
  assert C.make("sign").bits(CNN) == 1_200_138
  assert C.make("topk", k=0.01).bits(CNN) == 383_936
  assert C.make("hvsign", k=0.01).bits(CNN) == 12_254
  assert C.make("hvsign", k=0.1).bits(CNN) == 120_241
  # digits MLP 64-200-10 (C6 of tests/claims/test_fedef_claims.py)
  expected = {("identity", 0.01): 480_320, ("sign", 0.01): 15_138, ("topk", 0.01): 4_832,
              ("topk", 0.05): 24_032, ("hvsign", 0.05): 879, ("stoc", 0.01): 15_138}
  for (name, k), bits in expected.items():
    assert C.make(name, k=k, stoc_bits=1).bits(DIGITS_MLP) == bits, name
  assert C.make("randk", k=0.01).bits(DIGITS_MLP) == 4_832


def test_bit_options():
  tree = {"w": jnp.zeros((10, 100)), "b": jnp.zeros(10)}   # k_i at 0.05: 50 and 1
  assert C.make("topk", k=0.05, count_indices=True).bits(tree) == 32 * 51 + 50 * 10 + 1 * 4
  assert C.make("hvsign", k=0.05, count_indices=True).bits(tree) == 51 + 64 + 50 * 10 + 4
  assert C.make("topk", k=0.05, float_bits=16).bits(tree) == 16 * 51
  assert C.make("sign", float_bits=16).bits(tree) == 1010 + 32
  assert C.make("stoc", stoc_bits=2, float_bits=64).bits(tree) == 2 * 1010 + 128


def test_stoc_nnz_bit_count():
  x = {"a": arr(3, -4, 0, 0), "b": arr(0.0, 1.0)}
  comp = C.make("stoc", stoc_bits=2, stoc_bit_count="nnz")
  assert not comp.bits_static and comp.bits(x) == 2 * 6 + 64   # worst case
  msg = jax.jit(comp.apply)(KEY, x)
  nnz = sum(np.count_nonzero(a) for a in jax.tree.leaves(msg))
  assert int(jax.jit(comp.bits_of)(msg)) == 2 * nnz + 64
  dense = C.make("stoc", stoc_bits=2)
  assert dense.bits_static and int(dense.bits_of(msg)) == dense.bits(x) == 2 * 6 + 64


# ---- error feedback, jit/vmap, keys, errors ----

ALL = [dict(name="identity"), dict(name="topk", k=0.2), dict(name="randk", k=0.2),
       dict(name="sign"), dict(name="hvsign", k=0.2), dict(name="stoc", stoc_bits=2),
       dict(name="hvsign", k=0.2, hvsign_scaling="group"), dict(name="stoc", stoc_norm="global")]


def test_error_feedback_invariant():
  """Error feedback (Alg. 2): with e_new = Δ + e_old − C(Δ + e_old), Δ̃ + e_new == Δ + e_old."""
  comps = [C.make(**kw) for kw in ALL]

  @jax.jit
  def ef_steps(key, delta, errors):  # one EF step of every compressor, one program
    out = []
    for c, e in zip(comps, errors):
      a = jax.tree.map(jnp.add, delta, e)
      sent = c.apply(key, a)
      out.append((sent, jax.tree.map(jnp.subtract, a, sent)))
    return out

  rng = np.random.default_rng(4)
  zeros = {"w": np.zeros((3, 5), np.float32), "b": np.zeros(5, np.float32)}
  errors = [zeros] * len(comps)
  for t in range(3):
    delta = jax.tree.map(lambda a: rng.normal(size=a.shape).astype(np.float32), zeros)
    steps = jax.tree.map(np.asarray, ef_steps(jax.random.fold_in(KEY, t), delta, errors))
    for kw, e, (sent, e_new) in zip(ALL, errors, steps):
      for s, en, d, eo in zip(*map(jax.tree.leaves, (sent, e_new, delta, e))):
        np.testing.assert_allclose(s + en, d + eo, rtol=1e-6, atol=1e-6, err_msg=str(kw))
    errors = [e_new for _, e_new in steps]
  assert sq(errors[0]) == 0.0   # identity: the error stays 0


def test_jit_vmap_matches_per_client_loop_and_keys_decide():
  comps = [C.make(**kw) for kw in ALL[1:6]]

  def all_of(key, tree):  # one program for every compressor: one compilation
    return [c.apply(key, tree) for c in comps]

  rng = np.random.default_rng(5)
  x = {"w": rng.normal(size=(4, 6, 3)).astype(np.float32),
       "b": rng.normal(size=(4, 3)).astype(np.float32)}
  keys = jax.random.split(KEY, 4)
  batched, one = jax.jit(jax.vmap(all_of))(keys, x), jax.jit(all_of)
  for i in range(4):
    xi = jax.tree.map(lambda a: a[i], x)
    jax.tree.map(lambda b, o: np.testing.assert_allclose(b[i], o, rtol=1e-6, atol=1e-7),
                 batched, one(keys[i], xi))
    jax.tree.map(np.testing.assert_array_equal, one(keys[i], xi), one(keys[i], xi))
  x0 = jax.tree.map(lambda a: a[0], x)
  first, second = one(keys[0], x0), one(keys[1], x0)
  for c, y0, y1, yb in zip(comps, first, second, batched):
    differ = any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(y0), jax.tree.leaves(y1)))
    assert differ == (c.name in ("randk", "stoc")), c.name
    assert [(a.shape, a.dtype) for a in jax.tree.leaves(yb)] == \
        [(a.shape, a.dtype) for a in jax.tree.leaves(x)]


def test_dtype_is_kept():
  x = {"w": jnp.ones((4, 4), jnp.bfloat16)}
  for kw in ALL:
    assert jax.eval_shape(C.make(**kw).apply, KEY, x)["w"].dtype == jnp.bfloat16


def test_discrepancy():
  x, y = {"a": arr(3, 4)}, {"a": arr(3, 0)}
  assert float(C.discrepancy(y, x)) == pytest.approx(16 / 25)
  assert float(C.discrepancy({"a": jnp.zeros(2)}, {"a": jnp.zeros(2)})) == 0.0


@pytest.mark.parametrize("kw,word", [
    (dict(name="topq"), "identity, topk, randk, sign, hvsign, stoc"),
    (dict(name="topk", k=0.0), "(0, 1]"), (dict(name="topk", k=1.5), "(0, 1]"),
    (dict(name="stoc", stoc_bits=0), ">= 1"), (dict(name="stoc", stoc_bits=1.5), ">= 1"),
    (dict(name="stoc", stoc_norm="tensor"), "layer, global"),
    (dict(name="hvsign", hvsign_scaling="full"), "support, group"),
    (dict(name="sign", grouping="model"), "tensor, layer, global"),
    (dict(name="stoc", stoc_bit_count="sparse"), "dense, nnz"),
    (dict(name="sign", float_bits=0), ">= 1")])
def test_bad_arguments(kw, word):
  with pytest.raises(UsageError) as info:
    C.make(**kw)
  assert word in str(info.value) and "\n" not in str(info.value)
