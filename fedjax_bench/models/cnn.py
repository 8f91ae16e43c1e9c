"""The papers' CNNs: one network (`CNN`), configured per paper (`PAPER_CNNS`).

Every one is convolutions (ReLU, 2x2 max pooling), a flatten, fully connected ReLU layers and
the output layer. What the papers vary is a `CNNConfig`: the convolutions, where the pooling
and the dropout sit, the initialization, and the layout: ``"torch"`` flattens in PyTorch's
C,H,W order and stores dense kernels [out, in] (`DenseOI`), so every weight compares with the
PyTorch model's; ``"flax"`` flattens H,W,C into `nn.Dense`'s [in, out] kernels. The
convolutions are `Conv` and the pooling `max_pool` (models/conv.py), whose gradients XLA:CPU
runs fast inside loops.
"""

import dataclasses

import jax
import jax.numpy as jnp
from flax import linen as nn

from fedjax_bench.models.conv import Conv, max_pool
from fedjax_bench.models.dense import DENSE_INITS, DenseOI
from fedjax_bench.models.preprocess import Normalize, standardize

CONV_INITS = ("lecun_normal", "kaiming_normal", "torch_default")


@dataclasses.dataclass(frozen=True)
class CNNConfig:
  """One paper's CNN, as `CNN` builds it."""
  channels: tuple[int, ...]          # each convolution's output channels
  kernel: int                        # square kernels, stride 1
  padding: str                       # "SAME" or "VALID"
  pool: str = "each"                 # 2x2 max pooling after "each" convolution or the "last"
  hidden: tuple[int, ...] = ()       # the fully connected ReLU layers' widths
  dropout: float = 0.0               # its rate (only with train=True)
  dropout_at: str = "dense"          # before every fully connected layer, or once on the
                                     # pooled "features"
  conv_init: str = "lecun_normal"    # one of CONV_INITS
  hidden_init: str = "lecun_normal"  # one of DENSE_INITS
  output_init: str = "lecun_normal"  # one of DENSE_INITS
  layout: str = "torch"              # "torch" or "flax" (only lecun_normal dense layers)

  def __post_init__(self):
    if self.pool not in ("each", "last") or self.dropout_at not in ("dense", "features"):
      raise ValueError(f"bad pool={self.pool!r} or dropout_at={self.dropout_at!r}")
    if self.conv_init not in CONV_INITS or not {self.hidden_init,
                                                 self.output_init} <= set(DENSE_INITS):
      raise ValueError(f"unknown init in {self}")
    if self.layout not in ("torch", "flax") or (
        self.layout == "flax" and {self.hidden_init, self.output_init} != {"lecun_normal"}):
      raise ValueError(f"layout={self.layout!r} takes lecun_normal dense layers only")


def _torch_uniform(fan_in: int):
  # The bound in float32 (not DenseOI's float64 one): these convolutions' numbers.
  bound = 1.0 / jnp.sqrt(float(fan_in))
  return lambda key, shape, dtype=jnp.float32: jax.random.uniform(key, shape, dtype, -bound,
                                                                   bound)


def conv_initializers(name: str, fan_in: int):
  """(kernel_init, bias_init) of an HWIO convolution kernel.

  * lecun_normal: flax's nn.Conv default (truncated normal, variance 1/fan_in), zero bias.
  * kaiming_normal: PyTorch's kaiming_normal_(mode="fan_in", relu): N(0, 2/fan_in), zero bias.
  * torch_default: PyTorch's nn.Conv2d default: weight and bias U(+-1/sqrt(fan_in)).
  """
  zeros = nn.initializers.zeros
  if name == "lecun_normal":
    return nn.initializers.lecun_normal(), zeros
  if name == "kaiming_normal":
    return nn.initializers.variance_scaling(2.0, "fan_in", "normal"), zeros
  if name == "torch_default":
    return _torch_uniform(fan_in), _torch_uniform(fan_in)
  raise ValueError(f"unknown conv init {name!r}; choose one of {', '.join(CONV_INITS)}")


