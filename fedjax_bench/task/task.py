"""A task binds a model to federated data: loss, parameter init and central evaluation."""

import dataclasses
import inspect
from typing import Any, Callable, NamedTuple

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
    clients that hold any, its standard deviation, and the mean of the worst and of the
    best 10% of them (q-FFL's statistics). ``per_client``: ``params`` has a leading
    client axis, client i scored with its own row (a personalized model)."""
    ct = self.client_test

    def one(p, rows, valid):
      correct = jnp.argmax(self.logits(p, ct.x[rows]), -1) == ct.y[rows]
      n = jnp.sum(valid)
      return jnp.sum(correct & valid) / jnp.maximum(n, 1), n > 0

    if per_client:
      acc, has = jax.lax.map(lambda a: one(*a), (params, ct.rows, ct.valid), batch_size=64)
    else:
      acc, has = jax.lax.map(lambda a: one(params, *a), (ct.rows, ct.valid), batch_size=64)
    return _over_clients(acc, has, ct.tail, prefix)

  def grad_norm_sq(self, params) -> jax.Array:
    """||grad f(params)||^2, f the mean loss over the scored training examples (the
    Fed-EF paper's full-batch gradient norm; all of them with --train_eval_examples=0)
    plus the l2 penalty."""
    x, y, rows, count = self.train_eval_set()
    n = (x.shape[0] if rows is None else rows.shape[0]) if count is None else count
    chunks, read = _chunked(self, x, y, rows, count)

    def chunk_sum(p, batch):
      xb, yb, wb = read(batch)
      return jnp.sum(wb * self.pointwise_loss(self.logits(p, xb), yb))

    def add(total, batch):
      g = jax.grad(chunk_sum)(params, batch)
      return jax.tree.map(jnp.add, total, g), None

    zero = jax.tree.map(jnp.zeros_like, params)
    total, _ = jax.lax.scan(add, zero, chunks)
    grad = jax.tree.map(lambda g: _divide(g, n), total)
    if self.l2:
      grad = jax.tree.map(lambda g, p: g + self.l2 * p, grad, params)
    return sum(jnp.sum(jnp.square(g)) for g in jax.tree.leaves(grad))


def _over_clients(acc, has, tail: int, prefix: str) -> dict:
  n = jnp.maximum(jnp.sum(has), 1)
  mean = jnp.sum(jnp.where(has, acc, 0.0)) / n
  std = jnp.sqrt(jnp.sum(jnp.where(has, jnp.square(acc - mean), 0.0)) / n)
  ranked = jnp.sort(jnp.where(has, acc, jnp.inf))
  worst = jnp.mean(ranked[:tail])
  best = jnp.mean(jnp.sort(jnp.where(has, acc, -jnp.inf))[-tail:])
  return {prefix + "_accuracy": mean, prefix + "_accuracy_std": std,
          prefix + "_accuracy_worst10": worst, prefix + "_accuracy_best10": best}


def client_test_table(data) -> ClientTest:
  """`ClientTest` of held-out data (a `FederatedData`, data/holdout.py)."""
  counts = np.asarray(data.counts)
  width = max(int(counts.max(initial=0)), 1)
  cols = np.arange(width)
  valid = cols[None, :] < counts[:, None]
  rows = np.where(valid, np.asarray(data.offsets)[:, None] + cols[None, :], 0)
  flat = lambda a: jnp.asarray(a.reshape(a.shape[0], -1))
  return ClientTest(flat(data.x), jnp.asarray(data.y), jnp.asarray(rows, jnp.int32),
                    jnp.asarray(valid), max(int(np.ceil(0.1 * np.sum(counts > 0))), 1))


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


def _chunked(task: Task, x, y, rows=None, count=None):
  """(chunks, read): the examples ``x[rows]`` (x itself when rows is None) zero-padded to
  whole chunks of ``eval_chunk``, reshaped [chunks, chunk, ...], and ``read(chunk) ->
  (x, y, weights)``; padding rows weigh 0, and so do rows from ``count`` on. With
  ``rows`` each chunk is gathered when it is read, so the set is never copied whole."""
  n = x.shape[0] if rows is None else rows.shape[0]
  chunk = min(task.eval_chunk, n)
  pad = (-n) % chunk
  real = jnp.ones(n) if count is None else (jnp.arange(n) < count).astype(jnp.float32)
  w = jnp.concatenate([real, jnp.zeros(pad)])
  shape = lambda a: a.reshape((-1, chunk) + a.shape[1:])
  if rows is not None:
    rp = jnp.concatenate([rows, jnp.zeros(pad, rows.dtype)])
    return (shape(rp), shape(w)), lambda b: (x[b[0]], y[b[0]], b[1])
  xp = jnp.concatenate([x, jnp.zeros((pad,) + x.shape[1:], x.dtype)])
  yp = jnp.concatenate([y, jnp.zeros(pad, y.dtype)])
  return (shape(xp), shape(yp), shape(w)), lambda b: b


def _mean_loss_and_accuracy(task: Task, params, x, y, rows=None, count=None):
  """Scores ``x[rows]`` (x when rows is None) in chunks of ``eval_chunk`` examples to
  bound memory; only the first ``count`` rows (default: all) count."""
  n = (x.shape[0] if rows is None else rows.shape[0]) if count is None else count
  chunks, read = _chunked(task, x, y, rows, count)

  def one(batch):
    xb, yb, wb = read(batch)
    outputs = task.logits(params, xb)
    correct = (jnp.argmax(outputs, -1) == yb if task.loss_type == "cross_entropy"
               else jnp.full(yb.shape, jnp.nan))
    return jnp.sum(wb * task.pointwise_loss(outputs, yb)), jnp.sum(wb * correct)

  loss_sum, correct = jax.lax.map(one, chunks)
  return _divide(jnp.sum(loss_sum), n), _divide(jnp.sum(correct), n)


def _divide(total, n):
  """total / n. XLA compiles a division by a constant n as a multiplication by its
  float32 reciprocal, so a run's traced count (a view's) multiplies by 1/n too: the
  same numbers as a task built for that run alone."""
  if isinstance(n, int):
    return total / n
  return total * (1.0 / jnp.asarray(n, jnp.float32))


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
  ``optimum``: see `with_optimum` (task/optimum.py computes one).
  With priority clients (``dataset.priority``), train_loss is scored on their examples.
  """
  options = _task_options(dataset, loss_type=loss_type, augment=augment,
                          augment_batchwise=augment_batchwise, eval_grad_norm=eval_grad_norm,
                          l2=l2)
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
      max_count=max(int(t.counts.max()), 1), **options,
      priority=None if dataset.priority is None else jnp.asarray(dataset.priority),
      aligned=None if dataset.aligned is None else jnp.asarray(dataset.aligned),
      num_priority=0 if dataset.priority is None else int(np.sum(dataset.priority)),
      client_test=None if dataset.client_test is None else client_test_table(dataset.client_test))
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


