"""A task binds a model to federated data: loss, parameter init and central evaluation."""

import dataclasses
import inspect
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn

from fedjax_bench.data import augment
from fedjax_bench.data.federated import Dataset, pixels_to_float


@dataclasses.dataclass(frozen=True, eq=False)
class Optimum:
  """The minimum of f(θ) = mean training loss + (l2/2)||θ||² over the FULL training set.

  f does not depend on the partition: with client weights s_i/S, sum_i (s_i/S) f̂_i is
  the mean over all examples. ``params`` (θ*, float64 NumPy leaves) may be None.
  """
  f_star: float
  params: Any = None
  grad_norm: float = 0.0   # ||∇f(θ*)||, 0 for a closed form
  iterations: int = 0
  seconds: float = 0.0
  method: str = ""         # "closed_form" or "lbfgs"
  from_cache: bool = False


@dataclasses.dataclass(frozen=True, eq=False)
class Task:
  model: nn.Module
  x: jax.Array          # [N, D] all clients' examples, flattened, client after client;
                        # float32 features or uint8 pixels
  y: jax.Array          # [N]
  offsets: jax.Array    # [num_clients]
  counts: jax.Array     # [num_clients]
  test_x: jax.Array
  test_y: jax.Array
  train_eval_x: jax.Array  # the (sub)set of training examples scored as `train_loss`
  train_eval_y: jax.Array
  num_classes: int
  feature_shape: tuple     # an example's shape; x rows are flattened (row gathers are cheaper)
  max_count: int           # the largest client, a static bound for shuffling
  loss_type: str = "cross_entropy"  # or "squared_error": 0.5 (f(x) - y)^2, f scalar
  eval_chunk: int = 2048
  augmentation: str = "none"        # training-time image augmentation (data/augment.py)
  augment_batchwise: bool = False   # one crop/flip per minibatch, as the FedAWE code does
  eval_grad_norm: bool = False      # evaluate also reports grad_norm_sq (a backward pass)
  l2: float = 0.0                   # the loss adds (l2/2) sum of squares of all parameters
  # Known minimum of the training objective; evaluate then reports optimality_gap, and
  # train_eval_x/y are the full training set (see with_optimum).
  optimum: Optimum | None = None
  # Prioritized FL (spec 004): [num_clients] bool arrays, or None. With priority clients,
  # train_eval_x/y are theirs: train_loss is the prioritized objective F(w).
  priority: jax.Array | None = None
  aligned: jax.Array | None = None
  # Clients whose data is generated on demand (data/stream.py): client -> fetch, as
  # `client_data`; x/y then hold one placeholder row and offsets are zeros.
  example_fn: Callable | None = None

  @property
  def num_clients(self) -> int:
    return int(self.counts.shape[0])

  def client_data(self, i) -> Callable:
    """``positions -> (x, y)``: client i's examples at positions in [0, counts[i])."""
    if self.example_fn is not None:
      return self.example_fn(i)
    offset = self.offsets[i]
    return lambda pos: (self.x[offset + pos], self.y[offset + pos])

  def init_params(self, key: jax.Array) -> Any:
    x = pixels_to_float(self.x[:1]).reshape((1,) + self.feature_shape)
    return self.model.init(key, x)["params"]

  def logits(self, params, x: jax.Array, rng: jax.Array | None = None) -> jax.Array:
    """x: [batch, D] flattened examples (uint8 pixels are scaled to [0, 1] here).

    With ``rng`` the model runs in training mode: the batch is augmented and dropout
    is on, each with its own key. Evaluation passes no rng.
    """
    x = pixels_to_float(x).reshape((-1,) + self.feature_shape)
    if rng is None:
      return self.model.apply({"params": params}, x)
    aug_key, dropout_key = jax.random.split(rng)
    if self.augmentation != "none":
      x = augment.augment(aug_key, x, self.augmentation, batchwise=self.augment_batchwise)
    if not _has_train_mode(self.model):
      return self.model.apply({"params": params}, x)
    return self.model.apply({"params": params}, x, train=True, rngs={"dropout": dropout_key})

  def pointwise_loss(self, outputs: jax.Array, y: jax.Array) -> jax.Array:
    if self.loss_type == "squared_error":
      return 0.5 * jnp.square(outputs[..., 0] - y)
    return optax.softmax_cross_entropy_with_integer_labels(outputs, y)

  def loss(self, params, x: jax.Array, y: jax.Array, w: jax.Array,
           rng: jax.Array | None = None) -> jax.Array:
    """The loss averaged with example weights w (0 for padding; 0 if all w are 0), plus
    the penalty (l2/2)||params||² when l2 > 0. ``rng``: training mode (see `logits`)."""
    per_example = self.pointwise_loss(self.logits(params, x, rng), y)
    loss = jnp.sum(w * per_example) / jnp.maximum(jnp.sum(w), 1e-12)
    return loss + self.penalty(params) if self.l2 else loss

  def penalty(self, params) -> jax.Array:
    """(l2/2) * the sum of squares of all parameters."""
    return 0.5 * self.l2 * sum(jnp.sum(jnp.square(p)) for p in jax.tree.leaves(params))

  def evaluate(self, params) -> dict:
    """Central evaluation.

    * ``test_accuracy``, ``test_loss``: on the test set; the plain loss, no l2 penalty.
    * ``train_loss``: f, the mean loss over the scored training examples plus the
      penalty (l2/2)||params||² (spec 002_area §8 row 21).
    * with an ``optimum``: ``optimality_gap`` = train_loss - f* (train_loss is then over
      all training examples), and when θ* is known ``dist_sq`` = ||params - θ*||² and,
      if θ* != 0, ``rel_dist_sq`` = dist_sq / ||θ*||².
    """
    test_loss, test_acc = _mean_loss_and_accuracy(self, params, self.test_x, self.test_y)
    train_loss, _ = _mean_loss_and_accuracy(self, params, self.train_eval_x, self.train_eval_y)
    if self.l2:
      train_loss = train_loss + self.penalty(params)
    out = {"test_accuracy": test_acc, "test_loss": test_loss, "train_loss": train_loss}
    if self.eval_grad_norm:
      out["grad_norm_sq"] = self.grad_norm_sq(params)
    if self.optimum is not None:
      out.update(_optimum_metrics(self.optimum, params, train_loss))
    return out

  def grad_norm_sq(self, params) -> jax.Array:
    """||grad f(params)||^2, f the mean loss over the scored training examples (the
    Fed-EF paper's full-batch gradient norm; all of them with --train_eval_examples=0)
    plus the l2 penalty."""
    n = self.train_eval_x.shape[0]

    def chunk_sum(p, batch):
      xb, yb, wb = batch
      return jnp.sum(wb * self.pointwise_loss(self.logits(p, xb), yb))

    def add(total, batch):
      g = jax.grad(chunk_sum)(params, batch)
      return jax.tree.map(jnp.add, total, g), None

    zero = jax.tree.map(jnp.zeros_like, params)
    total, _ = jax.lax.scan(add, zero, _chunked(self, self.train_eval_x, self.train_eval_y))
    grad = jax.tree.map(lambda g: g / n, total)
    if self.l2:
      grad = jax.tree.map(lambda g, p: g + self.l2 * p, grad, params)
    return sum(jnp.sum(jnp.square(g)) for g in jax.tree.leaves(grad))