class CNN(nn.Module):
  config: CNNConfig
  num_classes: int
  normalize: Normalize | None = None

  @nn.compact
  def __call__(self, x, train: bool = False):
    """``train=True`` enables dropout (if the config has any) and then needs a "dropout"
    rng."""
    c = self.config
    x = standardize(x, self.normalize)
    for i, features in enumerate(c.channels):
      kernel_init, bias_init = conv_initializers(c.conv_init,
                                                 c.kernel * c.kernel * x.shape[-1])
      x = nn.relu(Conv(features, (c.kernel, c.kernel), padding=c.padding,
                       kernel_init=kernel_init, bias_init=bias_init)(x))
      if c.pool == "each" or i == len(c.channels) - 1:
        x = max_pool(x)
    if c.dropout_at == "features":
      x = self._drop(x, train)
    if c.layout == "torch":
      x = jnp.transpose(x, (0, 3, 1, 2))
    x = x.reshape(x.shape[0], -1)
    for width in c.hidden:
      if c.dropout_at == "dense":
        x = self._drop(x, train)
      x = nn.relu(self._dense(width, c.hidden_init)(x))
    if c.dropout_at == "dense":
      x = self._drop(x, train)
    return self._dense(self.num_classes, c.output_init)(x)

  def _dense(self, features: int, init: str):
    if self.config.layout == "flax":
      return nn.Dense(features)
    return DenseOI(features, init=init)

  def _drop(self, x, train: bool):
    if self.config.dropout <= 0:
      return x
    return nn.Dropout(self.config.dropout, deterministic=not train)(x)


_TORCH_DEFAULT = dict(conv_init="torch_default", hidden_init="torch_default",
                      output_init="torch_default")
_FEDAWE = dict(kernel=3, padding="SAME", conv_init="kaiming_normal",
               hidden_init="kaiming_normal", output_init="torch_default")

# --model name: the paper's CNN. Parameter counts for 10 classes.
PAPER_CNNS = {
    # McMahan et al. 2017, the FedAvg paper's MNIST CNN (its Section 3): two 5x5
    # convolutions (32, 64), each pooled, a dense layer of 512; 1,663,370 on 28x28x1.
    # flax's default initialization (the paper states none).
    "fedavg_cnn": CNNConfig((32, 64), 5, "SAME", hidden=(512,), layout="flax"),
    # FedAWE's CNNs (Xiang et al. 2024, Table 6 and the authors' code) for 32x32x3:
    # conv3x3(32) twice, each pooled, then the dense layers; dropout before every dense
    # layer on CINIC-10. Init as the authors' PyTorch code: Kaiming normal (fan_in, ReLU
    # gain) and zero biases for the convolutions and hidden layers, nn.Linear's default
    # for the output layer.
    "fedawe_cnn_svhn": CNNConfig((32, 32), hidden=(128,), **_FEDAWE),                # 273,706
    "fedawe_cnn_cifar10": CNNConfig((32, 32), hidden=(256, 64), **_FEDAWE),          # 551,786
    "fedawe_cnn_cinic10": CNNConfig((32, 32), hidden=(512, 256), dropout=0.2,
                                    **_FEDAWE),                                      # 1,193,130
    # Fed-EF's MNIST/FMNIST CNN (Li & Li, Section 5; the paper gives no sizes, these are
    # PyTorch's MNIST example's, docs/papers/fedef.md): conv3x3(32)-conv3x3(64), VALID, one
    # pooling, Dropout(0.25), FC(128); PyTorch's default init; 1,199,882 on 28x28x1.
    "fedef_cnn": CNNConfig((32, 64), 3, "VALID", pool="last", hidden=(128,), dropout=0.25,
                           dropout_at="features", **_TORCH_DEFAULT),
    # The FedSoftMax paper's CNN (Ben Mansour et al., Section 3.1, Table 2; the exact shapes
    # are our reading, docs/papers/hetero_agg.md), for 28x28x1: conv3x3(32), conv3x3(64),
    # VALID, each pooled, PyTorch's default init. The 1600 of the paper's prose is the
    # flatten, then the output layer (34,826); "_literal" reads a dense layer of 1600 before
    # it (2,596,426).
    "fedsoftmax_cnn": CNNConfig((32, 64), 3, "VALID", **_TORCH_DEFAULT),
    "fedsoftmax_cnn_literal": CNNConfig((32, 64), 3, "VALID", hidden=(1600,),
                                        **_TORCH_DEFAULT),
}
