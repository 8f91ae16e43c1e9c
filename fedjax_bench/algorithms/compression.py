"""Compression operators of Fed-EF (Li & Li, Section 3.1 and App. A), each paired with
its exact bit cost (the client-to-server bits of Section 5).

A compressor maps an update pytree to a pytree of the same structure, shapes and dtypes.
It works on *groups* (Definition 1's groups; our reading, docs/papers/fedef.md): by default one
group per parameter tensor, so a layer's
kernel and bias are compressed independently. `grouping="layer"` joins the leaves whose key
paths differ only in their last entry (a module's kernel and bias); `"global"` makes the
whole tree one group.

Randomness (Stoc, RandK) comes only from the key given to `apply`: leaf number j (the
position in `jax.tree.leaves` order) draws from `jax.random.fold_in(key, j)`, so a leaf's
noise does not depend on the other leaves. Deterministic compressors ignore the key.

Bits are host-side Python ints computed from the shapes. The same count holds in either
direction: an uplink message is one client's compressed update; a downlink message (two-way
Fed-EF) is the server's compressed direction, the same tree, sent to every receiving client.
"""

import math
import numbers
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_bench.errors import UsageError
from fedjax_bench.settings import UNIT_INTERVAL, between, section, setting

COMPRESSORS = ("identity", "topk", "randk", "sign", "hvsign", "stoc")
GROUPINGS = ("tensor", "layer", "global")
HVSIGN_SCALINGS = ("support", "group")
STOC_NORMS = ("layer", "global")
STOC_BIT_COUNTS = ("dense", "nnz")


class Compressor(NamedTuple):
  name: str
  apply: Callable     # (key, tree) -> tree of the same structure, shapes and dtypes
  bits: Callable      # (tree) -> int, bits of one message (only shapes are read)
  unbiased: bool      # E[C(x)] = x
  # (tree) -> float q2 with ‖C(x) − x‖² ≤ q2 ‖x‖² for every x (Definition 1). For randomized
  # compressors the bound is on E‖C(x) − x‖²: the variance factor ω when unbiased (can
  # exceed 1). Only shapes are read.
  q2: Callable
  # (compressed tree) -> int32 array, the bits of this very message (jit-friendly; for
  # totals over rounds use Python ints). Equals `bits` except for Stoc with
  # stoc_bit_count="nnz", whose cost depends on the draw; there `bits` is the worst case
  # b·d + 32·norms and `bits_static` is False.
  bits_of: Callable
  bits_static: bool = True


def _shape(leaf) -> tuple:
  return tuple(getattr(leaf, "shape", np.shape(leaf)))


def _groups(tree, grouping: str) -> list[list[int]]:
  """Leaf indices (tree.leaves order) of each group."""
  paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]
  if grouping == "tensor":
    return [[j] for j in range(len(paths))]
  if grouping == "global":
    return [list(range(len(paths)))] if paths else []
  by_parent: dict = {}
  for j, p in enumerate(paths):
    by_parent.setdefault(tuple(p[:-1]), []).append(j)
  return list(by_parent.values())


def _group_sizes(tree, grouping: str) -> list[int]:
  sizes = [math.prod(_shape(leaf)) for leaf in jax.tree.leaves(tree)]
  return [sum(sizes[j] for j in g) for g in _groups(tree, grouping)]


def num_kept(k: float, d: int) -> int:
  """k_i = max(1, floor(k d_i)) (TopK, Section 3.1); the float product is nudged so 0.29·100
  gives 29."""
  return max(1, min(d, math.floor(k * d + 1e-9)))


def dense_bits(tree, float_bits: int = 32) -> int:
  """A full-precision message: float_bits per coordinate."""
  return float_bits * sum(math.prod(_shape(leaf)) for leaf in jax.tree.leaves(tree))


