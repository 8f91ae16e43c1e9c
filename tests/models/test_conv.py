"""models.conv's 2x2 max pooling: flax's ``nn.max_pool(x, (2, 2), strides=(2, 2))`` bit for
bit, value and gradient (ties, signed zeros, NaN and infinities, odd sizes, inside a scan and
vmapped), and on CPU without the select-and-scatter that made the CNNs' local steps slow.
(The convolution's gradient: tests/models/test_models.py.)"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen as nn

from fedjax_bench import models
from fedjax_bench.algorithms import fedavg
from fedjax_bench.data.federated import Dataset, FederatedData
from fedjax_bench.models import cnn
from fedjax_bench.models.conv import max_pool
from fedjax_bench.sim import participation, world as world_lib
from fedjax_bench.task.build import make_task


def flax_pool(x):
  return nn.max_pool(x, (2, 2), strides=(2, 2))


def _bits(tree):
  return [np.asarray(leaf).tobytes() for leaf in jax.tree.leaves(tree)]


def _value_and_vjp(pool, x, g):
  out, vjp = jax.vjp(pool, x)
  return out, vjp(g)[0]


@pytest.mark.parametrize("shape", [(3, 8, 8, 4), (3, 11, 11, 5), (2, 13, 6, 3)])
def test_max_pool_is_flax_max_pool_bit_for_bit(shape):
  rng = np.random.default_rng(0)
  # Few distinct values: most windows hold ties, which the gradient breaks like flax's
  # (toward the window's first maximum); and the special values.
  x = jnp.asarray(rng.integers(-2, 3, shape), jnp.float32)
  x = x.at[0, 0, 0, 0].set(-0.0).at[0, 0, 1, 0].set(0.0)
  x = x.at[1, 2, 2, 1].set(jnp.nan).at[1, 0, 0, 2].set(jnp.inf).at[1, 0, 1, 2].set(-jnp.inf)
  out_shape = (shape[0], shape[1] // 2, shape[2] // 2, shape[3])
  g = jnp.asarray(rng.normal(size=out_shape), jnp.float32)
  g = g.at[0, 0, 0, 0].set(-0.0).at[0, 0, 0, 1].set(jnp.nan)  # scattered, -0.0 lands as 0.0
  want = _value_and_vjp(flax_pool, x, g)
  assert np.count_nonzero(np.asarray(want[1]) == 0) > 0  # the ties were there to break
  assert _bits(_value_and_vjp(max_pool, x, g)) == _bits(want)
  assert _bits(jax.jit(_value_and_vjp, static_argnums=0)(max_pool, x, g)) == _bits(
      jax.jit(_value_and_vjp, static_argnums=0)(flax_pool, x, g))
  # Vmapped over clients (a client width above 1) and as a step of a scan (local steps).
  xs, gs = jnp.stack([x, -x]), jnp.stack([g, 2 * g])
  vmapped = lambda pool: jax.jit(jax.vmap(lambda x, g: _value_and_vjp(pool, x, g)))(xs, gs)
  assert _bits(vmapped(max_pool)) == _bits(vmapped(flax_pool))

  w = jnp.asarray(rng.normal(size=out_shape), jnp.float32)

  def scanned(pool):  # the windows' maxima move from step to step
    def step(x, _):
      return x - jax.grad(lambda x: jnp.sum(w * pool(x)))(x), None
    return jax.jit(lambda x: jax.lax.scan(step, x, None, length=3)[0])(x)
  assert _bits(scanned(max_pool)) == _bits(scanned(flax_pool))


def _cnn_grads(monkeypatch, name: str, pool, images, labels):
  monkeypatch.setattr(cnn, "max_pool", pool)
  model = models.make(name, num_classes=10, is_image=True)
  params = model.init(jax.random.PRNGKey(0), images)["params"]
  # Positive biases: the blank background of the images gives equal activations, so the
  # pooling windows there tie.
  params = {k: {**v, "bias": v["bias"] + 0.05} if k.startswith("Conv") else v
            for k, v in params.items()}

  def loss(p):
    logits = model.apply({"params": p}, images)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

  return jax.jit(jax.value_and_grad(loss))(params)


@pytest.mark.parametrize("name,shape", [("fedavg_cnn", (28, 28, 1)),
                                        ("fedsoftmax_cnn", (28, 28, 1)),
                                        ("fedawe_cnn_svhn", (32, 32, 3))])
def test_paper_cnn_gradients_are_flax_pooling_ones_on_images_with_blank_regions(
    monkeypatch, name, shape):
  """MNIST-like inputs (a blank background around a blob) tie many pooling windows."""
  rng = np.random.default_rng(1)
  images = np.zeros((4, *shape), np.float32)
  images[:, 8:20, 10:18] = rng.uniform(size=(4, 12, 8, shape[-1]))
  images, labels = jnp.asarray(images), jnp.arange(4)
  want = _cnn_grads(monkeypatch, name, flax_pool, images, labels)
  got = _cnn_grads(monkeypatch, name, max_pool, images, labels)
  assert _bits(got) == _bits(want)


def _fedavg_rounds(monkeypatch, name: str, pool, width: int):
  """Two FedAvg rounds, 3 of 4 clients a round, 2 local steps of batch 4, on images with
  a blank background."""
  monkeypatch.setattr(cnn, "max_pool", pool)
  rng = np.random.default_rng(0)
  x = np.zeros((32, 28, 28, 1), np.uint8)
  x[:, 8:20, 10:18] = rng.integers(0, 256, (32, 12, 8, 1))
  y = rng.integers(0, 10, 32)
  data = Dataset("blank", FederatedData.from_partition(x, y, np.split(np.arange(32), 4)),
                 x[:8], y[:8].astype(np.int32), 10, (28, 28, 1), True)
  task = make_task(data, models.make(name, num_classes=10, is_image=True),
                   train_eval_examples=0)
  world = world_lib.make(participation.uniform(4, 3), np.full(4, 2))
  alg = fedavg.build(task, world, dict(client_lr=0.1, batch_size=4, client_width=width))
  server, clients = alg.init(jax.random.PRNGKey(0))
  round_fn = jax.jit(alg.round)
  for r in range(2):
    server, clients, _ = round_fn(server, clients, jax.random.PRNGKey(r + 1))
  return server.params


def test_fedavg_rounds_of_the_cnn_are_flax_pooling_ones_bit_for_bit(monkeypatch):
  """Local training (one client at a time, CPU's default) in FedAvg's rounds: the pooling
  changes no bit of the model."""
  want = _fedavg_rounds(monkeypatch, "fedavg_cnn", flax_pool, -1)
  assert _bits(_fedavg_rounds(monkeypatch, "fedavg_cnn", max_pool, -1)) == _bits(want)


def test_on_cpu_the_cnn_step_has_no_select_and_scatter(monkeypatch):
  """The gradient of the FedAvg paper's CNN: flax's pooling differentiates into
  select-and-scatters, which XLA:CPU compiles into an argmax reduce-window and a scatter
  (a quarter of a local step on CPU); ours into selects."""
  assert jax.default_backend() == "cpu"
  x = jnp.zeros((2, 28, 28, 1))

  def lowered():
    model = models.make("fedavg_cnn", num_classes=10, is_image=True)
    params = model.init(jax.random.PRNGKey(0), x)
    return jax.jit(jax.grad(lambda p: jnp.sum(model.apply(p, x) ** 2))).lower(params)

  def slow_ops(lowered):
    compiled = lowered.compile().as_text()
    return ("select_and_scatter" in lowered.as_text(), " scatter(" in compiled,
            " reduce-window(" in compiled)
  assert slow_ops(lowered()) == (False, False, False)
  monkeypatch.setattr(cnn, "max_pool", flax_pool)  # the check can fail
  assert slow_ops(lowered()) == (True, True, True)
