"""flax.linen models, chosen by name."""

from flax import linen as nn

from fedjax_bench.errors import UsageError
from fedjax_bench.models.cnn import CNN
from fedjax_bench.models.dense import MLP, LogReg

MODELS = ("logreg", "mlp", "cnn")


def make(name: str, *, num_classes: int, is_image: bool,
         mlp_hidden: tuple[int, ...] = (200, 200)) -> nn.Module:
  if name == "logreg":
    return LogReg(num_classes)
  if name == "mlp":
    return MLP(tuple(mlp_hidden), num_classes)
  if name == "cnn":
    if not is_image:
      raise UsageError("--model=cnn needs image data; for this dataset use "
                       "--model=logreg or --model=mlp")
    return CNN(num_classes)
  raise UsageError(f"unknown --model={name!r}; valid: {', '.join(MODELS)}")
