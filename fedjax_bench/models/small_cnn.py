"""The small CNNs of FedAWE for 32x32x3 images (the FedAWE paper's Table 6 and the authors' code).

conv3x3(32)-ReLU-maxpool2 twice, flatten in PyTorch's C,H,W order, then fully connected
layers (``hidden``, ReLU) and the output layer, with Dropout before every fully connected
layer when ``dropout`` > 0 (CINIC-10). Init as the authors' PyTorch code: Kaiming normal
(fan_in, ReLU gain) weights and zero biases for the convs and hidden layers; PyTorch's
nn.Linear default for the output layer. Dense kernels are stored [out, in] as in PyTorch.
"""


import jax.numpy as jnp
from flax import linen as nn

from fedjax_bench.models.dense import DenseOI
from fedjax_bench.models.conv import Conv
from fedjax_bench.models.preprocess import Normalize, standardize

_KAIMING_NORMAL = nn.initializers.variance_scaling(2.0, "fan_in", "normal")

# name: (hidden widths, dropout rate); parameter counts on 32x32x3 in the comments.
CONFIGS = {
    "cnn_svhn": ((128,), 0.0),          # 273,706
    "cnn_cifar10": ((256, 64), 0.0),    # 551,786
    "cnn_cinic10": ((512, 256), 0.2),   # 1,193,130
}


class SmallCNN(nn.Module):
  hidden: tuple[int, ...]
  num_classes: int
  dropout: float = 0.0
  normalize: Normalize | None = None

  @nn.compact
  def __call__(self, x, train: bool = False):
    """``train=True`` enables dropout and then needs a "dropout" rng."""
    x = standardize(x, self.normalize)
    for _ in range(2):
      x = Conv(32, (3, 3), padding="SAME", kernel_init=_KAIMING_NORMAL)(x)
      x = nn.max_pool(nn.relu(x), (2, 2), strides=(2, 2))
    # PyTorch flattens NCHW: this order makes the first dense kernel match PyTorch's weight.
    x = jnp.transpose(x, (0, 3, 1, 2)).reshape(x.shape[0], -1)
    for width in self.hidden:
      x = self._drop(x, train)
      x = nn.relu(DenseOI(width, init="kaiming_normal")(x))
    x = self._drop(x, train)
    return DenseOI(self.num_classes, init="torch_default")(x)

  def _drop(self, x, train: bool):
    if self.dropout <= 0:
      return x
    return nn.Dropout(self.dropout, deterministic=not train)(x)


def make(name: str, num_classes: int, normalize: Normalize | None = None) -> SmallCNN:
  hidden, dropout = CONFIGS[name]
  return SmallCNN(hidden, num_classes, dropout, normalize)
