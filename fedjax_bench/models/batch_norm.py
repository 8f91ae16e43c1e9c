"""Models with batch normalization, for FedBN (Li, Jiang, Zhang, Kamp & Dou, ICLR 2021):
the MLP with a BatchNorm after each hidden layer (``mlp_bn``) and the FedBN paper's CNN for
its digits benchmark (``fedbn_cnn``, the paper's Appendix, Table 9).

A model with batch norm has state beside its parameters: the running means and variances
of each BatchNorm layer (flax's ``batch_stats`` collection). Its `Task` parameters are then
the whole variables ``{"params": ..., "batch_stats": ...}`` (`task.has_state`): in training
mode a BatchNorm normalizes with the minibatch's own statistics and its running statistics
move toward them (momentum 0.9 in flax's convention, PyTorch's momentum=0.1; flax keeps the
biased batch variance where PyTorch keeps the unbiased one); evaluation normalizes with the
running statistics (a variance that a server step took below 0 read as 0: `readable`).
Local training updates them after each step (`Task.update_state`).

``mask`` ([batch] bool, training mode only) marks the minibatch's real rows: a partial last
batch of an epoch is padded with rows of weight 0, which must not enter the batch
statistics. A batch without a real row (a client without examples) normalizes over all its
rows, whose weights are 0, and `Task.update_state` keeps the running statistics.

Each hidden layer and its BatchNorm are one module (`DenseBN`, `ConvBN`), so the model's
layers (`models.layers`) are its blocks and the output layer: ``--head_layers=1`` is the
output layer, 2 adds the last hidden block with its BatchNorm.
"""

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import linen as nn

from fedjax_bench.models.cnn import conv_initializers
from fedjax_bench.models.conv import Conv, max_pool
from fedjax_bench.models.dense import DenseOI
from fedjax_bench.models.preprocess import Normalize, standardize

# PyTorch's BatchNorm defaults in flax's terms: running = 0.9 running + 0.1 batch.
MOMENTUM, EPSILON = 0.9, 1e-5


def readable(stats):
  """Running statistics (a ``batch_stats`` collection) as evaluation reads them: a variance
  below 0 as 0. Averages of variances are variances, but a server step that extrapolates
  (momentum, a server learning rate above 1, FedBuff's stale updates) can take one below
  0, which would make the normalization NaN."""
  return jax.tree_util.tree_map_with_path(
      lambda path, a: jnp.maximum(a, 0) if path[-1].key == "var" else a, stats)


def _norm(x, train: bool, mask):
  """BatchNorm over every axis but the last; ``mask`` [batch] marks the rows it counts."""
  if mask is not None:
    mask = mask | ~jnp.any(mask)  # no real row: all rows (their weights are 0)
    mask = mask.reshape(mask.shape + (1,) * (x.ndim - 1))
  return nn.BatchNorm(use_running_average=not train, momentum=MOMENTUM,
                      epsilon=EPSILON)(x, mask=mask)


class DenseBN(nn.Module):
  """Dense -> BatchNorm -> ReLU."""
  features: int
  init: str = "lecun_normal"

  @nn.compact
  def __call__(self, x, train: bool = False, mask=None):
    return nn.relu(_norm(DenseOI(self.features, init=self.init)(x), train, mask))


class ConvBN(nn.Module):
  """Convolution (stride 1, SAME) -> BatchNorm -> ReLU."""
  features: int
  kernel: int
  init: str = "lecun_normal"

  @nn.compact
  def __call__(self, x, train: bool = False, mask=None):
    kernel_init, bias_init = conv_initializers(self.init, self.kernel * self.kernel * x.shape[-1])
    x = Conv(self.features, (self.kernel, self.kernel), padding="SAME",
             kernel_init=kernel_init, bias_init=bias_init)(x)
    return nn.relu(_norm(x, train, mask))


class MLPBN(nn.Module):
  """The MLP (`dense.MLP`) with a BatchNorm after each hidden layer, before its ReLU."""
  hidden: Sequence[int]
  num_classes: int
  normalize: Normalize | None = None

  @nn.compact
  def __call__(self, x, train: bool = False, mask=None):
    x = standardize(x, self.normalize).reshape(x.shape[0], -1)
    for width in self.hidden:
      x = DenseBN(width)(x, train, mask)
    return DenseOI(self.num_classes)(x)


class FedBNCNN(nn.Module):
  """The FedBN paper's digits CNN (Li et al. 2021, Appendix, Table 9; the authors' code's
  ``DigitModel``): three 5x5 convolutions (64, 64, 128; padding 2) each followed by
  BatchNorm and ReLU, 2x2 max pooling after the first two; dense layers of 2048 and 512,
  each with BatchNorm and ReLU; the output layer. PyTorch's default initialization, as the
  authors' code. 14,219,210 parameters on 28x28x3 (the paper's digits), 14,216,010 on
  28x28x1."""
  num_classes: int
  normalize: Normalize | None = None

  @nn.compact
  def __call__(self, x, train: bool = False, mask=None):
    x = standardize(x, self.normalize)
    for i, features in enumerate((64, 64, 128)):
      x = ConvBN(features, 5, init="torch_default")(x, train, mask)
      if i < 2:
        x = max_pool(x)
    x = x.reshape(x.shape[0], -1)
    for width in (2048, 512):
      x = DenseBN(width, init="torch_default")(x, train, mask)
    return DenseOI(self.num_classes, init="torch_default")(x)
