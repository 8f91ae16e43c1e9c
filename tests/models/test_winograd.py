"""models.winograd: Winograd's F(m x m, r x r) convolution against a float64 transcription of
the direct convolution, within an a-priori rounding bound; its C++ transforms against their
XLA programs; its hand-written gradient against the autodiff of its own program; and where
the CNNs take it."""

import contextlib
import hashlib
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from fedjax_bench import models
from fedjax_bench.core import kernels
from fedjax_bench.models import winograd

TILES = [(2, 3), (4, 3), (2, 5), (4, 5)]  # (m, r): every tile the C++ has
EPS32 = float(np.finfo(np.float32).eps) / 2  # the unit roundoff


def direct_conv64(x, w, pads):
  """The correlation sum_{i,j,c} x[n, h+i, w+j, c] w[i, j, c, o] in float64, by loops over
  the kernel taps."""
  x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
  r = w.shape[0]
  xp = np.pad(x, ((0, 0), pads[0], pads[1], (0, 0)))
  ho, wo = xp.shape[1] - r + 1, xp.shape[2] - r + 1
  out = np.zeros((x.shape[0], ho, wo, w.shape[-1]))
  for i in range(r):
    for j in range(r):
      out += np.einsum("nhwc,co->nhwo", xp[:, i:i + ho, j:j + wo], w[i, j])
  return out


