"""Stride-1 NHWC convolutions by Winograd's minimal filtering F(m x m, r x r), for XLA:CPU.

Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR 2016. An r x r
correlation of an a x a input tile d (a = m + r - 1) is A^T [(G g G^T) * (B^T d B)] A: a*a
products per m x m outputs instead of m*m*r*r. With the channels, each of the a*a tile
positions is one matrix product over all tiles, [T, C_in] x [C_in, C_out]:

  V = input(x)           [a*a, T, C_in]    V_pq = (B^T d B)_pq of each input window
  U = G w G^T            [a*a, C_in, C_out]
  M = V U                [a*a, T, C_out]   a*a batched products (XLA's dot)
  y = output(M)          [N, Ho, Wo, C_out] the A^T M A of each tile, cut to the image

and the gradients are those of this program: dM = output^T(dy), dU = V^T dM (dw = G^T dU
G), dV = dM U^T, dx = input^T(dV). XLA:CPU runs the direct convolution near its matmul
rate already; Winograd pays because its products are a fraction of the direct ones (F(4x4,
5x5): 64 per 16 outputs instead of 400) and because the four tile transforms, which XLA
compiles into many passes over tensors a*a/m^2 times the image, run here as one C++ pass
each (`core/kernels/winograd.cc`), tile by tile. Where the kernels cannot be built, the same
transforms run as XLA ops (`_xla_*`): the same arithmetic, sums in another order.

The float32 error is larger than the direct convolution's and grows with the tile (A^T's
entries reach 8 at F(4x4, 5x5)): 3x the direct convolution's at F(4x4, 3x3), 8x at F(4x4,
5x5) against float64. `POINTS` are the interpolation points of the smallest error of the
sets tried; tests/models/test_winograd.py bounds each output's error a priori.
"""

import contextlib
import threading
from functools import lru_cache, partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fedjax_bench.core import kernels

SOURCE = "winograd.cc"
# The C++'s SHA-256: a run's code record holds this module's bindings, not the C++, so an
# edit of the kernels stales the runs that called them through this line
# (tests/models/test_winograd.py fails until it is updated).
SOURCE_SHA256 = "72dd284f9531c8b1e2bc643a0c2387045d23264e050172b1c08e1852da178de5"

# Interpolation points of the Toom-Cook construction (and the point at infinity), by m + r -
# 1: of the sets tried, the ones with the smallest float32 error.
POINTS = {4: (0.0, 1.0, -1.0), 6: (0.0, 1.0, -1.0, 0.5, -2.0),
          8: (0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5)}


@lru_cache(maxsize=None)
def transforms(m: int, r: int):
  """(A^T [m, a], G [a, r], B^T [a, a]) of F(m, r) in float64, a = m + r - 1: the
  correlation y_i = sum_k d_{i+k} g_k of a inputs with r taps is A^T ((G g) * (B^T d)).
  A^T and G are the Vandermonde and Lagrange matrices of the points and infinity; B^T is
  solved from that identity (it is determined by it)."""
  a = m + r - 1
  points = POINTS[a]
  at, g = np.zeros((m, a)), np.zeros((a, r))
  for i, p in enumerate(points):
    at[:, i] = [p ** j for j in range(m)]
    lagrange = np.prod([p - q for k, q in enumerate(points) if k != i])
    g[i] = [p ** j / lagrange for j in range(r)]
  at[m - 1, a - 1] = g[a - 1, r - 1] = 1.0
  # sum_l at[i, l] g[l, k] bt[l, j] = [j == i + k] for all i, k, j: linear in bt.
  system = np.einsum("il,lk,lL,jJ->ikjLJ", at, g, np.eye(a), np.eye(a)).reshape(m * r * a, -1)
  target = np.array([[[float(j == i + k) for j in range(a)] for k in range(r)]
                     for i in range(m)]).ravel()
  bt = np.linalg.lstsq(system, target, rcond=None)[0].reshape(a, a)
  if np.abs(system @ bt.ravel() - target).max() > 1e-9:
    raise ValueError(f"points {points} give no F({m}, {r})")
  bt[np.abs(bt) < 1e-12] = 0.0  # the solver's rounding, not terms
  return at, g, bt


# F(4x4, r x r) for these kernel sizes, from this many input channels: where the transforms
# cost less than the products they save (docs/performance.md, "Winograd convolutions").
KERNELS, MIN_CHANNELS, TILE = (3, 5), 16, 4


_direct = threading.local()


def tile(x_shape, w_shape, dtype=jnp.float32) -> int | None:
  """The output tile m of the F(m x m, r x r) that convolves x [..., N, H, W, C_in] by w
  [r, r, C_in, C_out] (both of ``dtype``) faster than XLA:CPU's direct convolution, or None
  (also inside `direct`; the kernels take float32)."""
  r, s, c_in, _ = w_shape
  if (getattr(_direct, "on", False) or dtype != jnp.float32 or r != s or r not in KERNELS
      or c_in < MIN_CHANNELS or min(x_shape[-3:-1]) < r):
    return None
  return TILE


@contextlib.contextmanager
def direct():
  """Programs traced inside use the direct convolution: what the speed benchmarks count a
  CNN's arithmetic by (the model's FLOPs, not the fewer that Winograd's program does)."""
  before, _direct.on = getattr(_direct, "on", False), True
  try:
    yield
  finally:
    _direct.on = before


