"""Multinomial logistic regression and the fully connected MLP."""

from typing import Sequence

import jax.numpy as jnp
from flax import linen as nn


class DenseOI(nn.Module):
  """nn.Dense with its kernel stored [out, in] instead of [in, out].

  The same function and initialization (LeCun normal over fan-in, zero bias); the
  layout makes the weight gradient of a small batch, sum_b g[b,o] x[b,i], a dot
  XLA:CPU runs 1.6x faster in local training (BUILD_NOTES.md, "Speed").
  """
  features: int

  @nn.compact
  def __call__(self, x):
    init = nn.initializers.lecun_normal(in_axis=-1, out_axis=-2)
    kernel = self.param("kernel", init, (self.features, x.shape[-1]))
    bias = self.param("bias", nn.initializers.zeros, (self.features,))
    return jnp.einsum("...i,oi->...o", x, kernel) + bias


class LogReg(nn.Module):
  num_classes: int

  @nn.compact
  def __call__(self, x):
    return DenseOI(self.num_classes)(x.reshape(x.shape[0], -1))


class MLP(nn.Module):
  """ReLU hidden layers, e.g. (200, 200) gives the 784-200-200-10 MLP on MNIST."""
  hidden: Sequence[int]
  num_classes: int

  @nn.compact
  def __call__(self, x):
    x = x.reshape(x.shape[0], -1)
    for width in self.hidden:
      x = nn.relu(DenseOI(width)(x))
    return DenseOI(self.num_classes)(x)
