"""Generated MNIST-shaped data and tasks shared by the speed benchmarks (no flags here)."""

import numpy as np

from fedjax_bench import models
from fedjax_bench.core import task as task_lib
from fedjax_bench.data.federated import Dataset, FederatedData


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
  return task_lib.make_task(dataset, model, train_eval_examples=train_eval_examples)
