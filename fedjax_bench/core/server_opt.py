"""Server optimizers: optax transformations applied to the pseudo-gradient -mean(delta)."""

import optax

from fedjax_bench.errors import UsageError

SERVER_OPTS = ("sgd", "momentum", "adam", "yogi", "amsgrad")


def make(name: str, lr, *, momentum: float = 0.9, b1: float = 0.9, b2: float = 0.99,
         eps: float = 1e-3) -> optax.GradientTransformation:
  """``sgd`` with lr 1 is plain FedAvg; ``momentum`` is FedAvgM; ``adam``/``yogi`` are FedOpt.

  ``eps`` defaults to FedOpt's tau = 1e-3 (Reddi et al., 2021), not optax's 1e-8.
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
    return optax.amsgrad(lr, b1=b1, b2=b2, eps=eps)
  raise UsageError(f"unknown --server_opt={name!r}; valid: {', '.join(SERVER_OPTS)}")
