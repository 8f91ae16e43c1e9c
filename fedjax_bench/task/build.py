"""Tasks built from data: from a dataset (`make_task`), from clients generated on demand
(`make_stream_task`), and one over the pooled data of several seeds with each seed's view
(`make_per_seed_task`)."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

from fedjax_bench.data.federated import Dataset
from fedjax_bench.task.task import ClientTest, Optimum, Task, TaskView, with_optimum


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
