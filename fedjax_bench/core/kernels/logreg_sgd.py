"""Local SGD of softmax regression in one fused CPU kernel (`logreg_sgd.cc`).

A client's local steps on logistic regression are two skinny products each (B x D by
D x O and back, O = 10 classes): XLA:CPU runs each as a separate small dot inside its
while loop, and a step costs several times its arithmetic. The kernel runs all of a
client's steps in one call, weights and batch held in cache, in register tiles: the
same gradient of `Task.loss` (softmax cross entropy averaged with the example weights,
u8 pixels divided by 255) and the same SGD update, its sums in another order, so the
numbers agree with XLA's to float rounding (tests/core/test_logreg_sgd.py).

`train` takes a client's read-ahead minibatches; vmapped (a chunk of clients), the call
gets every client's arrays at once.
"""

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_bench.core import kernels

SOURCE = "logreg_sgd.cc"
# The C++'s SHA-256: a run's code record (claims/code.py) holds this module's bindings, not
# the C++, so an edit of the kernel stales the runs that called it through this line
# (tests/core/test_logreg_sgd.py fails until it is updated).
SOURCE_SHA256 = "dc2adc91ce57e860dee963977d2d3bbd42950b02472688e9445ef04984a4268e"
SYMBOLS = {np.dtype(np.uint8): "LogregSgdU8", np.dtype(np.float32): "LogregSgdF32"}


def target(x_dtype) -> str | None:
  """The kernel's FFI target for examples of ``x_dtype``, or None (not built here, or a
  dtype it does not take)."""
  symbol = SYMBOLS.get(np.dtype(x_dtype))
  return None if symbol is None else kernels.target(SOURCE, symbol)


def train(kernel, bias, x, y, w, steps, lr, *, name: str):
  """min(steps, S) SGD steps from (kernel [O, D], bias [O] or None) on the minibatches
  x [S, B, D], y [S, B], weights w [S, B] at step size lr: (kernel, bias, the sum of
  the steps' losses). ``name``: `target`'s."""
  use_bias = bias is not None
  if bias is None:
    bias = jnp.zeros(kernel.shape[:-1], kernel.dtype)
  lead = x.shape[:-3]
  out = (jax.ShapeDtypeStruct(kernel.shape, jnp.float32),
         jax.ShapeDtypeStruct(bias.shape, jnp.float32),
         jax.ShapeDtypeStruct(lead, jnp.float32))
  call = jax.ffi.ffi_call(name, out, vmap_method="broadcast_all")
  k, b, loss = call(kernel.astype(jnp.float32), bias.astype(jnp.float32), x,
                    y.astype(jnp.int32), w.astype(jnp.float32),
                    jnp.broadcast_to(jnp.asarray(steps, jnp.int32), lead),
                    jnp.broadcast_to(jnp.asarray(lr, jnp.float32), lead),
                    use_bias=np.int32(use_bias))
  return k, (b if use_bias else None), loss
