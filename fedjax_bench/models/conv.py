"""A 2-D convolution and a 2x2 max pooling whose gradients XLA:CPU runs fast inside loops.

Inside a `lax.scan` (local steps, rounds), XLA:CPU folds the transposes of a convolution's
backward pass into the convolution's dimension numbers and then runs the weight and
input gradients on a slow generic path: a batch-32 gradient of a 5x5, 32->64 convolution
takes 13 ms alone and 231 ms as a scan step (docs/performance.md, "Convolutions on CPU"). Here the
backward pass is written out as two convolutions in the canonical NHWC/HWIO layout,
with the transposes explicit, which the fast path takes: 12.5 ms per scan step, the
same numbers. (Upstream: jax-ml/jax#12868, "Convolution is significantly slower inside a
loop body (CPU)", open.)

Use it as ``nn.Conv(..., conv_general_dilated_cls=FastGradConv)``. Only stride-1,
undilated, ungrouped NHWC convolutions on CPU take the rewritten gradient; anything
else is `lax.conv_general_dilated` unchanged. Of those, the 3x3 and 5x5 ones of at least
16 input channels run by Winograd's F(4x4) (`models/winograd.py`): 1.5-1.9x faster than
XLA's convolution forward and back, the same numbers up to a larger float32 rounding.

`max_pool` is flax's ``nn.max_pool(x, (2, 2), strides=(2, 2))`` with its gradient written
out as a select of each window's first maximum: XLA:CPU runs the select-and-scatter that
JAX differentiates a max pooling into about 19x slower than the written-out select, and on
the FedAvg paper's CNN those scatters were a quarter of a local step (docs/performance.md,
"Convolutions on CPU"). The same values and gradients, bit for bit.
"""

from functools import partial

import jax
import jax.numpy as jnp
from flax import linen as nn
from jax import lax

from fedjax_bench.models import winograd

_NHWC = ("NHWC", "HWIO", "NHWC")


def _conv(x, w, pads):
  return lax.conv_general_dilated(x, w, (1, 1), pads, dimension_numbers=_NHWC)


@partial(jax.custom_vjp, nondiff_argnums=(2,))
def conv_nhwc(x, w, pads):
  """Stride-1 NHWC/HWIO convolution with explicit ((lo, hi), (lo, hi)) padding."""
  return _conv(x, w, pads)


def _fwd(x, w, pads):
  return _conv(x, w, pads), (x, w)


def _bwd(pads, res, dy):
  x, w = res
  kernel = w.shape[:2]
  # dx: the output gradient convolved with the flipped kernel, in and out swapped.
  w_t = jnp.transpose(jnp.flip(w, (0, 1)), (0, 1, 3, 2))
  dx = _conv(dy, w_t, [(k - 1 - lo, k - 1 - hi) for k, (lo, hi) in zip(kernel, pads)])
  # dw: channels as the batch, the batch as the contracted feature, dy as the kernel.
  dw = _conv(jnp.transpose(x, (3, 1, 2, 0)), jnp.transpose(dy, (1, 2, 0, 3)), pads)
  return dx, jnp.transpose(dw, (1, 2, 0, 3))


conv_nhwc.defvjp(_fwd, _bwd)


class FastGradConv:
  """A drop-in `lax.conv_general_dilated` for flax's ``conv_general_dilated_cls``."""

  def __call__(self, lhs, rhs, window_strides, padding, lhs_dilation=None,
               rhs_dilation=None, dimension_numbers=None, feature_group_count=1,
               precision=None, **kwargs):
    plain = (lhs.ndim == 4 and tuple(window_strides) == (1, 1)
             and all(d == 1 for d in (lhs_dilation or (1, 1)))
             and all(d == 1 for d in (rhs_dilation or (1, 1)))
             and feature_group_count == 1 and precision is None and not kwargs
             and dimension_numbers == lax.conv_dimension_numbers(lhs.shape, rhs.shape, _NHWC)
             and jax.default_backend() == "cpu")
    if not plain:
      return lax.conv_general_dilated(
          lhs, rhs, window_strides, padding, lhs_dilation=lhs_dilation,
          rhs_dilation=rhs_dilation, dimension_numbers=dimension_numbers,
          feature_group_count=feature_group_count, precision=precision, **kwargs)
    if isinstance(padding, str):
      padding = lax.padtype_to_pads(lhs.shape[1:3], rhs.shape[:2], (1, 1), padding)
    pads = tuple((int(lo), int(hi)) for lo, hi in padding)
    m = winograd.tile(lhs.shape, rhs.shape, jnp.result_type(lhs, rhs))
    return conv_nhwc(lhs, rhs, pads) if m is None else winograd.conv(lhs, rhs, pads, m)


def Conv(*args, **kwargs) -> nn.Conv:  # noqa: N802  (a module constructor)
  """`nn.Conv` with `FastGradConv`: the same parameters, names and numbers."""
  return nn.Conv(*args, conv_general_dilated_cls=FastGradConv, **kwargs)


def max_pool(x: jax.Array) -> jax.Array:
  """2x2 max pooling with stride 2 of an NHWC batch, VALID (an odd last row or column is
  left out): ``nn.max_pool(x, (2, 2), strides=(2, 2))``, bit for bit in value and
  gradient. On CPU the gradient goes to each window's first maximum by a select (`_pool`);
  elsewhere this is ``nn.max_pool`` itself."""
  if x.ndim != 4 or jax.default_backend() != "cpu":
    return nn.max_pool(x, (2, 2), strides=(2, 2))
  return _pool(x)


def _corners(x):
  """The four elements of every 2x2 window, in the window's row-major order, each
  [B, H // 2, W // 2, C]."""
  b, h, w, c = x.shape
  x = x[:, :h // 2 * 2, :w // 2 * 2].reshape(b, h // 2, 2, w // 2, 2, c)
  return [x[:, :, i, :, j] for i in (0, 1) for j in (0, 1)]


def _maximum(corners):
  # max(a, b, c, d) in the window's order, as XLA's reduce_window computes it.
  out = corners[0]
  for q in corners[1:]:
    out = lax.max(out, q)
  return out


@jax.custom_vjp
def _pool(x):
  return _maximum(_corners(x))


def _pool_fwd(x):
  # Which corner JAX's gradient picks: its select-and-scatter keeps the element selected
  # so far unless that is not >= the next one (lax.ge), so ties go to the first, and a NaN
  # passes the choice on.
  corners = _corners(x)
  chosen, which = corners[0], jnp.zeros(corners[0].shape, jnp.int8)
  for k, q in enumerate(corners[1:], 1):
    later = ~(chosen >= q)
    chosen, which = jnp.where(later, q, chosen), jnp.where(later, jnp.int8(k), which)
  return _maximum(corners), (which, x.shape)


def _pool_bwd(res, g):
  which, (b, h, w, c) = res
  # The scatter adds g to a zero: a -0.0 arrives as 0.0, hence g != 0 (NaN passes).
  keep = lambda k: jnp.where((which == k) & (g != 0), g, jnp.zeros((), g.dtype))
  rows = [jnp.stack([keep(2 * i), keep(2 * i + 1)], axis=3) for i in (0, 1)]
  dx = jnp.stack(rows, axis=2).reshape(b, h // 2 * 2, w // 2 * 2, c)
  return (jnp.pad(dx, ((0, 0), (0, h % 2), (0, w % 2), (0, 0))),)


_pool.defvjp(_pool_fwd, _pool_bwd)
