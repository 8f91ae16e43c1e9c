"""Models: output shapes and parameter counts, and a CNN that trains on image data."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_bench import models
from fedjax_bench.algorithms import fedavg
from fedjax_bench.task.build import make_task
from fedjax_bench.data.federated import Dataset, FederatedData
from fedjax_bench.errors import UsageError
from fedjax_bench.sim import participation
from fedjax_bench.sim import world as world_lib


@pytest.mark.parametrize("name,params", [
    ("logreg", 784 * 10 + 10),
    ("mlp", 784 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10),   # 199,210
    # conv 5x5x1x32, conv 5x5x32x64, dense 7*7*64 -> 512, dense 512 -> 10
    ("fedavg_cnn", 5 * 5 * 32 + 32 + 5 * 5 * 32 * 64 + 64 + 3136 * 512 + 512 + 512 * 10 + 10),
    # Fed-EF's CNN (§5.2; its sizes are ours, docs/papers/fedef.md): 3x3 VALID convs
    # 1->32->64, pool, dense 12*12*64 -> 128 -> 10
    ("fedef_cnn", 1_199_882),
    ("fedsoftmax_cnn", 34_826), ("fedsoftmax_cnn_literal", 2_596_426),
])
def test_shapes_and_parameter_counts(name, params):
  model = models.make(name, num_classes=10, is_image=True)
  variables = model.init(jax.random.PRNGKey(0), jnp.zeros((2, 28, 28, 1)))
  assert sum(a.size for a in jax.tree.leaves(variables)) == params
  assert model.apply(variables, jnp.zeros((3, 28, 28, 1))).shape == (3, 10)


def test_unknown_model_and_cnn_without_images():
  with pytest.raises(UsageError, match="logreg, mlp, linear, fedavg_cnn"):
    models.make("transformer", num_classes=10, is_image=True)
  for name in ("fedavg_cnn", "cnn"):  # and by its alias
    with pytest.raises(UsageError, match=f"--model={name} needs image data"):
      models.make(name, num_classes=10, is_image=False)


def test_aliases_are_valid_model_names_after_the_names():
  names = [m for m in models.MODELS if models.MODELS_BY_NAME[m].name == m]
  assert list(models.MODELS[:len(names)]) == names
  assert {a for n in names for a in models.MODELS_BY_NAME[n].aliases} == set(
      models.MODELS[len(names):])
  with pytest.raises(ValueError, match="'cnn' is registered twice"):
    models.register("other_cnn", models.MODELS_BY_NAME["cnn"].build, aliases=("cnn",))
  assert "other_cnn" not in models.MODELS_BY_NAME


def test_cnn_fedavg_learns_bright_from_dark_images():
  rng = np.random.default_rng(0)
  y = rng.integers(0, 2, 160)
  x = (rng.uniform(size=(160, 28, 28, 1)) * 0.5 + 0.4 * y[:, None, None, None]).astype(np.float32)
  parts = np.array_split(np.arange(160), 4)
  ds = Dataset("bright", FederatedData.from_partition(x, y, parts), x[:40], y[:40].astype(np.int32),
               2, (28, 28, 1), True)
  task = make_task(ds, models.make("fedavg_cnn", num_classes=2, is_image=True))
  world = world_lib.make(participation.full(4), np.full(4, 3))
  alg = fedavg.build(task, world, {"client_lr": 0.05, "batch_size": 8})
  server, clients = alg.init(jax.random.PRNGKey(0))
  step = jax.jit(alg.round)
  before = task.evaluate(server.params)
  for t in range(20):
    server, clients, _ = step(server, clients, jax.random.PRNGKey(t))
  after = task.evaluate(server.params)
  assert float(after["test_accuracy"]) >= 0.9
  assert float(after["train_loss"]) < 0.5 * float(before["train_loss"])


# --- the FedAWE CNNs (docs/papers/fedawe.md) ----------------------------------------

CIFAR_NORM = ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010))


def _init_cnn(name, seed=0, normalize=None):
  model = models.make(name, num_classes=10, is_image=True, normalize=normalize)
  return model, model.init(jax.random.PRNGKey(seed), jnp.zeros((1, 32, 32, 3)))["params"]


@pytest.mark.parametrize("name,params", [
    ("fedawe_cnn_svhn", 273_706), ("fedawe_cnn_cifar10", 551_786),
    ("fedawe_cnn_cinic10", 1_193_130)])
def test_fedawe_cnn_parameter_counts_and_outputs(name, params):
  model, p = _init_cnn(name)
  assert name in models.MODELS
  assert sum(a.size for a in jax.tree.leaves(p)) == params
  assert model.apply({"params": p}, jnp.zeros((5, 32, 32, 3))).shape == (5, 10)
  with pytest.raises(UsageError, match="image data"):
    models.make(name, num_classes=10, is_image=False)


def test_fedawe_cnn_init_statistics():
  _, p = _init_cnn("fedawe_cnn_cinic10", seed=3)
  for layer, fan_in in (("Conv_0", 27), ("Conv_1", 288)):
    assert p[layer]["kernel"].shape[:3] == (3, 3, p[layer]["kernel"].shape[2])
    std = float(jnp.std(p[layer]["kernel"]))
    assert abs(std / np.sqrt(2 / fan_in) - 1) < (0.15 if fan_in == 27 else 0.03), layer
    assert not np.any(np.asarray(p[layer]["bias"]))
  for layer, fan_in in (("DenseOI_0", 2048), ("DenseOI_1", 512)):
    w = np.asarray(p[layer]["kernel"])
    sigma = np.sqrt(2 / fan_in)
    assert w.shape[1] == fan_in and abs(w.std() / sigma - 1) < 0.02, layer
    # An untruncated normal: about 4.6 % of the weights lie beyond 2 sigma.
    assert 0.035 < np.mean(np.abs(w) > 2 * sigma) < 0.06, layer
    assert not np.any(np.asarray(p[layer]["bias"]))
  bound = 1 / np.sqrt(256)  # the output layer keeps PyTorch's nn.Linear default
  for leaf in ("kernel", "bias"):
    a = np.asarray(p["DenseOI_2"][leaf])
    assert np.abs(a).max() <= bound and np.abs(a).max() > 0.7 * bound, leaf
  w = np.asarray(p["DenseOI_2"]["kernel"])
  assert abs(w.std() / (bound / np.sqrt(3)) - 1) < 0.05


def _torch_layout_forward(p, x, norm):
  """The CIFAR-10 CNN as PyTorch computes it: NCHW, OIHW kernels, view(N, -1)."""
  mean, std = (jnp.asarray(v)[None, :, None, None] for v in norm)
  h = (jnp.transpose(x, (0, 3, 1, 2)) - mean) / std
  for conv in ("Conv_0", "Conv_1"):
    k = jnp.transpose(p[conv]["kernel"], (3, 2, 0, 1))
    h = jax.lax.conv_general_dilated(h, k, (1, 1), ((1, 1), (1, 1)),
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
    h = jax.nn.relu(h + p[conv]["bias"][None, :, None, None])
    n, c, hh, ww = h.shape
    h = h.reshape(n, c, hh // 2, 2, ww // 2, 2).max(axis=(3, 5))
  h = h.reshape(h.shape[0], -1)
  for i, dense in enumerate(("DenseOI_0", "DenseOI_1", "DenseOI_2")):
    h = h @ p[dense]["kernel"].T + p[dense]["bias"]
    h = jax.nn.relu(h) if i < 2 else h
  return h


def test_fedawe_cnn_matches_pytorch_layout_and_normalizes_itself():
  model, p = _init_cnn("fedawe_cnn_cifar10", normalize=CIFAR_NORM)
  x = jax.random.uniform(jax.random.PRNGKey(1), (4, 32, 32, 3))
  got = model.apply({"params": p}, x)
  want = _torch_layout_forward(p, x, CIFAR_NORM)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4)
  plain, _ = _init_cnn("fedawe_cnn_cifar10")
  standardized = (x - jnp.asarray(CIFAR_NORM[0])) / jnp.asarray(CIFAR_NORM[1])
  np.testing.assert_allclose(np.asarray(plain.apply({"params": p}, standardized)),
                             np.asarray(got), rtol=1e-5, atol=1e-5)


def test_dropout_only_in_training_mode():
  x = jax.random.uniform(jax.random.PRNGKey(1), (8, 32, 32, 3))
  model, p = _init_cnn("fedawe_cnn_cinic10")
  v = {"params": p}
  eval_out = model.apply(v, x)
  assert np.array_equal(np.asarray(eval_out), np.asarray(model.apply(v, x, train=False)))
  drop = lambda k: model.apply(v, x, train=True, rngs={"dropout": jax.random.PRNGKey(k)})
  assert not np.allclose(drop(0), eval_out) and not np.allclose(drop(0), drop(1))
  assert np.array_equal(np.asarray(drop(2)), np.asarray(drop(2)))
  with pytest.raises(Exception, match="dropout"):
    model.apply(v, x, train=True)
  for name in ("fedawe_cnn_svhn", "fedawe_cnn_cifar10", "logreg", "mlp",
               "fedavg_cnn"):  # no dropout: no effect
    m = models.make(name, num_classes=10, is_image=True)
    xs = x if name.startswith("fedawe_") else x[:, :28, :28, :1]
    w = m.init(jax.random.PRNGKey(0), xs)
    assert np.array_equal(np.asarray(m.apply(w, xs)), np.asarray(
        m.apply(w, xs, train=True, rngs={"dropout": jax.random.PRNGKey(0)}))), name


def test_zero_init_logreg_and_bad_options():
  model = models.make("logreg", num_classes=10, is_image=False, zero_init=True)
  v = model.init(jax.random.PRNGKey(0), jnp.ones((1, 32)))
  assert all(not np.any(np.asarray(a)) for a in jax.tree.leaves(v))
  assert not np.any(np.asarray(model.apply(v, jax.random.normal(jax.random.PRNGKey(1), (4, 32)))))
  default = models.make("logreg", num_classes=10, is_image=False)
  assert np.any(np.asarray(default.init(jax.random.PRNGKey(0), jnp.ones((1, 32)))["params"]
                           ["DenseOI_0"]["kernel"]))
  with pytest.raises(UsageError, match="logreg"):
    models.make("fedawe_cnn_svhn", num_classes=10, is_image=True, zero_init=True)
  with pytest.raises(UsageError, match="normalize"):
    models.make("fedawe_cnn_svhn", num_classes=10, is_image=True, normalize=((0.5,), (0.0,)))


def test_fedef_cnn_uses_pytorch_default_init_and_dropout_only_in_training():
  model = models.make("fedef_cnn", num_classes=10, is_image=True)
  x = jnp.ones((4, 28, 28, 1))
  p = model.init(jax.random.PRNGKey(0), x)["params"]
  for name, fan_in in (("Conv_0", 9), ("Conv_1", 288), ("DenseOI_0", 9216), ("DenseOI_1", 128)):
    for leaf in p[name].values():
      bound = 1 / np.sqrt(fan_in)
      assert float(jnp.max(jnp.abs(leaf))) <= bound and float(jnp.std(leaf)) > 0.45 * bound
  ev = model.apply({"params": p}, x)
  assert jnp.array_equal(ev, model.apply({"params": p}, x))
  tr = model.apply({"params": p}, x, train=True, rngs={"dropout": jax.random.PRNGKey(1)})
  assert not jnp.allclose(ev, tr)


@pytest.mark.parametrize("padding,kernel,channels", [("SAME", 5, 1), ("VALID", 3, 4),
                                                     ([(2, 0), (1, 3)], 3, 2)])
def test_fast_gradient_convolution_equals_lax(padding, kernel, channels):
  """models.conv's hand-written backward pass: the same values and gradients (with
  respect to input and kernel) as lax.conv_general_dilated's, also inside a scan."""
  from flax import linen as nn
  from fedjax_bench.models import conv as conv_lib
  x = jax.random.normal(jax.random.PRNGKey(0), (3, 9, 8, channels))
  fast = conv_lib.Conv(5, (kernel, kernel), padding=padding)
  plain = nn.Conv(5, (kernel, kernel), padding=padding)
  params = plain.init(jax.random.PRNGKey(1), x)
  loss = lambda m: lambda p, x: jnp.sum(jnp.sin(m.apply(p, x)))
  np.testing.assert_allclose(fast.apply(params, x), plain.apply(params, x), rtol=1e-6)
  want = jax.grad(loss(plain), argnums=(0, 1))(params, x)
  got = jax.jit(jax.grad(loss(fast), argnums=(0, 1)))(params, x)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5), got, want)

  def scanned(m):
    step = lambda p, _: (jax.tree.map(lambda a, g: a - 0.01 * g, p,
                                      jax.grad(loss(m))(p, x)), None)
    return jax.jit(lambda p: jax.lax.scan(step, p, jnp.arange(3))[0])(params)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
               scanned(fast), scanned(plain))


def test_an_alias_is_recorded_as_the_name_it_stands_for():
  from fedjax_bench import settings
  from fedjax_bench.models.settings import ModelSettings
  for alias, model in models.MODELS_BY_NAME.items():
    assert settings.make(ModelSettings, {"model": alias}).model == model.name
