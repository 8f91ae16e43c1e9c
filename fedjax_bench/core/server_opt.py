"""Server optimizers: optax transformations applied to the pseudo-gradient -mean(delta).

``adam``, ``yogi`` and ``adagrad`` are FedAdam, FedYogi and FedAdagrad as Reddi et al.
(2021, "Adaptive Federated Optimization", Algorithm 2) write them: no bias correction,
tau outside the square root, v_{-1} = tau^2. A researcher citing "FedAdam" expects that
recursion, so the plain names are the paper's; optax's bias-corrected Adam and Yogi stay
available as ``optax_adam`` and ``optax_yogi``.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from fedjax_bench.errors import UsageError
from fedjax_bench.settings import DECAY, POSITIVE, section, setting

SERVER_OPTS = ("sgd", "momentum", "adam", "yogi", "adagrad", "amsgrad", "optax_adam",
               "optax_yogi")
# The keyword arguments of `make` that each optimizer reads.
SETTINGS = {"sgd": (), "momentum": ("momentum",), "adam": ("b1", "b2", "eps"),
            "yogi": ("b1", "b2", "eps"), "adagrad": ("b1", "eps"),
            "amsgrad": ("b1", "b2", "eps"), "optax_adam": ("b1", "b2", "eps"),
            "optax_yogi": ("b1", "b2", "eps")}
FEDOPT_RULES = ("adam", "yogi", "adagrad")


class FedOptState(NamedTuple):
  m: Any
  v: Any


def fedopt(rule: str, lr, b1: float = 0.9, b2: float = 0.99, eps: float = 1e-3
           ) -> optax.GradientTransformation:
  """FedAdagrad / FedYogi / FedAdam, Reddi et al. (2021) Algorithm 2, with eps = tau.

  With Delta_t the averaged client delta (this transform receives g = -Delta_t):
    m_t = b1 m_{t-1} + (1 - b1) Delta_t                             (m_{-1} = 0)
    adagrad: v_t = v_{t-1} + Delta_t^2
    yogi:    v_t = v_{t-1} - (1 - b2) Delta_t^2 sign(v_{t-1} - Delta_t^2)
    adam:    v_t = b2 v_{t-1} + (1 - b2) Delta_t^2                  (v_{-1} = tau^2)
    x_{t+1} = x_t + lr m_t / (sqrt(v_t) + tau)
  The paper asks v_{-1} >= tau^2; we take equality. Its line for m applies to all three
  rules, so FedAdagrad reads b1 too (b1 = 0 is Adagrad without momentum).
  """
  if rule not in FEDOPT_RULES:
    raise UsageError(f"unknown FedOpt rule {rule!r}; valid: {', '.join(FEDOPT_RULES)}")

  def init(params):
    return FedOptState(jax.tree.map(jnp.zeros_like, params),
                       jax.tree.map(lambda p: jnp.full_like(p, eps * eps), params))

  def second_moment(v, g):
    g2 = jnp.square(g)  # Delta_t^2
    if rule == "adagrad":
      return v + g2
    if rule == "yogi":
      return v - (1 - b2) * g2 * jnp.sign(v - g2)
    return b2 * v + (1 - b2) * g2

  def update(g, state, params=None):
    del params
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.m, g)  # the m of -Delta
    v = jax.tree.map(second_moment, state.v, g)
    updates = jax.tree.map(lambda m, v: -lr * m / (jnp.sqrt(v) + eps), m, v)
    return updates, FedOptState(m, v)

  return optax.GradientTransformation(init, update)


class AMSGradState(NamedTuple):
  m: Any
  v: Any
  v_hat: Any


def amsgrad(lr, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8
            ) -> optax.GradientTransformation:
  """AMSGrad as Reddi et al. (2018) and the Fed-EF paper write it (Section 3.2, Algorithm 2):

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
  """``sgd`` with lr 1 is plain FedAvg; ``momentum`` is FedAvgM; ``adam``/``yogi``/``adagrad``
  are the paper's FedAdam/FedYogi/FedAdagrad (`fedopt`); ``optax_adam``/``optax_yogi`` are
  optax's bias-corrected forms; ``amsgrad`` is the Fed-EF paper's form (`amsgrad`).

  ``eps`` defaults to FedOpt's tau = 1e-3 (Reddi et al., 2021), not optax's 1e-8; the
  Fed-EF flagfiles set the paper's b2 = 0.999 and eps = 1e-8 (inside the square root).
  """
  if name == "sgd":
    return optax.sgd(lr)
  if name == "momentum":
    return optax.sgd(lr, momentum=momentum)
  if name in FEDOPT_RULES:
    return fedopt(name, lr, b1=b1, b2=b2, eps=eps)
  if name == "optax_adam":
    return optax.adam(lr, b1=b1, b2=b2, eps=eps)
  if name == "optax_yogi":
    return optax.yogi(lr, b1=b1, b2=b2, eps=eps)
  if name == "amsgrad":
    return amsgrad(lr, b1=b1, b2=b2, eps=eps)
  raise UsageError(f"unknown --server_opt={name!r}; valid: {', '.join(SERVER_OPTS)}")


def _reads(kwarg: str):
  return lambda hp: kwarg in SETTINGS.get(hp.optimizer_name(), ())


@section("server optimizer")
class ServerLr:
  server_lr: float = setting(1.0, "Server learning rate.", check=POSITIVE, sweep=True)


@section("server optimizer")
class ServerOptimizer(ServerLr):
  server_opt: str = setting("sgd", "Server optimizer on the pseudo-gradient: momentum = FedAvgM; "
                            "adam/yogi/adagrad = FedAdam/FedYogi/FedAdagrad as Reddi et al. 2021 "
                            "Algorithm 2 writes them (no bias correction, tau = --server_eps "
                            "outside the square root, v starts at tau^2); optax_adam/optax_yogi "
                            "= optax's bias-corrected Adam/Yogi; amsgrad = the Fed-EF paper's.",
                            choices=SERVER_OPTS)
  # A beta of 1 freezes its average (optax's bias correction divides by 1 - beta^t); an
  # eps of 0 divides 0 by 0 where a coordinate's gradients are all 0.
  server_momentum: float = setting(0.9, "Momentum for --server_opt=momentum.", sweep=True,
                                   check=DECAY, used_if=_reads("momentum"))
  server_beta1: float = setting(0.9, "beta1 for the adaptive server optimizers.", sweep=True,
                                check=DECAY, used_if=_reads("b1"))
  server_beta2: float = setting(0.99, "beta2 for adam/yogi/amsgrad/optax_*.", sweep=True,
                                check=DECAY, used_if=_reads("b2"))
  server_eps: float = setting(1e-3, "epsilon (tau) for the adaptive server optimizers.",
                              sweep=True, check=POSITIVE, used_if=_reads("eps"))

  def optimizer_name(self) -> str:
    """The optimizer the algorithm runs (an algorithm with its own overrides this)."""
    return self.server_opt

  def optimizer(self) -> optax.GradientTransformation:
    name = self.optimizer_name()
    given = {"momentum": self.server_momentum, "b1": self.server_beta1,
             "b2": self.server_beta2, "eps": self.server_eps}
    return make(name, self.server_lr, **{k: given[k] for k in SETTINGS.get(name, ())})
