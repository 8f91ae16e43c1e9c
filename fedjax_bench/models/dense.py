"""Multinomial logistic regression and the fully connected MLP."""

from typing import Sequence

from flax import linen as nn


class LogReg(nn.Module):
  num_classes: int

  @nn.compact
  def __call__(self, x):
    return nn.Dense(self.num_classes)(x.reshape(x.shape[0], -1))


class MLP(nn.Module):
  """ReLU hidden layers, e.g. (200, 200) gives the 784-200-200-10 MLP on MNIST."""
  hidden: Sequence[int]
  num_classes: int

  @nn.compact
  def __call__(self, x):
    x = x.reshape(x.shape[0], -1)
    for width in self.hidden:
      x = nn.relu(nn.Dense(width)(x))
    return nn.Dense(self.num_classes)(x)


