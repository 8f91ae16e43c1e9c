"""The split of every model into layers, body and head (FedPer, FedRep) and batch
normalization (FedBN), declared once in models/layers.py: each registered model's layers in
forward order, and the masks that --head_layers and the batch norm make of its parameters."""

import jax
import jax.numpy as jnp
import pytest

from tests.conftest import toy_setup
from fedjax_bench import models
from fedjax_bench.algorithms import personal_parts
from fedjax_bench.core import parts
from fedjax_bench.errors import UsageError
from fedjax_bench.models import layers

CONV, DENSE_OI = ("Conv_0", "Conv_1"), tuple(f"DenseOI_{i}" for i in range(4))
# Every registered model: its layers in the order its forward pass runs them.
LAYERS = {
    "logreg": ("DenseOI_0",),
    "linear": ("DenseOI_0",),
    "mlp": DENSE_OI[:3],  # --mlp_hidden=200,200
    "fedavg_cnn": CONV + ("Dense_0", "Dense_1"),
    "fedawe_cnn_svhn": CONV + DENSE_OI[:2],
    "fedawe_cnn_cifar10": CONV + DENSE_OI[:3],
    "fedawe_cnn_cinic10": CONV + DENSE_OI[:3],
    "fedef_cnn": CONV + DENSE_OI[:2],
    "fedsoftmax_cnn": CONV + DENSE_OI[:1],
    "fedsoftmax_cnn_literal": CONV + DENSE_OI[:2],
    "char_lstm": ("Embed_0", "LSTMLayer_0", "LSTMLayer_1", "Dense_0"),
    "mlp_bn": ("DenseBN_0", "DenseBN_1", "DenseOI_0"),
    "fedbn_cnn": ("ConvBN_0", "ConvBN_1", "ConvBN_2", "DenseBN_0", "DenseBN_1", "DenseOI_0"),
}


def _model(name):
  if name == "char_lstm":
    return models.make(name, num_classes=10, is_image=False), jnp.zeros((1, 80), jnp.int8)
  return (models.make(name, num_classes=10, is_image=True),
          jnp.zeros((1, 32, 32, 3) if "fedawe" in name else (1, 28, 28, 1)))


def test_every_registered_model_declares_its_layers():
  assert set(LAYERS) == {m.name for m in models.MODELS_BY_NAME.values()}


def _marked(mask, stateful: bool) -> set:
  """The layers (top-level modules) where ``mask`` is True."""
  at = 1 if stateful else 0  # below the collection of a stateful model's variables
  return {path[at].key for path, m in jax.tree_util.tree_flatten_with_path(mask)[0] if m}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layers_in_forward_order_and_the_head_is_the_last(name):
  model, x = _model(name)
  order = layers.layers(model, x)
  assert order == LAYERS[name]
  variables = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)
  params = dict(variables) if "batch_stats" in variables else variables["params"]
  stateful = parts.has_state(params)
  # --head_layers=1 is the output layer, 2 adds the layer before it, 0 is nothing
  assert _marked(layers.head_mask(params, order, 1), stateful) == {order[-1]}
  assert _marked(layers.head_mask(params, order, 2), stateful) == set(order[-2:])
  assert layers.is_empty(layers.head_mask(params, order, 0))


def test_the_batch_norm_mask_is_each_norms_scale_bias_and_statistics():
  model, x = _model("mlp_bn")
  variables = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)
  mask = layers.norm_mask(dict(variables))
  local = {jax.tree_util.keystr(p) for p, m in jax.tree_util.tree_flatten_with_path(mask)[0] if m}
  assert local == {f"['{c}']['DenseBN_{j}']['BatchNorm_0']['{leaf}']"
                   for j in (0, 1) for c, leaves in (("params", ("scale", "bias")),
                                                     ("batch_stats", ("mean", "var")))
                   for leaf in leaves}
  plain = jax.eval_shape(models.make("mlp", num_classes=3, is_image=False).init,
                         jax.random.PRNGKey(0), x)["params"]
  assert layers.is_empty(layers.norm_mask(plain))


def test_a_head_must_leave_a_body():
  task, _ = toy_setup(num_clients=4, model="logreg")
  assert layers.is_empty(personal_parts.head_mask(task, 0))
  with pytest.raises(UsageError, match="leaves the model no shared body.*valid: 0 to 0"):
    personal_parts.head_mask(task, 1)
  task, _ = toy_setup(num_clients=4, model="mlp", hidden=3)
  assert not layers.is_empty(personal_parts.head_mask(task, 1))
  with pytest.raises(UsageError, match="valid: 0 to 1"):
    personal_parts.head_mask(task, 2)
