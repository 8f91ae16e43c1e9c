"""Generated data of MNIST's and Shakespeare's shapes and the tasks shared by the speed
benchmarks (no flags here)."""

import numpy as np

from fedjax_bench import models
from fedjax_bench.task import task as task_lib
from fedjax_bench.task.build import make_task
from fedjax_bench.data import text
from fedjax_bench.data.federated import Dataset, FederatedData
from fedjax_bench.models.settings import ModelSettings

# Shakespeare-like client sizes: a log-normal fitted to the training samples per role of
# the suite's Shakespeare (data/shakespeare.py: 1,428 roles, quartiles 167, 720 and 2,886,
# largest 55,161), log-mean 6.48 and log-std 1.93, clipped to [MIN, MAX]. The floor keeps
# every client at one full batch of LEAF's 10 or more.
SHAKESPEARE_LOG_MEAN, SHAKESPEARE_LOG_STD = 6.48, 1.93
SHAKESPEARE_MIN, SHAKESPEARE_MAX = 10, 55_161


def mnist_shaped(seed: int, num_clients: int = 100, examples_per_client: int = 600,
                 test_examples: int = 1000) -> Dataset:
  """28x28x1 uint8 random pixels (as MNIST is stored), labels 0..9, equal client sizes."""
  rng = np.random.default_rng(seed)
  n = num_clients * examples_per_client
  x = rng.integers(0, 256, (n, 28, 28, 1), dtype=np.uint8)
  y = rng.integers(0, 10, n).astype(np.int32)
  parts = np.split(np.arange(n), num_clients)
  return Dataset(
      name="mnist_shaped", train=FederatedData.from_partition(x, y, parts),
      test_x=rng.integers(0, 256, (test_examples, 28, 28, 1), dtype=np.uint8),
      test_y=rng.integers(0, 10, test_examples).astype(np.int32),
      num_classes=10, feature_shape=(28, 28, 1), is_image=True)


def task(dataset: Dataset, model_name: str, train_eval_examples: int = 1000) -> task_lib.Task:
  model = models.make(model_name, num_classes=10, is_image=True, mlp_hidden=(200, 200))
  return make_task(dataset, model, train_eval_examples=train_eval_examples)


def shakespeare_sizes(seed: int, num_clients: int) -> np.ndarray:
  """[num_clients] int64 client sizes drawn like Shakespeare's roles (see above).
  benchmarks/speed/fedjax_workloads.py draws the same sizes with the same NumPy calls."""
  rng = np.random.default_rng([seed, 7])
  sizes = np.exp(rng.normal(SHAKESPEARE_LOG_MEAN, SHAKESPEARE_LOG_STD, num_clients))
  return np.clip(np.round(sizes), SHAKESPEARE_MIN, SHAKESPEARE_MAX).astype(np.int64)


def shakespeare_shaped(seed: int, num_clients: int = 10, test_examples: int = 1000) -> Dataset:
  """Next-character samples of Shakespeare's shapes (data/shakespeare.py, data/text.py):
  int8 windows of text.SEQ_LEN (80) ids, vocabulary text.VOCAB_SIZE (82, PAD 0), labels
  int32. Ids uniform in 1..81 (no PAD), labels in 1..80 (no PAD or OOV); client sizes
  from `shakespeare_sizes`. Random ids: a step's cost does not depend on the text."""
  sizes = shakespeare_sizes(seed, num_clients)
  rng = np.random.default_rng(seed)
  n = int(sizes.sum())

  def examples(k):
    x = rng.integers(1, text.VOCAB_SIZE, (k, text.SEQ_LEN), dtype=np.int8)
    return x, rng.integers(1, text.OOV, k).astype(np.int32)

  x, y = examples(n)
  test_x, test_y = examples(test_examples)
  parts = np.split(np.arange(n), np.cumsum(sizes)[:-1])
  return Dataset(
      name="shakespeare_shaped", train=FederatedData.from_partition(x, y, parts),
      test_x=test_x, test_y=test_y, num_classes=text.VOCAB_SIZE,
      feature_shape=(text.SEQ_LEN,), is_image=False, vocab_size=text.VOCAB_SIZE)


def lstm_task(dataset: Dataset, lstm_hidden: int,
              train_eval_examples: int = 1000) -> task_lib.Task:
  """The char LSTM (models/char_lstm.py: embedding 8, two LSTM layers of ``lstm_hidden``,
  dense to the vocabulary at the last position) on token data."""
  settings = ModelSettings(model="char_lstm", lstm_hidden=lstm_hidden)
  model = models.make("char_lstm", num_classes=dataset.num_classes, is_image=False,
                      dataset=dataset, settings=settings)
  return make_task(dataset, model, train_eval_examples=train_eval_examples)