def _rounding_bound(x, w, pads, m):
  """An a-priori bound on each output's float32 error: gamma_n |A^T| [sum_c (|B^T| |d_c|
  |B|) * (|G| |w_c| |G^T|)] |A| over the tiles (Higham's bound for each sum, to first
  order), n = 4a + 2r + C_in the longest chain of roundings: the input and output
  transforms (2a each, both sides), the filter transform (2r) and the channel sum."""
  r, c_in = w.shape[0], w.shape[2]
  at, g, bt = (np.abs(t) for t in winograd.transforms(m, r))
  a = m + r - 1
  x, w = np.abs(np.asarray(x, np.float64)), np.abs(np.asarray(w, np.float64))
  n, h, wd, _ = x.shape
  ho, wo = h + sum(pads[0]) - r + 1, wd + sum(pads[1]) - r + 1
  th, tw = -(-ho // m), -(-wo // m)
  xp = np.pad(x, ((0, 0), (pads[0][0], th * m + r - 1 - h - pads[0][0]),
                  (pads[1][0], tw * m + r - 1 - wd - pads[1][0]), (0, 0)))
  bound = np.zeros((n, th * m, tw * m, w.shape[-1]))
  u = np.einsum("ak,bl,klio->abio", g, g, w)
  for i in range(th):
    for j in range(tw):
      d = xp[:, i * m:i * m + a, j * m:j * m + a]
      v = np.einsum("pk,ql,nklc->npqc", bt, bt, d)
      mm = np.einsum("npqc,pqco->npqo", v, u)
      bound[:, i * m:(i + 1) * m, j * m:(j + 1) * m] = np.einsum("up,vq,npqo->nuvo", at, at, mm)
  steps = 4 * a + 2 * r + c_in
  return steps * EPS32 / (1 - steps * EPS32) * bound[:, :ho, :wo]


@pytest.mark.parametrize("m,r", TILES)
def test_the_transforms_compute_the_1d_correlation_exactly(m, r):
  """A^T ((G g) * (B^T d)) = the correlation y_i = sum_k d_{i+k} g_k, in float64."""
  at, g, bt = winograd.transforms(m, r)
  rng = np.random.default_rng(0)
  d, k = rng.normal(size=m + r - 1), rng.normal(size=r)
  want = np.array([sum(d[i + j] * k[j] for j in range(r)) for i in range(m)])
  np.testing.assert_allclose(at @ ((g @ k) * (bt @ d)), want, rtol=1e-12, atol=1e-12)


CASES = [  # (x shape, r, pads): SAME, VALID, uneven padding, sizes not a multiple of m
    ((3, 14, 14, 16), 5, ((2, 2), (2, 2))),
    ((2, 13, 11, 5), 5, ((2, 2), (2, 2))),
    ((2, 10, 9, 4), 3, ((0, 0), (0, 0))),
    ((2, 9, 12, 3), 3, ((1, 1), (1, 1))),
    ((1, 8, 7, 6), 3, ((2, 0), (1, 3))),
]


@pytest.mark.parametrize("m,r,shape,pads", [(m, r, shape, pads) for m, r in TILES
                                            for shape, size, pads in CASES if size == r])
def test_convolution_is_the_direct_one_within_the_rounding_bound(m, r, shape, pads):
  kx, kw = jax.random.split(jax.random.PRNGKey(0))
  x = jax.random.normal(kx, shape)
  w = jax.random.normal(kw, (r, r, shape[-1], 7)) / np.sqrt(r * r * shape[-1])
  got = np.asarray(jax.jit(winograd.conv, static_argnums=(2, 3))(x, w, pads, m), np.float64)
  want = direct_conv64(x, w, pads)
  assert got.shape == want.shape
  assert np.all(np.abs(got - want) <= _rounding_bound(x, w, pads, m))


@pytest.mark.parametrize("shape,r,pads", CASES)
def test_the_cxx_transforms_are_their_xla_programs(shape, r, pads):
  """Each of the four C++ maps against its XLA program (the adjoints: jax.linear_transpose
  of the XLA maps), to float rounding."""
  if kernels.target(winograd.SOURCE, "WinogradInput") is None:
    pytest.skip("no C++ compiler here")
  plan = winograd.Plan(shape, r, pads, 4)
  rng = np.random.default_rng(1)
  x = jnp.asarray(rng.normal(size=shape), jnp.float32)
  mm = jnp.asarray(rng.normal(size=(plan.a ** 2, plan.tiles, 5)), jnp.float32)
  v0, y0 = winograd._xla_input(plan, x), winograd._xla_output(plan, mm)
  dv = jnp.asarray(rng.normal(size=v0.shape), jnp.float32)
  dy = jnp.asarray(rng.normal(size=y0.shape), jnp.float32)
  (x0,) = jax.linear_transpose(lambda x: winograd._xla_input(plan, x), x)(dv)
  (m0,) = jax.linear_transpose(lambda t: winograd._xla_output(plan, t), mm)(dy)
  for got, want in ((winograd._input(plan, x), v0), (winograd._output(plan, mm), y0),
                    (winograd._input_t(plan, dv), x0), (winograd._output_t(plan, dy), m0)):
    scale = float(jnp.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * scale)


@pytest.mark.parametrize("m,r,shape,pads", [(4, 5, (2, 14, 14, 16), ((2, 2), (2, 2))),
                                            (4, 3, (2, 11, 10, 16), ((0, 0), (0, 0))),
                                            (2, 3, (2, 9, 12, 3), ((2, 0), (1, 3)))])
def test_gradients_are_the_autodiff_of_the_same_program(m, r, shape, pads):
  """The hand-written backward pass (dM = output^T(dy), dU = V^T dM, dV = dM U^T, dx =
  input^T(dV)) against JAX's gradient of the forward program written in XLA ops, and both
  against the float64 direct convolution's gradient."""
  kx, kw, kg = jax.random.split(jax.random.PRNGKey(2), 3)
  x = jax.random.normal(kx, shape)
  w = jax.random.normal(kw, (r, r, shape[-1], 8)) / np.sqrt(r * r * shape[-1])

  def xla_program(x, w):
    plan = winograd.Plan(x.shape, r, pads, m)
    v, u = winograd._xla_input(plan, x), winograd._filter(plan, w)
    return winograd._xla_output(plan, lax.dot_general(v, u, winograd._BATCHED))

  y, vjp = jax.vjp(lambda x, w: winograd.conv(x, w, pads, m), x, w)
  g = jax.random.normal(kg, y.shape)
  got = vjp(g)
  want = jax.vjp(xla_program, x, w)[1](g)
  direct = jax.vjp(lambda x, w: lax.conv_general_dilated(
      x, w, (1, 1), pads, dimension_numbers=("NHWC", "HWIO", "NHWC"),
      precision=lax.Precision.HIGHEST), x, w)[1](g)
  for a, b, d in zip(got, want, direct):
    scale = float(jnp.abs(d).max())
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * scale)
    np.testing.assert_allclose(a, d, rtol=0, atol=1e-4 * scale)


def test_vmapped_clients_each_convolve_their_own():
  kx, kw = jax.random.split(jax.random.PRNGKey(3))
  x = jax.random.normal(kx, (3, 2, 14, 14, 16))
  w = jax.random.normal(kw, (3, 5, 5, 16, 8)) * 0.05
  pads = ((2, 2), (2, 2))
  f = lambda x, w: jnp.sum(jnp.sin(winograd.conv(x, w, pads, 4)))
  got = jax.vmap(jax.value_and_grad(f, argnums=(0, 1)))(x, w)
  for i in range(3):
    want = jax.value_and_grad(f, argnums=(0, 1))(x[i], w[i])
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a[i], b, rtol=1e-5, atol=1e-5),
                 got, want)


