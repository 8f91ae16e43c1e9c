"""The CNN of the FedSoftMax paper (its Section 3.1, Table 2; the exact shapes are our
reading, docs/papers/hetero_agg.md), for 28x28x1 images.

conv3x3(32, VALID)-ReLU-maxpool2-conv3x3(64, VALID)-ReLU-maxpool2-flatten (1600, PyTorch's
C,H,W order), then Dense(10) ("flat", 34,826 parameters: the 1600 of the paper's prose is
the flatten), or Dense(1600)-ReLU-Dense(10) ("literal", 2,596,426). The paper used
PyTorch with its default init, U(+-1/sqrt(fan_in)) for every weight and bias.
"""

import jax.numpy as jnp
from flax import linen as nn

from fedjax_bench.models.dense import DenseOI
from fedjax_bench.models.mnist_cnn import _torch_uniform
from fedjax_bench.models.conv import Conv
from fedjax_bench.models.preprocess import Normalize, standardize


class PaperCNN(nn.Module):
  num_classes: int
  hidden_fc: int = 0  # 0: "flat"; 1600: "literal"
  normalize: Normalize | None = None

  @nn.compact
  def __call__(self, x, train: bool = False):
    del train  # no dropout
    x = standardize(x, self.normalize)
    for features in (32, 64):
      init = _torch_uniform(9 * x.shape[-1])
      x = nn.relu(Conv(features, (3, 3), padding="VALID", kernel_init=init,
                          bias_init=init)(x))
      x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = jnp.transpose(x, (0, 3, 1, 2)).reshape(x.shape[0], -1)
    if self.hidden_fc:
      x = nn.relu(DenseOI(self.hidden_fc, init="torch_default")(x))
    return DenseOI(self.num_classes, init="torch_default")(x)
