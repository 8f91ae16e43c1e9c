"""Models: output shapes and parameter counts, and a CNN that trains on image data."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_bench import models
from fedjax_bench.algorithms import fedavg
from fedjax_bench.core.task import make_task
from fedjax_bench.data.federated import Dataset, FederatedData
from fedjax_bench.errors import UsageError
from fedjax_bench.sim import participation, world as world_lib


@pytest.mark.parametrize("name,params", [
    ("logreg", 784 * 10 + 10),
    ("mlp", 784 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10),   # 199,210
    # conv 5x5x1x32, conv 5x5x32x64, dense 7*7*64 -> 512, dense 512 -> 10
    ("cnn", 5 * 5 * 32 + 32 + 5 * 5 * 32 * 64 + 64 + 3136 * 512 + 512 + 512 * 10 + 10),
])
def test_shapes_and_parameter_counts(name, params):
  model = models.make(name, num_classes=10, is_image=True)
  variables = model.init(jax.random.PRNGKey(0), jnp.zeros((2, 28, 28, 1)))
  assert sum(a.size for a in jax.tree.leaves(variables)) == params
  assert model.apply(variables, jnp.zeros((3, 28, 28, 1))).shape == (3, 10)


def test_unknown_model_and_cnn_without_images():
  with pytest.raises(UsageError, match="logreg, mlp, cnn"):
    models.make("transformer", num_classes=10, is_image=True)
  with pytest.raises(UsageError, match="image data"):
    models.make("cnn", num_classes=10, is_image=False)


def test_cnn_fedavg_learns_bright_from_dark_images():
  rng = np.random.default_rng(0)
  y = rng.integers(0, 2, 160)
  x = (rng.uniform(size=(160, 28, 28, 1)) * 0.5 + 0.4 * y[:, None, None, None]).astype(np.float32)
  parts = np.array_split(np.arange(160), 4)
  ds = Dataset("bright", FederatedData.from_partition(x, y, parts), x[:40], y[:40].astype(np.int32),
               2, (28, 28, 1), True)
  task = make_task(ds, models.make("cnn", num_classes=2, is_image=True))
  world = world_lib.make(participation.full(4), np.full(4, 3))
  alg = fedavg.build(task, world, dict(client_lr=0.05, batch_size=8))
  server, clients = alg.init(jax.random.PRNGKey(0))
  step = jax.jit(alg.round)
  before = task.evaluate(server.params)
  for t in range(10):
    server, clients, _ = step(server, clients, jax.random.PRNGKey(t))
  after = task.evaluate(server.params)
  assert float(after["test_accuracy"]) >= 0.9
  assert float(after["train_loss"]) < 0.5 * float(before["train_loss"])