def test_without_the_kernels_xla_runs_the_same_arithmetic(monkeypatch):
  """The same F(4x4, 5x5) program with its sums in another order: the two differ by up to
  that program's own rounding error, which the gradient test above bounds at 1e-4 of the
  scale."""
  x = jax.random.normal(jax.random.PRNGKey(4), (2, 14, 14, 16))
  w = jax.random.normal(jax.random.PRNGKey(5), (5, 5, 16, 8)) * 0.05
  pads = ((2, 2), (2, 2))
  f = lambda x, w: jnp.sum(jnp.sin(winograd.conv(x, w, pads, 4)))
  want = jax.value_and_grad(f, argnums=(0, 1))(x, w)
  monkeypatch.setattr(kernels, "_targets", {})
  monkeypatch.setenv(kernels.DISABLE_ENV, "off")
  got = jax.value_and_grad(f, argnums=(0, 1))(x, w)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(
      a, b, rtol=0, atol=1e-4 * float(jnp.abs(b).max())), got, want)


def _custom_calls(name: str, direct: bool = False) -> int:
  model = models.make(name, num_classes=10, is_image=True)
  shape = (2, 32, 32, 3) if name.startswith("fedawe") else (2, 28, 28, 1)
  x = jnp.zeros(shape)
  params = model.init(jax.random.PRNGKey(0), x)
  grad = jax.jit(jax.grad(lambda p: jnp.sum(model.apply(p, x) ** 2)))
  with winograd.direct() if direct else contextlib.nullcontext():
    return grad.lower(params).as_text().count("fedjax_bench_Winograd")


@pytest.mark.parametrize("name,convolutions", [("fedavg_cnn", 1), ("fedsoftmax_cnn", 1),
                                               ("fedawe_cnn_cifar10", 1), ("fedef_cnn", 1)])
def test_the_cnns_second_convolution_runs_by_winograd_on_cpu(name, convolutions):
  """The first convolutions (1 or 3 input channels) stay direct; the second (32 in) takes
  F(4x4): its forward pass calls the input and output transforms, its gradient their
  adjoints, once each. Inside `direct` none does."""
  if kernels.target(winograd.SOURCE, "WinogradInput") is None:
    pytest.skip("no C++ compiler here")
  assert jax.default_backend() == "cpu"
  assert _custom_calls(name) == 4 * convolutions
  assert _custom_calls(name, direct=True) == 0


def test_tile_policy():
  assert winograd.tile((32, 14, 14, 32), (5, 5, 32, 64)) == 4
  assert winograd.tile((32, 16, 16, 32), (3, 3, 32, 32)) == 4
  assert winograd.tile((32, 28, 28, 1), (5, 5, 1, 32)) is None  # too few channels
  assert winograd.tile((32, 14, 14, 32), (7, 7, 32, 64)) is None  # no tile for 7x7
  assert winograd.tile((32, 14, 14, 32), (3, 5, 32, 64)) is None  # not square
  assert winograd.tile((32, 14, 14, 32), (5, 5, 32, 64), jnp.bfloat16) is None
  with winograd.direct():
    assert winograd.tile((32, 14, 14, 32), (5, 5, 32, 64)) is None


def test_source_hash_is_the_kernels():
  """An edit of the C++ must change a binding the runs' code records hold."""
  source = Path(kernels.__file__).with_name(winograd.SOURCE).read_bytes()
  assert hashlib.sha256(source).hexdigest() == winograd.SOURCE_SHA256, (
      "winograd.cc changed: set winograd.SOURCE_SHA256 to its new SHA-256")


def test_a_transform_other_than_the_kernels_is_refused():
  """The C++ holds its matrices as constants; it checks that they are the ones `transforms`
  gives (so that the XLA ops, the tests' bound and the kernels compute one convolution)."""
  if kernels.target(winograd.SOURCE, "WinogradInput") is None:
    pytest.skip("no C++ compiler here")
  plan = winograd.Plan((1, 8, 8, 16), 5, ((2, 2), (2, 2)), 4)
  x = jnp.ones((1, 8, 8, 16))
  assert winograd._call("WinogradInput", (64, plan.tiles, 16), x, bt=plan.bt, pad_h=2,
                        pad_w=2, th=plan.th, tw=plan.tw, m=4) is not None
  with pytest.raises(Exception, match="not the kernel's"):
    jax.block_until_ready(winograd._call(
        "WinogradInput", (64, plan.tiles, 16), x, bt=plan.bt * 2, pad_h=2, pad_w=2,
        th=plan.th, tw=plan.tw, m=4))