def discrepancy(compressed_tree, tree) -> jax.Array:
  """‖C(x) − x‖² / ‖x‖² over the whole tree (q² of Definition 1, q_A² of App. C on
  means); 0/0 = 0."""
  num = sum(jnp.sum(jnp.square(c.astype(jnp.float32) - x.astype(jnp.float32)))
            for c, x in zip(jax.tree.leaves(compressed_tree), jax.tree.leaves(tree)))
  den = sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in jax.tree.leaves(tree))
  num, den = jnp.asarray(num, jnp.float32), jnp.asarray(den, jnp.float32)
  return jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0),
                   jnp.where(num > 0, jnp.inf, 0.0))


# Group operators on a flat float32 vector. `noise` is a same-size vector of random draws
# (None for deterministic compressors); `norm` overrides the group's L2 norm (Stoc global).

def _topk_support(x, k: int):
  _, idx = jax.lax.top_k(jnp.abs(x), k)  # exactly k; ties go to the lower index
  return idx


def _topk(x, k: int):
  idx = _topk_support(x, k)
  return jnp.zeros_like(x).at[idx].set(x[idx])


def _randk(x, noise, k: int, scale: bool):
  _, idx = jax.lax.top_k(noise, k)  # the k largest of i.i.d. keys: a uniform k-subset
  vals = x[idx] * (x.shape[0] / k) if scale else x[idx]
  return jnp.zeros_like(x).at[idx].set(vals)


def _sign(x):
  return jnp.mean(jnp.abs(x)) * jnp.sign(x)


def _hvsign(x, k: int, scaling: str):
  idx = _topk_support(x, k)
  kept = x[idx]
  scale = jnp.sum(jnp.abs(kept)) / (k if scaling == "support" else x.shape[0])
  return jnp.zeros_like(x).at[idx].set(scale * jnp.sign(kept))


def _stoc(x, noise, s: int, norm=None):
  norm = jnp.sqrt(jnp.sum(jnp.square(x))) if norm is None else norm
  a = jnp.abs(x) / jnp.where(norm > 0, norm, 1.0)
  low = jnp.minimum(jnp.floor(a * s), s - 1)
  level = low + (noise < a * s - low)
  return jnp.where(norm > 0, norm * jnp.sign(x) * level / s, 0.0)


def _uniform(key, shape):
  return jax.random.uniform(key, shape)


def _rank_keys(key, shape):
  """I.i.d. floats with 29 random bits: positive normal floats sort like their bit patterns,
  so distinct words never tie (uniform floats have 23 bits). Float, as XLA's CPU top_k is
  ~10x slower on integers."""
  words = jax.random.bits(key, shape, jnp.uint32) >> 3
  return jax.lax.bitcast_convert_type(words + jnp.uint32(0x00800000), jnp.float32)


def _apply_grouped(fn, groups, key, tree, *, draw=None, global_norm: bool = False):
  """Run fn(flat, noise, norm) on each group; multi-leaf groups are concatenated.

  Leaf j's noise is draw(fold_in(key, j), leaf size), so it does not depend on other leaves.
  """
  leaves, treedef = jax.tree.flatten(tree)
  flat = [leaf.astype(jnp.promote_types(leaf.dtype, jnp.float32)).ravel() for leaf in leaves]
  noisy = draw is not None
  noise = ([draw(jax.random.fold_in(key, j), f.shape) for j, f in enumerate(flat)]
           if noisy else [None] * len(flat))
  norm = (jnp.sqrt(sum(jnp.sum(jnp.square(f)) for f in flat)) if global_norm and flat
          else None)
  out = [None] * len(leaves)
  for g in groups:
    x = jnp.concatenate([flat[j] for j in g]) if len(g) > 1 else flat[g[0]]
    u = (jnp.concatenate([noise[j] for j in g]) if len(g) > 1 else noise[g[0]]) if noisy else None
    y = fn(x, u, norm)
    splits = np.cumsum([flat[j].shape[0] for j in g])[:-1]
    for j, part in zip(g, jnp.split(y, splits) if len(g) > 1 else [y]):
      out[j] = part.reshape(leaves[j].shape).astype(leaves[j].dtype)
  return jax.tree.unflatten(treedef, out)


