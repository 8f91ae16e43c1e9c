"""The task: a model bound to federated data (loss, parameter init, central evaluation),
the views a run takes of it, and its known optimum."""

import dataclasses
import inspect
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn

from fedjax_bench.core import local, parts
from fedjax_bench.core.kernels import logreg_sgd
from fedjax_bench.core.parts import STATE, has_state
from fedjax_bench.core.types import Personal
from fedjax_bench.data import augment
from fedjax_bench.data.federated import pixels_to_float
from fedjax_bench.models import batch_norm
from fedjax_bench.models.dense import LogReg
from fedjax_bench.task.evaluation import (_chunked, _divide, _mean_loss_and_accuracy,
                                          _optimum_metrics, _over_clients)


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


class TaskView(NamedTuple):
  """One run's data as index maps into its Task's pooled arrays (--data_per_seed).

  Row r of the run's layout (client after client, client i at rows offsets[i] ..
  offsets[i] + counts[i] - 1) is pool row ``index[r]``. Every leaf may be traced: the
  engine passes each run its own view, so one program holds one partition per seed.
  """
  index: jax.Array             # [R] int32 pool rows, past the run's own rows padded with 0
  offsets: jax.Array           # [num_clients] int32
  counts: jax.Array            # [num_clients] int32
  owner: jax.Array             # [R] int32 client of each layout row (num_clients: padding)
  train_eval_index: jax.Array  # [E] int32 pool rows scored as train_loss (padded)
  train_eval_count: jax.Array  # () int32 how many of them are the run's
  test_index: Any = None       # [M] int32 rows of the pooled test set (padded), or None:
  test_count: Any = None       # () int32   every run scores the whole (shared) test set
  priority: Any = None         # [num_clients] bool: prioritized FL's roles, or None
  aligned: Any = None          # [num_clients] bool
  local_client: Any = None     # () int32: local_model's free client (-1: none)


class ClientTest(NamedTuple):
  """Every client's own test examples as a padded [num_clients, H] table of rows of x/y
  (H the most any client holds; ``valid`` marks the real entries)."""
  x: jax.Array      # [R, D] the held-out examples, client after client
  y: jax.Array      # [R]
  rows: jax.Array   # [num_clients, H] int32 rows of x/y (0 where not valid)
  valid: jax.Array  # [num_clients, H] bool
  tail: int         # static: the clients in a "worst/best 10%" (ceil(0.1 x those with data))


