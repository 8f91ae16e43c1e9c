"""Convolutions with less arithmetic on XLA:CPU: are they faster than the direct one?

  python -m benchmarks.speed.conv_formulations [--clients=10] [--steps=10] [--repeats=3]

The second convolution of the CNN of W3 (McMahan et al.'s MNIST CNN: 5x5, 32 -> 64 channels
on 14x14, SAME, batch 32) is about 80% of a W3 local step's arithmetic. This times its
gradient step (forward, input and weight gradients, an SGD update) in a scan of local steps,
one client at a time as the engine runs convolutional clients on CPU (`client_map`), in
four formulations of the same convolution:

  direct     `models.conv.conv_nhwc`, XLA's convolution (25 products per output and
             input channel)
  winograd   Winograd's minimal filtering F(2x2, 5x5) (Lavin & Gray, "Fast Algorithms for
             Convolutional Neural Networks", CVPR 2016): 6x6 input tiles, 36 batched
             matmuls, 9 products per output; the transforms are XLA element-wise ops and
             small einsums, the gradients JAX's of that program
  winograd4  F(4x4, 5x5): 8x8 tiles, 64 matmuls, 4 products per output (14x14 computed as
             16x16), larger float32 error
  winograd4_cxx  `models.winograd.conv`, what the models run: F(4x4, 5x5) with the four
             tile transforms in C++ (`core/kernels/winograd.cc`), one pass each
  fft        the convolution theorem: real FFTs of the 18x18 padded maps, 180 frequency
             bins of complex [batch, 32] x [32, 64] products

The table gives each one's ms per client-step (the best of --repeats calls), the direct
formulation's time over it, and its largest absolute difference from XLA's convolution at
HIGHEST precision. Fewer multiplications pay only when the transforms cost less than the
arithmetic they save; as XLA ops each transform is several memory passes over a tensor
(a*a / tile^2) times the output's size (9x for F(2x2), 4x for F(4x4)), forward and back,
where the C++ transforms make one.
"""

import os

if __name__ == "__main__":  # one CPU device, as one client's steps run; not on import (tests)
  os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=1")

import argparse  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.speed import harness  # noqa: E402
from fedjax_bench.models import winograd as models_winograd  # noqa: E402
from fedjax_bench.models.conv import conv_nhwc  # noqa: E402


def parse(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--clients", type=int, default=10,
                 help="clients per timed call (one at a time, as on CPU)")
  p.add_argument("--steps", type=int, default=10, help="local steps per client")
  p.add_argument("--repeats", type=int, default=3,
                 help="timed calls per formulation; the best is reported")
  p.add_argument("--output_dir", default="results/speed")
  args = p.parse_args(argv)
  for name in ("clients", "steps", "repeats"):
    if getattr(args, name) < 1:
      p.error(f"--{name} must be at least 1")
  return args

BATCH, SIZE, C_IN, C_OUT, K = 32, 14, 32, 64, 5
def _combine(coefficients, term):
  """sum_u c_u term(u) over the nonzero c_u, as element-wise XLA ops."""
  out = None
  for u, c in enumerate(coefficients):
    if c != 0:
      t = term(u) if c == 1 else np.float32(c) * term(u)
      out = t if out is None else out + t
  return out


