"""Server optimizers: optax transformations applied to the pseudo-gradient -mean(delta)."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from fedjax_bench.errors import UsageError

SERVER_OPTS = ("sgd", "momentum", "adam", "yogi", "amsgrad")
# The keyword arguments of `make` that each optimizer reads.
SETTINGS = {"sgd": (), "momentum": ("momentum",), "adam": ("b1", "b2", "eps"),
            "yogi": ("b1", "b2", "eps"), "amsgrad": ("b1", "b2", "eps")}


class AMSGradState(NamedTuple):
  m: Any
  v: Any
  v_hat: Any


def amsgrad(lr, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8
            ) -> optax.GradientTransformation:
  """AMSGrad as Reddi et al. (2018) and the Fed-EF paper write it (spec 001 §2.3):

    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  v_hat = max(v_hat, v)
    update = -lr * m / sqrt(v_hat + eps)

  No bias correction and eps inside the square root; optax.amsgrad differs in both.
  """
  def init(params):
    zeros = lambda: jax.tree.map(jnp.zeros_like, params)
    return AMSGradState(zeros(), zeros(), zeros())

  def update(g, state, params=None):
    del params
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.m, g)
    v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * jnp.square(g), state.v, g)
    v_hat = jax.tree.map(jnp.maximum, state.v_hat, v)
    updates = jax.tree.map(lambda m, vh: -lr * m / jnp.sqrt(vh + eps), m, v_hat)
    return updates, AMSGradState(m, v, v_hat)

  return optax.GradientTransformation(init, update)


def make(name: str, lr, *, momentum: float = 0.9, b1: float = 0.9, b2: float = 0.99,
         eps: float = 1e-3) -> optax.GradientTransformation:
  """``sgd`` with lr 1 is plain FedAvg; ``momentum`` is FedAvgM; ``adam``/``yogi`` are FedOpt;
  ``amsgrad`` is the Fed-EF paper's form (`amsgrad`).

  ``eps`` defaults to FedOpt's tau = 1e-3 (Reddi et al., 2021), not optax's 1e-8; the
  Fed-EF flagfiles set the paper's b2 = 0.999 and eps = 1e-8 (inside the square root).
  """
  if name == "sgd":
    return optax.sgd(lr)
  if name == "momentum":
    return optax.sgd(lr, momentum=momentum)
  if name == "adam":
    return optax.adam(lr, b1=b1, b2=b2, eps=eps)
  if name == "yogi":
    return optax.yogi(lr, b1=b1, b2=b2, eps=eps)
  if name == "amsgrad":
    return amsgrad(lr, b1=b1, b2=b2, eps=eps)
  raise UsageError(f"unknown --server_opt={name!r}; valid: {', '.join(SERVER_OPTS)}")
