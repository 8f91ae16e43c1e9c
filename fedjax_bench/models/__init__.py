"""flax.linen models, chosen by name.

Every model is called as ``model.apply(variables, x, train=False)`` on a batch of
examples in their feature shape (images as float32 in [0, 1], NHWC). ``train=True``
only matters for models with dropout (cnn_cinic10, cnn_mnist), which then need a "dropout" rng.
``linear`` is a linear map without bias and with zero initial weights, for least-squares
toys (``loss_type="squared_error"``, ``num_classes`` = the number of outputs, 1 there).
Sequence models (``BUILDERS``: char_lstm) read token ids (`data.federated.is_tokens`); their
modules are imported only when chosen.
"""

import importlib

from flax import linen as nn

from fedjax_bench.data.federated import is_tokens
from fedjax_bench.errors import UsageError
from fedjax_bench.models import small_cnn
from fedjax_bench.models.cnn import CNN
from fedjax_bench.models.dense import MLP, Linear, LogReg
from fedjax_bench.models.mnist_cnn import MnistCNN
from fedjax_bench.models.paper_cnn import PaperCNN
from fedjax_bench.models.preprocess import as_normalize

MODELS = ("logreg", "mlp", "cnn") + tuple(small_cnn.CONFIGS) + ("cnn_mnist", "linear")
MODELS += ("paper_cnn", "paper_cnn_literal")  # the FedSoftMax paper's (its §3.1, Table 2)
# Models built by their own module: name -> "module:function", called as
# function(num_classes=, dataset=, settings=) (settings: the run's ModelSettings or None).
BUILDERS = {"char_lstm": "fedjax_bench.models.char_lstm:build"}
MODELS += tuple(BUILDERS)
_WITH_BIAS_OPTION = ("logreg", "linear")


def make(name: str, *, num_classes: int, is_image: bool,
         mlp_hidden: tuple[int, ...] = (200, 200), normalize=None,
         zero_init: bool = False, bias: bool | None = None, dataset=None,
         settings=None) -> nn.Module:
  """``normalize``: optional per-channel (mean, std) the model applies to its input first
  (a dataset's ``normalize``). ``zero_init``: all-zero initial weights, logreg only
  (linear always starts at zero). ``bias``: logreg and linear only; None keeps the
  model's default (logreg: with bias, linear: without). ``dataset``, ``settings``: the
  run's Dataset and ModelSettings, which the models of ``BUILDERS`` read (and which say
  whether the examples are token ids, which only those models take)."""
  tokens = dataset is not None and is_tokens(dataset.train.x)
  if name in BUILDERS:
    if zero_init or bias is not None or normalize is not None:
      raise UsageError(f"--model={name} takes no zero init, bias option or input "
                       "normalization")
    module, _, function = BUILDERS[name].partition(":")
    return getattr(importlib.import_module(module), function)(
        num_classes=num_classes, dataset=dataset, settings=settings)
  if tokens:
    raise UsageError(f"--dataset={dataset.name} holds token sequences; its model is one of "
                     f"{', '.join(BUILDERS)}, not --model={name}")
  norm = _normalize(normalize)
  if zero_init and name not in ("logreg", "linear"):
    raise UsageError(f"zero init applies to --model=logreg only, not {name!r}")
  if bias is not None and name not in _WITH_BIAS_OPTION:
    raise UsageError(f"the bias option applies to --model=logreg or linear only, not {name!r}")
  if name == "logreg":
    return LogReg(num_classes, zero_init=zero_init, normalize=norm,
                  bias=True if bias is None else bias)
  if name == "linear":
    if norm is not None:
      raise UsageError("--model=linear takes no input normalization")
    return Linear(num_classes, bias=bool(bias))
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
    if name in ("paper_cnn", "paper_cnn_literal"):
      return PaperCNN(num_classes, hidden_fc=1600 if name.endswith("literal") else 0,
                      normalize=norm)
    return small_cnn.make(name, num_classes, norm)
  raise UsageError(f"unknown --model={name!r}; valid: {', '.join(MODELS)}")


def _normalize(normalize) -> tuple | None:
  try:
    return as_normalize(normalize)
  except (TypeError, ValueError) as e:
    raise UsageError(f"bad normalize={normalize!r}: {e}") from e
