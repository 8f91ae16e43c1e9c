"""The Fed-EF paper's MNIST/FMNIST CNN (its Section 5.1; sizes of the PyTorch MNIST example).

conv3x3(32, VALID)-ReLU-conv3x3(64, VALID)-ReLU-maxpool2-Dropout(0.25)-flatten (PyTorch's
C,H,W order)-FC(128)-ReLU-FC(10): 1,199,882 parameters on 28x28x1. PyTorch's default init
(weights and biases U(+-1/sqrt(fan_in))), our resolution of the init the paper does not state
(docs/papers/fedef.md).
"""

import jax
import jax.numpy as jnp
from flax import linen as nn

from fedjax_bench.models.dense import DenseOI
from fedjax_bench.models.conv import Conv
from fedjax_bench.models.preprocess import Normalize, standardize


def _torch_uniform(fan_in: int):
  bound = 1.0 / jnp.sqrt(float(fan_in))
  return lambda key, shape, dtype=jnp.float32: jax.random.uniform(key, shape, dtype, -bound,
                                                                   bound)


class MnistCNN(nn.Module):
  num_classes: int
  dropout: float = 0.25
  normalize: Normalize | None = None

  @nn.compact
  def __call__(self, x, train: bool = False):
    """``train=True`` enables dropout and then needs a "dropout" rng."""
    x = standardize(x, self.normalize)
    for features in (32, 64):
      init = _torch_uniform(9 * x.shape[-1])
      x = nn.relu(Conv(features, (3, 3), padding="VALID", kernel_init=init,
                          bias_init=init)(x))
    x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = nn.Dropout(self.dropout, deterministic=not train)(x)
    x = jnp.transpose(x, (0, 3, 1, 2)).reshape(x.shape[0], -1)
    x = nn.relu(DenseOI(128, init="torch_default")(x))
    return DenseOI(self.num_classes, init="torch_default")(x)
