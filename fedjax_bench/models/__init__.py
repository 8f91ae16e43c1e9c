"""flax.linen models, chosen by name.

Every model is called as ``model.apply(variables, x, train=False)`` on a batch of
examples in their feature shape (images as float32 in [0, 1], NHWC). ``train=True``
only matters for models with dropout (cnn_cinic10, cnn_mnist), which then need a "dropout" rng.
"""

from flax import linen as nn

from fedjax_bench.errors import UsageError
from fedjax_bench.models import small_cnn
from fedjax_bench.models.cnn import CNN
from fedjax_bench.models.dense import MLP, LogReg
from fedjax_bench.models.mnist_cnn import MnistCNN
from fedjax_bench.models.preprocess import as_normalize

MODELS = ("logreg", "mlp", "cnn") + tuple(small_cnn.CONFIGS) + ("cnn_mnist",)


def make(name: str, *, num_classes: int, is_image: bool,
         mlp_hidden: tuple[int, ...] = (200, 200), normalize=None,
         zero_init: bool = False) -> nn.Module:
  """``normalize``: optional per-channel (mean, std) the model applies to its input first
  (a dataset's ``normalize``). ``zero_init``: all-zero initial weights, logreg only."""
  norm = _normalize(normalize)
  if zero_init and name != "logreg":
    raise UsageError(f"zero init applies to --model=logreg only, not {name!r}")
  if name == "logreg":
    return LogReg(num_classes, zero_init=zero_init, normalize=norm)
  if name == "mlp":
    return MLP(tuple(mlp_hidden), num_classes, normalize=norm)
  if name in MODELS:
    if not is_image:
      raise UsageError(f"--model={name} needs image data; for this dataset use "
                       "--model=logreg or --model=mlp")
    if name == "cnn":
      return CNN(num_classes, normalize=norm)
    if name == "cnn_mnist":
      return MnistCNN(num_classes, normalize=norm)
    return small_cnn.make(name, num_classes, norm)
  raise UsageError(f"unknown --model={name!r}; valid: {', '.join(MODELS)}")


def _normalize(normalize) -> tuple | None:
  try:
    return as_normalize(normalize)
  except (TypeError, ValueError) as e:
    raise UsageError(f"bad normalize={normalize!r}: {e}") from e