class Finetune(NamedTuple):
  """The personalization evaluation of a global model (--finetune_steps): every client
  fine-tunes it with ``steps`` local SGD steps on its own training data (minibatches as
  local training draws them) and is scored on its own test data."""
  steps: int
  batch_size: int
  sampling: str = "shuffle"
  lr: float = 0.0  # 0: the run's --client_lr (the engine reads it)


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
  # Prioritized FL (FedALIGN): [num_clients] bool arrays, or None. With priority clients,
  # train_eval_x/y are theirs: train_loss is the prioritized objective F(w).
  priority: jax.Array | None = None
  aligned: jax.Array | None = None
  num_priority: int = 0  # static: how many priority clients (the same in every run)
  # Clients whose data is generated on demand (data/stream.py): client -> fetch, as
  # `client_data`; x/y then hold one placeholder row and offsets are zeros.
  example_fn: Callable | None = None
  # One run's index maps into x/y (and test_x/test_y) with --data_per_seed; None: x/y
  # are the layout itself. `for_run` gives the Task of one run.
  view: TaskView | None = None
  # Each client's own test data (--holdout_fraction), or None.
  client_test: "ClientTest | None" = None
  # The fine-tuning evaluation of the global model (--finetune_steps), or None.
  finetune: "Finetune | None" = None

  @property
  def num_clients(self) -> int:
    return int(self.counts.shape[0])

  def for_run(self, view: TaskView) -> "Task":
    """This task as run ``view`` sees it: its clients, sizes, evaluation sets and roles."""
    roles = {} if view.priority is None else dict(priority=view.priority, aligned=view.aligned)
    return dataclasses.replace(self, offsets=view.offsets, counts=view.counts, view=view,
                               **roles)

  def client_data(self, i) -> Callable:
    """``positions -> (x, y)``: client i's examples at positions in [0, counts[i])."""
    if self.example_fn is not None:
      return self.example_fn(i)
    offset = self.offsets[i]
    if self.view is not None:
      def read(pos):
        rows = self.view.index[offset + pos]
        return self.x[rows], self.y[rows]
      return read
    return lambda pos: (self.x[offset + pos], self.y[offset + pos])

  def layout(self):
    """(x, y, rows, owner): the training rows client after client are ``x[rows]`` (``x``
    itself when rows is None); owner is each row's client (num_clients for padding)."""
    if self.view is not None:
      return self.x, self.y, self.view.index, self.view.owner
    counts = np.asarray(self.counts)
    return self.x, self.y, None, jnp.asarray(np.repeat(np.arange(len(counts), dtype=np.int32),
                                                       counts))

  def test_set(self):
    """(x, y, rows, count): the test examples are ``x[rows]`` (x itself when rows is
    None), of which the first ``count`` count (all when None)."""
    v = self.view
    if v is None or v.test_index is None:
      return self.test_x, self.test_y, None, None
    return self.test_x, self.test_y, v.test_index, v.test_count

  def train_eval_set(self):
    """(x, y, rows, count) of the training examples scored as train_loss, as `test_set`."""
    v = self.view
    if v is None:
      return self.train_eval_x, self.train_eval_y, None, None
    return self.x, self.y, v.train_eval_index, v.train_eval_count

  def init_params(self, key: jax.Array) -> Any:
    """The model's parameters; with batch norm its variables ``{"params": ...,
    "batch_stats": ...}`` (`parts.has_state`), the running statistics traveling
    with the parameters through every algorithm (averaged, sent, kept per client)."""
    x = pixels_to_float(self.x[:1]).reshape((1,) + self.feature_shape)
    variables = self.model.init(key, x)
    if STATE in variables:
      return {"params": variables["params"], STATE: variables[STATE]}
    return variables["params"]

  def logits(self, params, x: jax.Array, rng: jax.Array | None = None,
             mask: jax.Array | None = None) -> jax.Array:
    """x: [batch, D] flattened examples (uint8 pixels are scaled to [0, 1] here).

    With ``rng`` the model runs in training mode: the batch is augmented and dropout
    is on, each with its own key. Evaluation passes no rng. ``mask`` ([batch] bool): the
    rows a batch-norm model's training-mode statistics count (`loss` passes w > 0).
    """
    if has_state(params):
      return self.forward(params, x, rng, mask)[0]
    x = pixels_to_float(x).reshape((-1,) + self.feature_shape)
    if rng is None:
      return self.model.apply({"params": params}, x)
    aug_key, dropout_key = jax.random.split(rng)
    if self.augmentation != "none":
      x = augment.augment(aug_key, x, self.augmentation, batchwise=self.augment_batchwise)
    if not _has_train_mode(self.model):
      return self.model.apply({"params": params}, x)
    return self.model.apply({"params": params}, x, train=True, rngs={"dropout": dropout_key})

  def forward(self, variables, x: jax.Array, rng: jax.Array | None = None,
              mask: jax.Array | None = None):
    """A batch-norm model's (logits, running statistics after the batch). In training mode
    (``rng``, see `logits`) each BatchNorm normalizes with the statistics of the batch's rows
    that ``mask`` marks and moves its running statistics toward them; in evaluation it
    normalizes with the running statistics (`batch_norm.readable`), which stay as they
    are."""
    x = pixels_to_float(x).reshape((-1,) + self.feature_shape)
    if rng is None:
      read = {**variables, STATE: batch_norm.readable(variables[STATE])}
      return self.model.apply(read, x), variables[STATE]
    aug_key, dropout_key = jax.random.split(rng)
    if self.augmentation != "none":
      x = augment.augment(aug_key, x, self.augmentation, batchwise=self.augment_batchwise)
    out, new = self.model.apply(variables, x, train=True, mask=mask,
                                rngs={"dropout": dropout_key}, mutable=[STATE])
    return out, new[STATE]

  def update_state(self, params, new_params, x, w, rng):
    """``new_params`` (a local step's result from ``params``) with the running statistics
    that the step's training-mode forward pass at ``params`` leaves (the same batch, rows
    weighted ``w``, and ``rng``: the gradient's own augmentation and dropout); kept as they
    were for a batch without weight. `core.local.train` calls it after each step of a
    batch-norm model (one more forward pass a step)."""
    _, stats = self.forward(params, x, rng, w > 0)
    seen = jnp.sum(w) > 0
    stats = jax.tree.map(lambda s, old: jnp.where(seen, s, old), stats, params[STATE])
    return {**new_params, STATE: stats}

  def pointwise_loss(self, outputs: jax.Array, y: jax.Array) -> jax.Array:
    if self.loss_type == "squared_error":
      return 0.5 * jnp.square(outputs[..., 0] - y)
    return optax.softmax_cross_entropy_with_integer_labels(outputs, y)

  def loss(self, params, x: jax.Array, y: jax.Array, w: jax.Array,
           rng: jax.Array | None = None) -> jax.Array:
    """The loss averaged with example weights w (0 for padding; 0 if all w are 0), plus
    the penalty (l2/2)||params||² when l2 > 0. ``rng``: training mode (see `logits`)."""
    outputs = (self.logits(params, x, rng, w > 0) if has_state(params)
               else self.logits(params, x, rng))
    per_example = self.pointwise_loss(outputs, y)
    loss = jnp.sum(w * per_example) / jnp.maximum(jnp.sum(w), 1e-12)
    return loss + self.penalty(params) if self.l2 else loss

  def sgd_kernel(self, x_dtype) -> Callable | None:
    """Local SGD on this task in one fused CPU kernel (`core.kernels.logreg_sgd`), for
    minibatches of ``x_dtype``: ``(params, x [S, B, D], y, w, steps, lr) -> (params, the
    sum of the steps' losses)``, or None where XLA's loop trains the model. Only logistic
    regression on raw features (no standardization, augmentation or l2) with cross
    entropy, on a CPU."""
    model = self.model
    if not (isinstance(model, LogReg) and model.normalize is None and not self.l2
            and self.loss_type == "cross_entropy" and self.augmentation == "none"
            and jax.default_backend() == "cpu"):
      return None
    name = logreg_sgd.target(x_dtype)
    if name is None:
      return None

    def train(params, x, y, w, steps, lr):
      (layer, weights), = params.items()
      kernel, bias, loss = logreg_sgd.train(weights["kernel"], weights.get("bias"), x, y, w,
                                            steps, lr, name=name)
      new = {"kernel": kernel} if bias is None else {"kernel": kernel, "bias": bias}
      return {layer: new}, loss

    return train

  def penalty(self, params) -> jax.Array:
    """(l2/2) * the sum of squares of all parameters (not a batch norm's statistics)."""
    leaves = jax.tree.leaves(params["params"] if has_state(params) else params)
    return 0.5 * self.l2 * sum(jnp.sum(jnp.square(p)) for p in leaves)

  def evaluate(self, params) -> dict:
    """Central evaluation.

    * ``test_accuracy``, ``test_loss``: on the test set; the plain loss, no l2 penalty.
    * ``train_loss``: f, the mean loss over the scored training examples plus the
      penalty (l2/2)||params||² (the AREA paper's eq. (8)).
    * with an ``optimum``: ``optimality_gap`` = train_loss - f* (train_loss is then over
      all training examples), and when θ* is known ``dist_sq`` = ||params - θ*||² and,
      if θ* != 0, ``rel_dist_sq`` = dist_sq / ||θ*||².
    * with a ``client_test`` (--holdout_fraction): `evaluate_clients`'s client_test_*.
    """
    test_loss, test_acc = _mean_loss_and_accuracy(self, params, *self.test_set())
    train_loss, _ = _mean_loss_and_accuracy(self, params, *self.train_eval_set())
    if self.l2:
      train_loss = train_loss + self.penalty(params)
    out = {"test_accuracy": test_acc, "test_loss": test_loss, "train_loss": train_loss}
    if self.eval_grad_norm:
      out["grad_norm_sq"] = self.grad_norm_sq(params)
    if self.optimum is not None:
      out.update(_optimum_metrics(self.optimum, params, train_loss))
    if self.client_test is not None:
      out.update(self.evaluate_clients(params))
    return out

  def evaluate_clients(self, params, prefix: str = "client_test",
                       per_client: bool = False) -> dict:
    """Accuracy over clients on their own test data (`client_test`): the mean over the
    clients that hold any (PREFIX_accuracy), its standard deviation (_std), and the mean
    of the worst and of the best 10% of them (_worst10, _best10; q-FFL's statistics).
    ``per_client``: ``params`` has a leading client axis, client i scored with its own row
    (a personalized model), or is a `Personal` (client i's model made from its row when
    it is scored). Clients are scored 64 at a time."""
    ct = self.client_test
    one = self._client_accuracy
    if isinstance(params, Personal):
      acc, has = jax.lax.map(lambda a: one(parts.merge(params.shared, a[0]), *a[1:]),
                             (params.rows, ct.rows, ct.valid), batch_size=64)
    elif per_client:
      acc, has = jax.lax.map(lambda a: one(*a), (params, ct.rows, ct.valid), batch_size=64)
    else:
      acc, has = jax.lax.map(lambda a: one(params, *a), (ct.rows, ct.valid), batch_size=64)
    return _over_clients(acc, has, ct.tail, prefix)

  def evaluate_finetuned(self, params, key: jax.Array, lr) -> dict:
    """`evaluate_clients`'s statistics, as finetuned_test_*, of ``params`` fine-tuned by
    every client (`finetune`): ``finetune.steps`` SGD steps at ``lr`` of `core.local.train`
    on its own training data, client i's minibatches drawn from ``fold_in(key, i)`` as local
    training draws them from a client's key (``key``: the evaluation's "finetune" key, so
    the training's draws are untouched). Clients fine-tune and are scored 64 at a time,
    none of the tuned models kept."""
    ft, ct = self.finetune, self.client_test
    spec = local.LocalSpec(ft.steps, ft.batch_size, ft.sampling)
    update = self.update_state if has_state(params) else None

    def one(i, rows, valid):
      tuned, _ = local.train(params, jax.random.fold_in(key, i), self.counts[i], ft.steps,
                             fetch=self.client_data(i), loss_fn=self.loss, opt=optax.sgd(lr),
                             spec=spec, max_count=self.max_count, update_state=update)
      return self._client_accuracy(tuned, rows, valid)

    clients = jnp.arange(self.num_clients, dtype=jnp.int32)
    acc, has = jax.lax.map(lambda a: one(*a), (clients, ct.rows, ct.valid), batch_size=64)
    return _over_clients(acc, has, ct.tail, "finetuned_test")

  def _client_accuracy(self, params, rows, valid):
    """(accuracy, has any) of one client's test rows ``rows`` (``valid`` the real ones)."""
    ct = self.client_test
    correct = jnp.argmax(self.logits(params, ct.x[rows]), -1) == ct.y[rows]
    n = jnp.sum(valid)
    return jnp.sum(correct & valid) / jnp.maximum(n, 1), n > 0

  def grad_norm_sq(self, params) -> jax.Array:
    """||grad f(params)||^2, f the mean loss over the scored training examples (the
    Fed-EF paper's full-batch gradient norm; all of them with --train_eval_examples=0)
    plus the l2 penalty. A batch-norm model's running statistics are no parameters: the
    gradient is its weights'."""
    x, y, rows, count = self.train_eval_set()
    n = (x.shape[0] if rows is None else rows.shape[0]) if count is None else count
    chunks, read = _chunked(self, x, y, rows, count)
    weights, whole = params, lambda w: w
    if has_state(params):
      weights, whole = params["params"], lambda w: {**params, "params": w}

    def chunk_sum(p, batch):
      xb, yb, wb = read(batch)
      return jnp.sum(wb * self.pointwise_loss(self.logits(whole(p), xb), yb))

    def add(total, batch):
      g = jax.grad(chunk_sum)(weights, batch)
      return jax.tree.map(jnp.add, total, g), None

    zero = jax.tree.map(jnp.zeros_like, weights)
    total, _ = jax.lax.scan(add, zero, chunks)
    grad = jax.tree.map(lambda g: _divide(g, n), total)
    if self.l2:
      grad = jax.tree.map(lambda g, p: g + self.l2 * p, grad, weights)
    return sum(jnp.sum(jnp.square(g)) for g in jax.tree.leaves(grad))


def with_optimum(task: Task, optimum: Optimum | None) -> Task:
  """``task`` knowing its optimum; its train_loss is then scored on all training
  examples, whatever ``train_eval_examples`` was, since the gap needs f itself."""
  if optimum is None:
    return dataclasses.replace(task, optimum=None)
  return dataclasses.replace(task, optimum=optimum, train_eval_x=task.x, train_eval_y=task.y)


def _has_train_mode(model: nn.Module) -> bool:
  """Whether the model's __call__ takes ``train`` (dropout); plain flax layers do not."""
  return "train" in inspect.signature(type(model).__call__).parameters