class Plan:
  """The tiling of one convolution: x [..., N, H, W, C_in] by w [r, r, C_in, C_out] with
  padding ((lo, hi), (lo, hi)), output tiles of m x m."""

  def __init__(self, x_shape, r: int, pads, m: int):
    *_, self.n, self.h, self.w, _ = x_shape
    (self.pad_h, hi_h), (self.pad_w, hi_w) = pads
    self.r, self.m, self.a = r, m, m + r - 1
    self.ho, self.wo = self.h + self.pad_h + hi_h - r + 1, self.w + self.pad_w + hi_w - r + 1
    self.th, self.tw = -(-self.ho // m), -(-self.wo // m)
    self.tiles = self.n * self.th * self.tw
    at, g, bt = transforms(m, r)
    self.at, self.g, self.bt = (t.astype(np.float32) for t in (at, g, bt))


def _xla_input(plan: Plan, x):
  a, m = plan.a, plan.m
  rows, cols = plan.th * m + plan.r - 1, plan.tw * m + plan.r - 1
  xp = jnp.pad(x, ((0, 0), (plan.pad_h, rows - plan.h - plan.pad_h),
                   (plan.pad_w, cols - plan.w - plan.pad_w), (0, 0)))
  d = jnp.stack([jnp.stack([xp[:, k:k + m * plan.th:m, l:l + m * plan.tw:m]
                            for l in range(a)]) for k in range(a)])  # [a, a, N, th, tw, C]
  v = jnp.einsum("pk,ql,klnijc->pqnijc", plan.bt, plan.bt, d)
  return v.reshape(a * a, plan.tiles, -1)


def _xla_output(plan: Plan, mm):
  a, m = plan.a, plan.m
  t = mm.reshape(a, a, plan.n, plan.th, plan.tw, -1)
  y = jnp.einsum("up,vq,pqnijc->niujvc", plan.at, plan.at, t)
  return y.reshape(plan.n, plan.th * m, plan.tw * m, -1)[:, :plan.ho, :plan.wo]


def _call(symbol: str, out_shape, arg, **attrs):
  """``symbol``'s C++ transform of ``arg`` into ``out_shape``, or None where the kernels
  cannot be built."""
  name = kernels.target(SOURCE, symbol)
  if name is None:
    return None
  call = jax.ffi.ffi_call(name, jax.ShapeDtypeStruct(out_shape, jnp.float32),
                          vmap_method="broadcast_all")
  return call(arg, **{k: (np.ravel(v).astype(np.float32) if isinstance(v, np.ndarray)
                          else np.int64(v)) for k, v in attrs.items()})


def _input(plan: Plan, x):
  out = _call("WinogradInput", (plan.a ** 2, plan.tiles, x.shape[-1]), x, bt=plan.bt,
              pad_h=plan.pad_h, pad_w=plan.pad_w, th=plan.th, tw=plan.tw, m=plan.m)
  return _xla_input(plan, x) if out is None else out


def _input_t(plan: Plan, v):
  shape = (plan.n, plan.h, plan.w, v.shape[-1])
  out = _call("WinogradInputT", shape, v, bt=plan.bt, pad_h=plan.pad_h, pad_w=plan.pad_w,
              th=plan.th, tw=plan.tw, m=plan.m)
  if out is None:
    (out,) = jax.linear_transpose(partial(_xla_input, plan),
                                  jax.ShapeDtypeStruct(shape, jnp.float32))(v)
  return out


def _output(plan: Plan, mm):
  out = _call("WinogradOutput", (plan.n, plan.ho, plan.wo, mm.shape[-1]), mm, at=plan.at,
              th=plan.th, tw=plan.tw, m=plan.m)
  return _xla_output(plan, mm) if out is None else out


def _output_t(plan: Plan, dy):
  shape = (plan.a ** 2, plan.tiles, dy.shape[-1])
  out = _call("WinogradOutputT", shape, dy, at=plan.at, th=plan.th, tw=plan.tw, m=plan.m)
  if out is None:
    (out,) = jax.linear_transpose(partial(_xla_output, plan),
                                  jax.ShapeDtypeStruct(shape, jnp.float32))(dy)
  return out


_BATCHED = (((2,), (1,)), ((0,), (0,)))  # [a*a, T, K] x [a*a, K, O] -> [a*a, T, O]


def _filter(plan: Plan, w):
  """U = G w G^T of every (C_in, C_out) pair: [a*a, C_in, C_out]."""
  u = jnp.einsum("ak,bl,klio->abio", plan.g, plan.g, w)
  return u.reshape(plan.a ** 2, *w.shape[2:])


@partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def conv(x, w, pads, m: int):
  """The stride-1 convolution of x [N, H, W, C_in] by w [r, r, C_in, C_out] with explicit
  ((lo, hi), (lo, hi)) padding, by F(m x m, r x r): `lax.conv_general_dilated` in NHWC/HWIO
  up to float rounding of the transforms."""
  return _forward(x, w, pads, m)[0]


def _forward(x, w, pads, m):
  plan = Plan(x.shape, w.shape[0], pads, m)
  v, u = _input(plan, x), _filter(plan, w)
  return _output(plan, lax.dot_general(v, u, _BATCHED)), (v, u)


def _backward(pads, m, res, dy):
  v, u = res
  r = round(v.shape[0] ** 0.5) - m + 1
  (lo_h, hi_h), (lo_w, hi_w) = pads
  n, ho, wo, _ = dy.shape
  plan = Plan((n, ho + r - 1 - lo_h - hi_h, wo + r - 1 - lo_w - hi_w, u.shape[1]), r, pads, m)
  dm = _output_t(plan, dy)
  du = lax.dot_general(v, dm, (((1,), (1,)), ((0,), (0,))))  # V^T dM: [a*a, C_in, C_out]
  dw = jnp.einsum("ak,bl,abio->klio", plan.g, plan.g, du.reshape(plan.a, plan.a, *du.shape[1:]))
  dv = lax.dot_general(dm, u, (((2,), (2,)), ((0,), (0,))))  # dM U^T: [a*a, T, C_in]
  return _input_t(plan, dv), dw


conv.defvjp(_forward, _backward)