def _choices(what: str, value, valid) -> None:
  if value not in valid:
    raise UsageError(f"unknown {what} {value!r}; valid: {', '.join(valid)}")


_DOWN = lambda hp: hp.down_compressor != "none"


@section("compression")
class Compression:
  compressor: str = setting("identity", "Uplink compressor, per parameter tensor (Fed-EF paper, "
                            "Section 3.1).", choices=COMPRESSORS)
  compress_k: float = setting(0.01, "Fraction kept by topk/hvsign/randk: max(1, floor(k d_i)) "
                              "entries of each tensor.", check=UNIT_INTERVAL)
  stoc_bits: int = setting(4, "Bits per coordinate of --compressor=stoc (QSGD).",
                           check=between(1, 32))  # 2^(b-1) levels of a float32
  stoc_norm: str = setting("layer", "stoc: one norm per tensor or one for the whole model.",
                           choices=STOC_NORMS)
  hvsign_scaling: str = setting("support", "hvsign: scale by mean |x| over the kept entries, "
                                "or ||x_S||_1 / d_i.", choices=HVSIGN_SCALINGS)
  count_indices: bool = setting(False, "Count index bits of sparse messages (the paper does "
                                "not).")
  down_compressor: str = setting("none", "Two-way compression: the server's compressor, with "
                                 "server-side error feedback.", choices=("none", *COMPRESSORS))
  down_compress_k: float = setting(0.01, "--compress_k of the downlink compressor.",
                                   check=UNIT_INTERVAL, used_if=_DOWN)
  down_stoc_bits: int = setting(4, "--stoc_bits of the downlink compressor.", check=between(1, 32),
                                used_if=_DOWN)

  def compressor_of(self, direction: str = "up") -> "Compressor":
    down = direction == "down"
    return make(self.down_compressor if down else self.compressor,
                k=self.down_compress_k if down else self.compress_k,
                stoc_bits=self.down_stoc_bits if down else self.stoc_bits,
                stoc_norm=self.stoc_norm, hvsign_scaling=self.hvsign_scaling,
                count_indices=self.count_indices)