def with_optimum(task: Task, optimum: Optimum | None) -> Task:
  """``task`` knowing its optimum; its train_loss is then scored on all training
  examples, whatever ``train_eval_examples`` was, since the gap needs f itself."""
  if optimum is None:
    return dataclasses.replace(task, optimum=None)
  return dataclasses.replace(task, optimum=optimum, train_eval_x=task.x, train_eval_y=task.y)


def _optimum_metrics(optimum: Optimum, params, train_loss) -> dict:
  out = {"optimality_gap": train_loss - optimum.f_star}
  if optimum.params is None:
    return out
  # θ* is float64 on the host: cast to the parameters' dtype, so that float64 runs
  # (jax_enable_x64) resolve distances far below float32's rounding of θ*.
  diff = jax.tree.map(lambda p, s: p - jnp.asarray(s, p.dtype), params, optimum.params)
  out["dist_sq"] = sum(jnp.sum(jnp.square(d)) for d in jax.tree.leaves(diff))
  norm_sq = float(sum(np.sum(np.square(s)) for s in jax.tree.leaves(optimum.params)))
  if norm_sq > 0:
    out["rel_dist_sq"] = out["dist_sq"] / norm_sq
  return out


def _has_train_mode(model: nn.Module) -> bool:
  """Whether the model's __call__ takes ``train`` (dropout); plain flax layers do not."""
  return "train" in inspect.signature(type(model).__call__).parameters