def winograd(x, w, tile: int = 2):
  """SAME 5x5 convolution of NHWC ``x`` by HWIO ``w`` with F(tile x tile, 5x5), every
  transform an XLA op."""
  at, g, bt = models_winograd.transforms(tile, K)
  a = tile + K - 1
  n, h, wd, c_in = x.shape
  th, tw = -(-h // tile), -(-wd // tile)
  xp = jnp.pad(x, ((0, 0), (2, th * tile - h + 2), (2, tw * tile - wd + 2), (0, 0)))
  rows = [_combine(bt[i], lambda u: xp[:, u:u + tile * th:tile]) for i in range(a)]
  v = jnp.stack([jnp.stack([_combine(bt[j], lambda u: rows[i][:, :, u:u + tile * tw:tile])
                            for j in range(a)]) for i in range(a)])
  v = v.reshape(a * a, n * th * tw, c_in)
  g32, at32 = g.astype(np.float32), at.astype(np.float32)
  u = jnp.einsum("ak,bl,klio->abio", g32, g32, w).reshape(a * a, c_in, -1)
  m = lax.dot_general(v, u, (((2,), (1,)), ((0,), (0,)))).reshape(a, a, n, th, tw, -1)
  y = jnp.einsum("ia,jb,abnpqo->ijnpqo", at32, at32, m)  # [tile, tile, N, th, tw, C_out]
  y = y.transpose(2, 3, 0, 4, 1, 5).reshape(n, th * tile, tw * tile, -1)
  return y[:, :h, :wd]


def fft(x, w):
  """SAME KxK convolution of NHWC ``x`` by HWIO ``w`` by real FFTs of the padded maps."""
  n, h, wd, _ = x.shape
  k = w.shape[0]
  size = (h + k - 1, wd + k - 1)
  xf = jnp.fft.rfft2(jnp.pad(x, ((0, 0), (0, k - 1), (0, k - 1), (0, 0))), axes=(1, 2))
  wf = jnp.fft.rfft2(jnp.pad(jnp.flip(w, (0, 1)), ((0, size[0] - k), (0, size[1] - k),
                                                   (0, 0), (0, 0))), axes=(0, 1))
  dims = (((3,), (2,)), ((1, 2), (0, 1)))  # contract channels, batch the frequency bins
  dot = lambda a, b: lax.dot_general(a, b, dims)
  xr, xi, wr, wi = jnp.real(xf), jnp.imag(xf), jnp.real(wf), jnp.imag(wf)
  yf = lax.complex(dot(xr, wr) - dot(xi, wi), dot(xr, wi) + dot(xi, wr))
  y = jnp.fft.irfft2(yf, s=size, axes=(0, 1))  # [H + K - 1, W + K - 1, N, C_out]
  lo = k - 1 - k // 2
  return jnp.transpose(y[lo:lo + h, lo:lo + wd], (2, 0, 1, 3))


def direct(x, w):
  return conv_nhwc(x, w, ((K // 2, K // 2), (K // 2, K // 2)))


def models_f4(x, w):
  return models_winograd.conv(x, w, ((K // 2, K // 2), (K // 2, K // 2)), 4)


FORMULATIONS = {"direct": direct, "winograd": winograd,
                "winograd4": lambda x, w: winograd(x, w, 4), "fft": fft,
                "winograd4_cxx": models_f4}


def local_steps(conv):
  """One client at a time (lax.map), each a scan of SGD steps on sum(tanh(conv(x, w))),
  with the input's gradient too (a CNN backpropagates through every convolution but its
  first; its mean enters the update so that XLA keeps it)."""
  def client(args):
    w, xs = args
    def step(w, x):
      gw, gx = jax.grad(lambda w, x: jnp.sum(jnp.tanh(conv(x, w))), argnums=(0, 1))(w, x)
      return w - 0.01 * gw - 1e-3 * jnp.mean(gx), None
    return lax.scan(step, w, xs)[0]
  return jax.jit(lambda ws, xs: lax.map(client, (ws, xs)))


def max_error(conv, x, w) -> float:
  """Largest absolute difference from XLA's convolution at HIGHEST precision."""
  ref = lax.conv_general_dilated(x, w, (1, 1), "SAME", precision=lax.Precision.HIGHEST,
                                 dimension_numbers=("NHWC", "HWIO", "NHWC"))
  return float(jnp.abs(jax.jit(conv)(x, w) - ref).max())


def main(argv=None):
  args = parse(argv)
  env = harness.environment()
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(BATCH, SIZE, SIZE, C_IN)), jnp.float32)
  w = jnp.asarray(rng.normal(size=(K, K, C_IN, C_OUT)) * 0.05, jnp.float32)
  scale = float(jnp.abs(direct(x, w)).max())
  c, s = args.clients, args.steps
  xs = jnp.asarray(rng.normal(size=(c, s, BATCH, SIZE, SIZE, C_IN)), jnp.float32)
  ws = jnp.broadcast_to(w, (c,) + w.shape)
  rows = []
  for name, conv in FORMULATIONS.items():
    f = local_steps(conv)
    best = harness.best_seconds(lambda: f(ws, xs), args.repeats)
    rows.append({"formulation": name, "ms_per_client_step": best / (c * s) * 1e3,
                 "max_abs_error": max_error(conv, x, w)})
    print(f"{name}: {rows[-1]['ms_per_client_step']:.1f} ms per client-step", flush=True)
  harness.finish(env)
  base = rows[0]["ms_per_client_step"]
  lines = ["# One convolution's gradient step in five formulations", "",
           f"5x5 convolution {C_IN} -> {C_OUT} channels on {SIZE}x{SIZE}, SAME, batch {BATCH} "
           f"(W3's second convolution): forward, both gradients and an SGD update, {s} steps "
           f"of {c} clients one at a time (`python -m benchmarks.speed.conv_formulations`); "
           f"the best of {args.repeats} calls. Error: the largest absolute difference from "
           f"XLA's convolution at HIGHEST precision, outputs of magnitude up to {scale:.1f}.",
           "", "| formulation | ms per client-step | direct / it | max abs error |",
           "|---|---:|---:|---:|"]
  for r in rows:
    lines.append(f"| {r['formulation']} | {r['ms_per_client_step']:.1f} "
                 f"| {base / r['ms_per_client_step']:.2f}x | {r['max_abs_error']:.1e} |")
  lines += ["", harness.machine(env)]
  paths = harness.write(args.output_dir, "conv_formulations",
                        {"config": {"clients": c, "steps": s, "repeats": args.repeats},
                         "environment": env, "results": rows}, "\n".join(lines))
  print("\n".join(lines[4:]))
  print(f"wrote {' and '.join(paths)}")


if __name__ == "__main__":
  main()
