"""Multinomial logistic regression, the linear model and the fully connected MLP."""

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import linen as nn

from fedjax_bench.models.preprocess import Normalize, standardize

DENSE_INITS = ("lecun_normal", "kaiming_normal", "torch_default", "zeros")


def _symmetric_uniform(bound: float):
  def init(key, shape, dtype=jnp.float32):
    return jax.random.uniform(key, shape, dtype, -bound, bound)
  return init


def dense_init(name: str, fan_in: int):
  """(kernel_init, bias_init) for a kernel stored [out, in].

  * lecun_normal: flax's nn.Dense default (truncated normal, variance 1/fan_in), zero bias.
  * kaiming_normal: PyTorch's kaiming_normal_(mode="fan_in", relu): N(0, 2/fan_in), zero bias.
  * torch_default: PyTorch's nn.Linear default: weight and bias U(+-1/sqrt(fan_in)).
  * zeros: both zero.
  """
  zeros = nn.initializers.zeros
  if name == "lecun_normal":
    return nn.initializers.lecun_normal(in_axis=-1, out_axis=-2), zeros
  if name == "kaiming_normal":
    return nn.initializers.variance_scaling(2.0, "fan_in", "normal", in_axis=-1,
                                            out_axis=-2), zeros
  if name == "torch_default":
    bound = 1.0 / math.sqrt(fan_in)
    return _symmetric_uniform(bound), _symmetric_uniform(bound)
  if name == "zeros":
    return zeros, zeros
  raise ValueError(f"unknown dense init {name!r}; choose one of {', '.join(DENSE_INITS)}")


class DenseOI(nn.Module):
  """nn.Dense with its kernel stored [out, in] instead of [in, out] (PyTorch's layout).

  With the default init, the same function and initialization as nn.Dense; the layout
  makes the weight gradient of a small batch, sum_b g[b,o] x[b,i], a dot XLA:CPU runs
  1.6x faster in local training (docs/performance.md, "Kernels stored [out, in]").
  """
  features: int
  init: str = "lecun_normal"  # one of DENSE_INITS
  use_bias: bool = True

  @nn.compact
  def __call__(self, x):
    kernel_init, bias_init = dense_init(self.init, x.shape[-1])
    kernel = self.param("kernel", kernel_init, (self.features, x.shape[-1]))
    y = jnp.einsum("...i,oi->...o", x, kernel)
    if not self.use_bias:
      return y
    return y + self.param("bias", bias_init, (self.features,))


class LogReg(nn.Module):
  """Softmax regression; ``zero_init`` starts from all-zero weights (our FedAWE CPU
  experiment, docs/papers/fedawe.md).

  ``bias=False`` drops the bias: the AREA paper's model (its Section 5.1, eq. (8)), d*C weights.
  """
  num_classes: int
  zero_init: bool = False
  normalize: Normalize | None = None
  bias: bool = True

  @nn.compact
  def __call__(self, x, train: bool = False):
    del train  # no dropout
    x = standardize(x, self.normalize)
    init = "zeros" if self.zero_init else "lecun_normal"
    return DenseOI(self.num_classes, init=init, use_bias=self.bias)(x.reshape(x.shape[0], -1))


class Linear(nn.Module):
  """A linear map of the flattened input to ``features`` outputs, all-zero initial weights
  (x0 = 0, as in the AREA quadratic toys); no bias by default. With
  ``loss_type="squared_error"`` and ``features=1`` it is least squares."""
  features: int = 1
  bias: bool = False

  @nn.compact
  def __call__(self, x, train: bool = False):
    del train  # no dropout
    return DenseOI(self.features, init="zeros", use_bias=self.bias)(x.reshape(x.shape[0], -1))


class MLP(nn.Module):
  """ReLU hidden layers, e.g. (200, 200) gives the 784-200-200-10 MLP on MNIST."""
  hidden: Sequence[int]
  num_classes: int
  normalize: Normalize | None = None

  @nn.compact
  def __call__(self, x, train: bool = False):
    del train  # no dropout
    x = standardize(x, self.normalize).reshape(x.shape[0], -1)
    for width in self.hidden:
      x = nn.relu(DenseOI(width)(x))
    return DenseOI(self.num_classes)(x)