def _chunked(task: Task, x, y):
  """(x, y, weights) zero-padded to whole chunks of ``eval_chunk`` and reshaped
  [chunks, chunk, ...]; padding rows weigh 0."""
  n = x.shape[0]
  chunk = min(task.eval_chunk, n)
  pad = (-n) % chunk
  w = jnp.concatenate([jnp.ones(n), jnp.zeros(pad)])
  xp = jnp.concatenate([x, jnp.zeros((pad,) + x.shape[1:], x.dtype)])
  yp = jnp.concatenate([y, jnp.zeros(pad, y.dtype)])
  shape = lambda a: a.reshape((-1, chunk) + a.shape[1:])
  return shape(xp), shape(yp), shape(w)


def _mean_loss_and_accuracy(task: Task, params, x, y):
  """Scores x in chunks of ``eval_chunk`` examples to bound memory."""
  n = x.shape[0]

  def one(batch):
    xb, yb, wb = batch
    outputs = task.logits(params, xb)
    correct = (jnp.argmax(outputs, -1) == yb if task.loss_type == "cross_entropy"
               else jnp.full(yb.shape, jnp.nan))
    return jnp.sum(wb * task.pointwise_loss(outputs, yb)), jnp.sum(wb * correct)

  loss_sum, correct = jax.lax.map(one, _chunked(task, x, y))
  return jnp.sum(loss_sum) / n, jnp.sum(correct) / n


def make_task(dataset: Dataset, model: nn.Module, *, train_eval_examples: int = 10000,
              eval_seed: int = 0, loss_type: str = "cross_entropy",
              augment: bool = True, augment_batchwise: bool = False,
              eval_grad_norm: bool = False, l2: float = 0.0,
              optimum: Optimum | None = None) -> Task:
  """``train_eval_examples`` > 0 scores `train_loss` on a fixed random subset of that size
  (ignored with an ``optimum``: see `with_optimum`).

  With ``loss_type="squared_error"`` labels are float targets and accuracy is NaN.
  ``augment``: apply the dataset's training augmentation (``dataset.augmentation``).
  ``l2``: the penalty (l2/2)||params||² in the training loss and in train_loss.
  ``optimum``: see `with_optimum` (core/optimum.py computes one).
  With priority clients (``dataset.priority``), train_loss is scored on their examples.
  """
  if l2 < 0:
    raise ValueError(f"l2 must be >= 0, got {l2}")
  t = dataset.train
  if t.num_examples == 0:
    raise ValueError("the training set is empty")
  idx = np.arange(t.num_examples)
  if dataset.priority is not None:  # the union of the priority clients' examples
    idx = np.concatenate([np.arange(o, o + c) for o, c, p in
                          zip(t.offsets, t.counts, dataset.priority) if p]).astype(np.int64)
  if 0 < train_eval_examples < len(idx):
    idx = np.sort(np.random.default_rng(eval_seed).choice(
        idx, train_eval_examples, replace=False))
  flat = lambda a: jnp.asarray(a.reshape(a.shape[0], -1))
  task = Task(
      model=model, x=flat(t.x), y=jnp.asarray(t.y),
      offsets=jnp.asarray(t.offsets), counts=jnp.asarray(t.counts),
      test_x=flat(dataset.test_x), test_y=jnp.asarray(dataset.test_y),
      train_eval_x=flat(t.x[idx]), train_eval_y=jnp.asarray(t.y[idx]),
      num_classes=dataset.num_classes, feature_shape=tuple(t.x.shape[1:]),
      max_count=max(int(t.counts.max()), 1),
      loss_type=loss_type,
      augmentation=getattr(dataset, "augmentation", "none") if augment else "none",
      augment_batchwise=augment_batchwise, eval_grad_norm=eval_grad_norm, l2=float(l2),
      priority=None if dataset.priority is None else jnp.asarray(dataset.priority),
      aligned=None if dataset.aligned is None else jnp.asarray(dataset.aligned))
  return task if optimum is None else with_optimum(task, optimum)


def make_stream_task(stream, model: nn.Module, *, eval_chunk: int = 2048) -> Task:
  """A task over clients generated on demand (`data/stream.Stream`): nothing per client is
  stored but its size."""
  n = stream.num_clients
  return Task(
      model=model, x=jnp.zeros((1, stream.dim), jnp.float32), y=jnp.zeros(1, jnp.int32),
      offsets=jnp.zeros(n, jnp.int32), counts=jnp.asarray(stream.counts),
      test_x=jnp.asarray(stream.test_x), test_y=jnp.asarray(stream.test_y),
      train_eval_x=jnp.asarray(stream.train_eval_x),
      train_eval_y=jnp.asarray(stream.train_eval_y), num_classes=stream.num_classes,
      feature_shape=(stream.dim,), max_count=int(stream.counts.max()), eval_chunk=eval_chunk,
      example_fn=stream.example_fn)
