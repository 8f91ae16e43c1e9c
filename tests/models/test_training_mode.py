"""Training mode: augmentation and dropout run inside local steps only, from their own keys."""

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_bench import models
from fedjax_bench.algorithms import fedawe
from fedjax_bench.task.build import make_task
from fedjax_bench.data.federated import Dataset, FederatedData
from fedjax_bench.sim import participation, world as world_lib


def _image_task(model="cnn_cinic10", augmentation="crop_flip", num_clients=3, per_client=6,
                augment=True):
  rng = np.random.default_rng(0)
  n = num_clients * per_client
  x = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
  y = rng.integers(0, 10, n)
  parts = np.split(np.arange(n), num_clients)
  ds = Dataset("fake", FederatedData.from_partition(x, y, parts), x[:8], y[:8].astype(np.int32),
               10, (32, 32, 3), True, normalize_mean=(0.5, 0.5, 0.5),
               normalize_std=(0.25, 0.25, 0.25), augmentation=augmentation)
  model = models.make(model, num_classes=10, is_image=True, normalize=ds.normalize)
  return make_task(ds, model, train_eval_examples=0, augment=augment)


def test_training_mode_is_random_and_evaluation_is_not():
  task = _image_task()
  params = task.init_params(jax.random.PRNGKey(0))
  x, y, w = task.x[:6], task.y[:6], jnp.ones(6)
  eval_a, eval_b = task.loss(params, x, y, w), task.loss(params, x, y, w)
  assert eval_a == eval_b
  train_a = task.loss(params, x, y, w, jax.random.PRNGKey(1))
  train_b = task.loss(params, x, y, w, jax.random.PRNGKey(2))
  assert train_a != train_b and train_a != eval_a
  assert task.loss(params, x, y, w, jax.random.PRNGKey(1)) == train_a


def test_augmentation_alone_changes_the_training_loss():
  task = _image_task(model="cnn_svhn", augmentation="crop")  # no dropout in this model
  params = task.init_params(jax.random.PRNGKey(0))
  x, y, w = task.x[:6], task.y[:6], jnp.ones(6)
  assert task.loss(params, x, y, w, jax.random.PRNGKey(1)) != task.loss(params, x, y, w)
  plain = _image_task(model="cnn_svhn", augmentation="crop", augment=False)
  assert plain.loss(params, x, y, w, jax.random.PRNGKey(1)) == plain.loss(params, x, y, w)


def test_a_fedawe_round_trains_a_dropout_cnn_with_augmentation():
  task = _image_task()
  world = world_lib.make(participation.full(3), np.full(3, 2))
  alg = fedawe.build(task, world, dict(client_lr=0.05, batch_size=4, client_width=0))
  server, clients = alg.init(jax.random.PRNGKey(0))
  new_server, new_clients, metrics = jax.jit(alg.round)(server, clients, jax.random.PRNGKey(1))
  moved = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), new_server.params,
                       server.params)
  assert all(np.isfinite(v) and v > 0 for v in jax.tree.leaves(moved))
  assert np.isfinite(float(metrics["client_loss"]))
  ev = task.evaluate(alg.eval_params(new_server, new_clients))
  assert 0.0 <= float(ev["test_accuracy"]) <= 1.0
