"""A model's parameters by layer: which are the head and which the body (FedPer, FedRep),
which belong to batch normalization (FedBN). Declared here once for every model.

A model's layers are its top-level parameter modules in the order its forward pass makes
them (`layers`): logreg ``DenseOI_0``; the MLP ``DenseOI_0`` .. ``DenseOI_k``; the papers'
CNNs their convolutions then dense layers; ``mlp_bn`` and ``fedbn_cnn`` their blocks (a
layer with its BatchNorm) then the output layer; ``char_lstm`` its embedding, two LSTM
layers and the output layer. The head is the last ``head_layers`` of them (the output layer
for 1), the body the others.

Parameter trees here are a Task's parameters: the model's ``params`` collection, or with
batch norm ``{"params": ..., "batch_stats": ...}`` (`has_state`), whose running statistics
go with their layer. A mask is a tree of Python bools of the parameters' structure
(`core.parts` selects and merges by it).
"""

import jax

from fedjax_bench.core.parts import STATE, has_state


def layers(model, example) -> tuple[str, ...]:
  """``model``'s top-level parameter modules in the order its forward pass creates them
  (flax creates a module's parameters when it is first called), for an input like
  ``example`` ([1, ...] in the model's feature shape)."""
  order = []

  def init(key):
    order.extend(model.init(key, example)["params"])

  jax.eval_shape(init, jax.random.PRNGKey(0))
  return tuple(order)


def _by_layer(params, local):
  """The mask of ``params`` that is ``local(layer)`` at each leaf of a top-level layer."""
  mark = lambda tree: {name: jax.tree.map(lambda _: local(name), sub)
                       for name, sub in tree.items()}
  if has_state(params):
    return {collection: mark(tree) for collection, tree in params.items()}
  return mark(params)


def head_mask(params, order: tuple[str, ...], head_layers: int):
  """True at the leaves of the last ``head_layers`` layers of ``order`` (`layers`)."""
  head = set(order[len(order) - head_layers:]) if head_layers else set()
  return _by_layer(params, lambda name: name in head)


def norm_mask(params):
  """True at the leaves of every module that keeps running statistics (its batch_stats and
  its scale and bias): a model's batch normalization. All False without any."""
  if not has_state(params):
    return jax.tree.map(lambda _: False, params)
  paths = {path for path, _ in jax.tree_util.tree_flatten_with_path(params[STATE])[0]}
  modules = {tuple(p[:-1]) for p in paths}  # the modules holding running statistics

  def local(path, _):
    keys = tuple(path[1:])  # below the collection
    return any(keys[:len(m)] == m for m in modules)

  return jax.tree_util.tree_map_with_path(local, params)


def is_empty(mask) -> bool:
  return not any(jax.tree.leaves(mask))