def make(name: str, *, k: float = 0.01, stoc_bits: int = 4, stoc_norm: str = "layer",
         hvsign_scaling: str = "support", float_bits: int = 32, grouping: str = "tensor",
         count_indices: bool = False, stoc_bit_count: str = "dense",
         randk_unbiased: bool = False) -> Compressor:
  """A compressor by name (COMPRESSORS).

  k: fraction kept by topk/hvsign/randk, k_i = max(1, floor(k d_i)) per group.
  stoc_bits: b of Stoc (s = 2^(b-1) levels). stoc_norm: "layer" (one norm per group) or
  "global" (one norm for the whole tree). Our readings of what
  the paper leaves open (docs/papers/fedef.md). hvsign_scaling: "support" (mean |x| over the
  TopK support) or "group" (‖x_S‖₁ / d_i, Definition 2 literally). float_bits: bits
  of one float (values, scales, norms). grouping: "tensor" | "layer" | "global".
  count_indices: add k_i·ceil(log2 d_i) index bits to topk/hvsign/randk.
  stoc_bit_count: "dense" (b bits per coordinate) or "nnz" (b per non-zero).
  randk_unbiased: scale the kept entries by d_i/k_i (random-k, not in the paper's experiments).
  """
  _choices("compressor", name, COMPRESSORS)
  _choices("grouping", grouping, GROUPINGS)
  _choices("hvsign_scaling", hvsign_scaling, HVSIGN_SCALINGS)
  _choices("stoc_norm", stoc_norm, STOC_NORMS)
  _choices("stoc_bit_count", stoc_bit_count, STOC_BIT_COUNTS)
  if isinstance(k, bool) or not isinstance(k, numbers.Real) or not 0 < k <= 1:
    raise UsageError(f"compression fraction k={k!r} must be in (0, 1]")
  for what, v in (("stoc_bits", stoc_bits), ("float_bits", float_bits)):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
      raise UsageError(f"{what}={v!r} must be an integer >= 1")
  fb, b, s = float_bits, int(stoc_bits), 2 ** (int(stoc_bits) - 1)
  glob = name == "stoc" and stoc_norm == "global"

  def idx_bits(d):
    return num_kept(k, d) * math.ceil(math.log2(d)) if count_indices else 0

  # Per group of size d: the operator on the flat group, the message bits and the q² of Definition 1
  # (for Stoc and RandK a bound on E‖C(x) − x‖², for unbiased ones the variance factor ω).
  if name == "identity":
    op, group_bits, group_q2 = None, lambda d: fb * d, lambda d: 0.0
  elif name == "topk":
    def op(x, u, _):
      return _topk(x, num_kept(k, x.shape[0]))
    def group_bits(d):
      return fb * num_kept(k, d) + idx_bits(d)
    def group_q2(d):
      return 1 - num_kept(k, d) / d
  elif name == "randk":
    def op(x, u, _):
      return _randk(x, u, num_kept(k, x.shape[0]), randk_unbiased)
    def group_bits(d):
      return fb * num_kept(k, d) + idx_bits(d)
    def group_q2(d):  # exact expectations
      return d / num_kept(k, d) - 1 if randk_unbiased else 1 - num_kept(k, d) / d
  elif name == "sign":
    def op(x, u, _):
      return _sign(x)
    def group_bits(d):
      return d + fb
    def group_q2(d):
      return 1 - 1 / d
  elif name == "hvsign":
    def op(x, u, _):
      return _hvsign(x, num_kept(k, x.shape[0]), hvsign_scaling)
    def group_bits(d):
      return num_kept(k, d) + fb + idx_bits(d)
    def group_q2(d):
      # support: our reading of Definition 2. group: ‖C(x) − x‖² = ‖x‖² − (‖x_S‖₁²/d)(2 − k_i/d),
      # and
      # ‖x_S‖₁² ≥ ‖x_S‖² ≥ (k_i/d)‖x‖² give 1 − k_i/d² (Prop. 3.2's 1 − k/d_i, floored).
      return 1 - 1 / d if hvsign_scaling == "support" else 1 - num_kept(k, d) / d ** 2
  else:  # stoc
    def op(x, u, norm):
      return _stoc(x, u, s, norm)
    def group_bits(d):
      return b * d + (0 if glob else fb)
    def group_q2(d):  # QSGD, per vector that shares one norm
      return min(d / s ** 2, math.sqrt(d) / s)

  def sizes(tree):
    return _group_sizes(tree, grouping)

  def bits(tree):
    d = sizes(tree)
    return sum(group_bits(di) for di in d) + (fb if glob and d else 0)

  def q2(tree):
    d = sizes(tree)
    return max((group_q2(di) for di in ([sum(d)] if glob and d else d)), default=0.0)

  def apply(key, tree):
    if op is None:
      return tree
    draw = {"stoc": _uniform, "randk": _rank_keys}.get(name)
    return _apply_grouped(op, _groups(tree, grouping), key, tree, draw=draw, global_norm=glob)

  if name == "stoc" and stoc_bit_count == "nnz":
    def bits_of(message):
      nnz = sum(jnp.count_nonzero(leaf) for leaf in jax.tree.leaves(message))
      return b * jnp.asarray(nnz, jnp.int32) + jnp.int32(bits(message) - b * sum(sizes(message)))
  else:
    def bits_of(message):
      return jnp.int32(bits(message))
  unbiased = name in ("identity", "stoc") or (name == "randk" and randk_unbiased)
  return Compressor(name, apply, bits, unbiased, q2, bits_of,
                    bits_static=not (name == "stoc" and stoc_bit_count == "nnz"))