def make_per_seed_task(per_seed, model: nn.Module, *, train_eval_examples: int = 10000,
                       eval_seed: int = 0, **kwargs) -> tuple[Task, TaskView]:
  """One task over the pooled examples of ``per_seed`` (`data.per_seed.PerSeed`) and the
  views of its seeds, stacked (seed axis first, NumPy): seed k's run scores what
  `make_task` on seed k's dataset would score (the same train_loss subset, drawn with
  ``eval_seed`` over its own rows, and its test set). The task itself is seed 0's view
  (for shape checks), with static bounds (``max_count``) over all seeds. ``kwargs``:
  `make_task`'s."""
  pool = per_seed.pool
  n = per_seed.num_clients
  roles = per_seed.layouts[0].priority is not None
  if len({-1 if layout.priority is None else int(np.sum(layout.priority))
          for layout in per_seed.layouts}) > 1:
    raise ValueError("every seed needs as many priority clients")
  views = []
  for layout in per_seed.layouts:
    idx = np.arange(len(layout.index))
    if roles:  # the union of the priority clients' examples, as make_task
      idx = np.concatenate([np.arange(o, o + c) for o, c, p in
                            zip(layout.offsets, layout.counts, layout.priority) if p])
    if 0 < train_eval_examples < len(idx):
      idx = np.sort(np.random.default_rng(eval_seed).choice(
          idx, train_eval_examples, replace=False))
    owner = np.repeat(np.arange(n, dtype=np.int32), layout.counts)
    test = (None, None) if layout.test_index is None else (layout.test_index,
                                                           len(layout.test_index))
    views.append(TaskView(layout.index, layout.offsets, layout.counts, owner,
                          layout.index[idx], len(idx), *test))
  stacked = TaskView(*(None if field[0] is None else _stack_padded(field, pad)
                       for field, pad in zip(zip(*views), (0, 0, 0, n, 0, 0, 0, 0))))
  if roles:
    stacked = stacked._replace(
        priority=np.stack([layout.priority for layout in per_seed.layouts]).astype(bool),
        aligned=np.stack([layout.aligned for layout in per_seed.layouts]).astype(bool),
        local_client=np.array([layout.local_client for layout in per_seed.layouts], np.int32))
  flat = lambda a: jnp.asarray(a.reshape(a.shape[0], -1))
  x, y = flat(pool.train.x), jnp.asarray(pool.train.y)
  first = per_seed.layouts[0]
  task = Task(
      model=model, x=x, y=y, offsets=jnp.asarray(first.offsets), counts=jnp.asarray(first.counts),
      test_x=flat(pool.test_x), test_y=jnp.asarray(pool.test_y),
      train_eval_x=x, train_eval_y=y,  # unused: every run reads its view's rows
      num_classes=pool.num_classes, feature_shape=tuple(pool.train.x.shape[1:]),
      max_count=max(max(int(layout.counts.max()) for layout in per_seed.layouts), 1),
      num_priority=int(np.sum(first.priority)) if roles else 0,
      **_task_options(pool, **kwargs))
  return task.for_run(jax.tree.map(lambda a: jnp.asarray(a[0]), stacked)), stacked


def _task_options(dataset: Dataset, *, loss_type: str = "cross_entropy", augment: bool = True,
                  augment_batchwise: bool = False, eval_grad_norm: bool = False,
                  l2: float = 0.0) -> dict:
  if l2 < 0:
    raise ValueError(f"l2 must be >= 0, got {l2}")
  return dict(loss_type=loss_type,
              augmentation=getattr(dataset, "augmentation", "none") if augment else "none",
              augment_batchwise=augment_batchwise, eval_grad_norm=eval_grad_norm, l2=float(l2))


def _stack_padded(values, pad) -> np.ndarray:
  """Seed-wise values stacked on a new first axis, 1-D ones padded with ``pad`` to the
  longest; int32."""
  arrays = [np.asarray(v) for v in values]
  if arrays[0].ndim == 0:
    return np.stack(arrays).astype(np.int32)
  width = max(a.shape[0] for a in arrays)
  return np.stack([np.pad(a, (0, width - a.shape[0]), constant_values=pad)
                   for a in arrays]).astype(np.int32)
