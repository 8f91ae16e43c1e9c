"""A 2-D convolution whose gradients XLA:CPU runs fast inside loops.

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
else is `lax.conv_general_dilated` unchanged.
"""

from functools import partial

import jax
import jax.numpy as jnp
from flax import linen as nn
from jax import lax

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
    return conv_nhwc(lhs, rhs, tuple((int(lo), int(hi)) for lo, hi in padding))


def Conv(*args, **kwargs) -> nn.Conv:  # noqa: N802  (a module constructor)
  """`nn.Conv` with `FastGradConv`: the same parameters, names and numbers."""
  return nn.Conv(*args, conv_general_dilated_cls=FastGradConv, **kwargs)
