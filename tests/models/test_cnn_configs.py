"""The papers' CNNs, one configurable module in `fedjax_bench.models.cnn`, build the same
parameter trees and compute the same numbers, bit for bit, as the four modules they replaced
(frozen below as they were): initialization, evaluation, training with dropout and the
gradient, on the same keys and inputs, under their names and their old --model names."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from fedjax_bench import models
from fedjax_bench.models.conv import Conv
from fedjax_bench.models.dense import DenseOI
from fedjax_bench.models.preprocess import Normalize, standardize

# --- the replaced modules, frozen ------------------------------------------------------


def _torch_uniform(fan_in: int):
  bound = 1.0 / jnp.sqrt(float(fan_in))
  return lambda key, shape, dtype=jnp.float32: jax.random.uniform(key, shape, dtype, -bound,
                                                                   bound)


class FrozenMcMahanCNN(nn.Module):
  num_classes: int
  normalize: Normalize | None = None

  @nn.compact
  def __call__(self, x, train: bool = False):
    x = standardize(x, self.normalize)
    for features in (32, 64):
      x = nn.relu(Conv(features, (5, 5), padding="SAME")(x))
      x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = x.reshape(x.shape[0], -1)
    x = nn.relu(nn.Dense(512)(x))
    return nn.Dense(self.num_classes)(x)


class FrozenFedAWECNN(nn.Module):
  hidden: tuple[int, ...]
  num_classes: int
  dropout: float = 0.0
  normalize: Normalize | None = None

  @nn.compact
  def __call__(self, x, train: bool = False):
    x = standardize(x, self.normalize)
    for _ in range(2):
      x = Conv(32, (3, 3), padding="SAME",
               kernel_init=nn.initializers.variance_scaling(2.0, "fan_in", "normal"))(x)
      x = nn.max_pool(nn.relu(x), (2, 2), strides=(2, 2))
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


class FrozenFedEFCNN(nn.Module):
  num_classes: int
  dropout: float = 0.25
  normalize: Normalize | None = None

  @nn.compact
  def __call__(self, x, train: bool = False):
    x = standardize(x, self.normalize)
    for features in (32, 64):
      init = _torch_uniform(9 * x.shape[-1])
      x = nn.relu(Conv(features, (3, 3), padding="VALID", kernel_init=init, bias_init=init)(x))
    x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = nn.Dropout(self.dropout, deterministic=not train)(x)
    x = jnp.transpose(x, (0, 3, 1, 2)).reshape(x.shape[0], -1)
    x = nn.relu(DenseOI(128, init="torch_default")(x))
    return DenseOI(self.num_classes, init="torch_default")(x)


class FrozenFedSoftMaxCNN(nn.Module):
  num_classes: int
  hidden_fc: int = 0
  normalize: Normalize | None = None

  @nn.compact
  def __call__(self, x, train: bool = False):
    x = standardize(x, self.normalize)
    for features in (32, 64):
      init = _torch_uniform(9 * x.shape[-1])
      x = nn.relu(Conv(features, (3, 3), padding="VALID", kernel_init=init, bias_init=init)(x))
      x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = jnp.transpose(x, (0, 3, 1, 2)).reshape(x.shape[0], -1)
    if self.hidden_fc:
      x = nn.relu(DenseOI(self.hidden_fc, init="torch_default")(x))
    return DenseOI(self.num_classes, init="torch_default")(x)


MNIST, COLOR = (28, 28, 1), (32, 32, 3)
# --model name: (its old name, the frozen module for (num_classes, normalize), image shape)
FROZEN = {
    "fedavg_cnn": ("cnn", lambda n, norm: FrozenMcMahanCNN(n, norm), MNIST),
    "fedawe_cnn_svhn": ("cnn_svhn", lambda n, norm: FrozenFedAWECNN((128,), n, 0.0, norm),
                        COLOR),
    "fedawe_cnn_cifar10": ("cnn_cifar10",
                           lambda n, norm: FrozenFedAWECNN((256, 64), n, 0.0, norm), COLOR),
    "fedawe_cnn_cinic10": ("cnn_cinic10",
                           lambda n, norm: FrozenFedAWECNN((512, 256), n, 0.2, norm), COLOR),
    "fedef_cnn": ("cnn_mnist", lambda n, norm: FrozenFedEFCNN(n, normalize=norm), MNIST),
    "fedsoftmax_cnn": ("paper_cnn", lambda n, norm: FrozenFedSoftMaxCNN(n, 0, norm), MNIST),
    "fedsoftmax_cnn_literal": ("paper_cnn_literal",
                               lambda n, norm: FrozenFedSoftMaxCNN(n, 1600, norm), MNIST),
}


def _same(a, b):
  assert jax.tree.structure(a) == jax.tree.structure(b)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    x, y = np.asarray(x), np.asarray(y)
    assert x.shape == y.shape and x.dtype == y.dtype and x.tobytes() == y.tobytes()


@pytest.mark.parametrize("name", sorted(FROZEN))
@pytest.mark.parametrize("normalized", [False, True])
def test_each_paper_cnn_is_its_replaced_module_bit_for_bit(name, normalized):
  _, frozen, shape = FROZEN[name]
  norm = ((0.25,) * shape[-1], (0.5,) * shape[-1]) if normalized else None
  x = jax.random.uniform(jax.random.PRNGKey(1), (3, *shape))
  y = jnp.arange(3) % 7
  rngs = {"dropout": jax.random.PRNGKey(3)}
  results = []
  for m in (frozen(7, norm), models.make(name, num_classes=7, is_image=True, normalize=norm)):
    variables = m.init(jax.random.PRNGKey(2), x)

    def loss(v, m=m):
      logits = m.apply(v, x, train=True, rngs=rngs)
      return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], 1))

    results.append((variables, m.apply(variables, x),
                    m.apply(variables, x, train=True, rngs=rngs), jax.grad(loss)(variables)))
  _same(*results)


def test_old_names_are_aliases_of_the_new():
  for name, (old_name, _, _) in FROZEN.items():
    assert name in models.MODELS and old_name in models.MODELS
    assert models.MODELS_BY_NAME[old_name] is models.MODELS_BY_NAME[name]
