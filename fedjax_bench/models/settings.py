"""The model and objective settings (`fedjax_bench.settings`)."""

from fedjax_bench import models as models_lib
from fedjax_bench.settings import INT32, NON_NEGATIVE, POSITIVE, Check, section, setting

# {old --model name: the model it stands for}
ALIASES = {alias: model.name for alias, model in models_lib.MODELS_BY_NAME.items()
           if alias != model.name}
WIDTHS = Check(lambda v: all(0 < w <= INT32[1] for w in v), f"must be widths in [1, {INT32[1]}]")


@section("model and objective")
class ModelSettings:
  model: str = setting("logreg", "Model (docs/models.md). Aliases: " + ", ".join(
      f"{alias} = {name}" for alias, name in ALIASES.items()) + ".",
      choices=models_lib.MODELS, aliases=ALIASES)
  mlp_hidden: tuple = setting((200, 200), "Hidden widths of --model=mlp and mlp_bn.",
                              check=WIDTHS)
  zero_init: bool = setting(False, "Start from all-zero weights (--model=logreg only; the "
                            "FedAWE CPU experiment (toyfl); the default of the asynchronous "
                            "algorithms on MNIST, AREA's x0 = 0).")
  logreg_bias: bool = setting(True, "--model=logreg has a bias (AREA's problem: none).")
  l2: float = setting(0.0, "L2 regularization (nu/2)||theta||^2 added to every local loss and "
                      "to train_loss (AREA's MNIST problem: 1e-3).", check=NON_NEGATIVE)
  augment: bool = setting(True, "Apply the dataset's training augmentation (svhn: random "
                          "crop; cifar10, cinic10: crop and flip; none for the others).")
  batchwise_augmentation: bool = setting(False, "One crop/flip per minibatch instead of per "
                                         "image (what the FedAWE authors' code does).")
  lstm_hidden: int = setting(256, "--model=char_lstm: the width of each of its two LSTM layers "
                             "(LEAF's and FedJAX's 256; smaller for CPU-scale runs).",
                             check=POSITIVE, used_if=lambda s: s.model == "char_lstm")

  def make(self, dataset):
    return models_lib.make(self.model, num_classes=dataset.num_classes, is_image=dataset.is_image,
                       mlp_hidden=self.mlp_hidden, normalize=dataset.normalize,
                       zero_init=self.zero_init,
                       bias=self.logreg_bias if self.model == "logreg" else None,
                       dataset=dataset, settings=self)
