"""The CNN of McMahan et al. (2017) for 28x28 images: two 5x5 conv + pool blocks, FC 512."""


from flax import linen as nn

from fedjax_bench.models.conv import Conv
from fedjax_bench.models.preprocess import Normalize, standardize


class CNN(nn.Module):
  num_classes: int
  normalize: Normalize | None = None

  @nn.compact
  def __call__(self, x, train: bool = False):
    del train  # no dropout
    x = standardize(x, self.normalize)
    for features in (32, 64):
      x = nn.relu(Conv(features, (5, 5), padding="SAME")(x))
      x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = x.reshape(x.shape[0], -1)
    x = nn.relu(nn.Dense(512)(x))
    return nn.Dense(self.num_classes)(x)
