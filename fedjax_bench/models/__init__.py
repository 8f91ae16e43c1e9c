"""flax.linen models, chosen by name.

Every model is called as ``model.apply(variables, x, train=False)`` on a batch of
examples in their feature shape (images as float32 in [0, 1], NHWC). ``train=True``
only matters for models with dropout (fedawe_cnn_cinic10, fedef_cnn), which then need a
"dropout" rng. The papers' CNNs are one module configured per paper (`cnn.PAPER_CNNS`),
named by the paper they come from; ``aliases`` are other names ``--model`` takes for one.
``linear`` is a linear map without bias and with zero initial weights, for least-squares
toys (``loss_type="squared_error"``, ``num_classes`` = the number of outputs, 1 there).
Sequence models (``Model.tokens``: char_lstm) read token ids (`data.federated.is_tokens`);
their modules are imported only when chosen. Every model is one `register` line below (the
CNNs one line for all), as every algorithm is in `fedjax_bench.algorithms`.
"""

import dataclasses
import importlib
from typing import Callable

from flax import linen as nn

from fedjax_bench.data.federated import is_tokens
from fedjax_bench.errors import UsageError
from fedjax_bench.models.batch_norm import FedBNCNN, MLPBN
from fedjax_bench.models.cnn import CNN, PAPER_CNNS
from fedjax_bench.models.dense import MLP, Linear, LogReg
from fedjax_bench.models.preprocess import as_normalize


@dataclasses.dataclass(frozen=True)
class Model:
  """A model by name: ``build(num_classes, **options)`` -> an ``nn.Module``, and what it
  takes. ``build`` gets ``normalize`` (unless ``normalizes`` is False), ``mlp_hidden`` (if
  ``hidden``), ``zero_init`` and ``bias`` (if it takes them); a token model gets
  ``dataset`` and ``settings`` instead, and is built by ``"module:function"`` (imported
  only when chosen)."""
  name: str
  build: Callable | str
  image: bool = False       # needs image data
  tokens: bool = False      # reads token ids (`data.federated.is_tokens`)
  zero_init: bool = False   # takes --zero_init
  bias: bool = False        # takes the bias option
  normalizes: bool = True   # takes the dataset's input normalization
  hidden: bool = False      # reads --mlp_hidden
  aliases: tuple[str, ...] = ()  # other --model names for it (a run records ``name``)


MODELS_BY_NAME: dict[str, Model] = {}  # by name and by alias


def register(name: str, build, *, aliases=(), **capabilities) -> Model:
  """Makes ``build`` the model ``--model=name``, also taken as each of ``aliases`` (see
  `Model` for ``capabilities``)."""
  model = Model(name, build, aliases=tuple(aliases), **capabilities)
  for key in (name, *model.aliases):
    if key in MODELS_BY_NAME:
      raise ValueError(f"model {key!r} is registered twice")
  MODELS_BY_NAME.update(dict.fromkeys((name, *model.aliases), model))
  return model


register("logreg", lambda n, normalize, zero_init, bias: LogReg(
    n, zero_init=zero_init, normalize=normalize, bias=True if bias is None else bias),
         zero_init=True, bias=True)
register("mlp", lambda n, normalize, mlp_hidden: MLP(tuple(mlp_hidden), n, normalize=normalize),
         hidden=True)
register("linear", lambda n, zero_init, bias: Linear(n, bias=bool(bias)), zero_init=True,
         bias=True, normalizes=False)
# The papers' CNNs (`cnn.PAPER_CNNS` says whose each is), and the names the shipped
# flagfiles and presets give them.
CNN_ALIASES = {"fedavg_cnn": ("cnn",), "fedawe_cnn_svhn": ("cnn_svhn",),
               "fedawe_cnn_cifar10": ("cnn_cifar10",), "fedawe_cnn_cinic10": ("cnn_cinic10",),
               "fedef_cnn": ("cnn_mnist",), "fedsoftmax_cnn": ("paper_cnn",),
               "fedsoftmax_cnn_literal": ("paper_cnn_literal",)}
for _name, _config in PAPER_CNNS.items():
  register(_name, lambda n, normalize, _config=_config: CNN(_config, n, normalize=normalize),
           image=True, aliases=CNN_ALIASES.get(_name, ()))
register("char_lstm", "fedjax_bench.models.char_lstm:build", tokens=True, normalizes=False)
# With batch normalization (models/batch_norm.py; FedBN's local layers): the MLP with a
# BatchNorm after each hidden layer, and the FedBN paper's digits CNN.
register("mlp_bn", lambda n, normalize, mlp_hidden: MLPBN(tuple(mlp_hidden), n,
                                                          normalize=normalize), hidden=True)
register("fedbn_cnn", lambda n, normalize: FedBNCNN(n, normalize=normalize), image=True)
# The valid --model values: the names, then the aliases.
MODELS = tuple(n for n, m in MODELS_BY_NAME.items() if n == m.name) + tuple(
    n for n, m in MODELS_BY_NAME.items() if n != m.name)


def make(name: str, *, num_classes: int, is_image: bool,
         mlp_hidden: tuple[int, ...] = (200, 200), normalize=None,
         zero_init: bool = False, bias: bool | None = None, dataset=None,
         settings=None) -> nn.Module:
  """``normalize``: optional per-channel (mean, std) the model applies to its input first
  (a dataset's ``normalize``). ``zero_init``: all-zero initial weights, logreg only
  (linear always starts at zero). ``bias``: logreg and linear only; None keeps the
  model's default (logreg: with bias, linear: without). ``dataset``, ``settings``: the
  run's Dataset and ModelSettings, which the token models read (and which say whether
  the examples are token ids, which only those models take)."""
  model = MODELS_BY_NAME.get(name)
  if model is None:
    raise UsageError(f"unknown --model={name!r}; valid: {', '.join(MODELS)}")
  if model.tokens:
    if zero_init or bias is not None or normalize is not None:
      raise UsageError(f"--model={name} takes no zero init, bias option or input "
                       "normalization")
    module, _, function = model.build.partition(":")
    return getattr(importlib.import_module(module), function)(
        num_classes=num_classes, dataset=dataset, settings=settings)
  if dataset is not None and is_tokens(dataset.train.x):
    tokens = ", ".join(n for n, m in MODELS_BY_NAME.items() if m.tokens)
    raise UsageError(f"--dataset={dataset.name} holds token sequences; its model is one of "
                     f"{tokens}, not --model={name}")
  norm = _normalize(normalize)
  if zero_init and not model.zero_init:
    raise UsageError(f"zero init applies to --model=logreg only, not {name!r}")
  if bias is not None and not model.bias:
    raise UsageError(f"the bias option applies to --model=logreg or linear only, not {name!r}")
  if norm is not None and not model.normalizes:
    raise UsageError(f"--model={name} takes no input normalization")
  if model.image and not is_image:
    raise UsageError(f"--model={name} needs image data; for this dataset use "
                     "--model=logreg or --model=mlp")
  options = {"normalize": norm} if model.normalizes else {}
  if model.hidden:
    options["mlp_hidden"] = mlp_hidden
  if model.zero_init:
    options["zero_init"] = zero_init
  if model.bias:
    options["bias"] = bias
  return model.build(num_classes, **options)


def _normalize(normalize) -> tuple | None:
  try:
    return as_normalize(normalize)
  except (TypeError, ValueError) as e:
    raise UsageError(f"bad normalize={normalize!r}: {e}") from e
