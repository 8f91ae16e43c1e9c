"""What a GPU or TPU build would choose, inspected on this CPU: the CPU-only code paths (the
written-out convolution and pooling gradients, the CPU client width) must not be taken there."""

import jax
import jax.numpy as jnp
import pytest

from fedjax_bench import models
from fedjax_bench.core import client_map


def _pretend(monkeypatch, backend: str):
  monkeypatch.setattr(jax, "default_backend", lambda: backend)


@pytest.mark.parametrize("backend", ["gpu", "tpu"])
def test_accelerators_vmap_the_whole_cohort(monkeypatch, backend):
  _pretend(monkeypatch, backend)
  assert client_map.resolve_width(-1) == 0
  assert client_map.resolve_width(-1, convolutional=True) == 0
  assert client_map.resolve_width(3) == 3  # an explicit width is kept everywhere


def test_cpu_trains_a_few_clients_at_once_and_convolutions_one_by_one(monkeypatch):
  _pretend(monkeypatch, "cpu")
  assert client_map.resolve_width(-1) == client_map.CPU_CLIENT_WIDTH
  assert client_map.resolve_width(-1, convolutional=True) == 1


def _forward_jaxpr(backend: str, monkeypatch) -> str:
  """The CNN's forward pass as traced for ``backend`` (the backward pass a custom_vjp
  brings shows there as a custom_vjp call)."""
  _pretend(monkeypatch, backend)
  model = models.make("cnn", num_classes=10, is_image=True)
  x = jnp.zeros((2, 28, 28, 1))
  params = model.init(jax.random.PRNGKey(0), x)
  return str(jax.make_jaxpr(model.apply)(params, x))


@pytest.mark.parametrize("backend", ["gpu", "tpu"])
def test_accelerators_use_lax_convolution_and_pooling_gradients(monkeypatch, backend):
  jaxpr = _forward_jaxpr(backend, monkeypatch)
  assert "custom_vjp" not in jaxpr and "conv_general_dilated" in jaxpr
  assert "reduce_window_max" in jaxpr  # flax's max pooling


def test_cpu_uses_the_written_out_convolution_and_pooling_gradients(monkeypatch):
  jaxpr = _forward_jaxpr("cpu", monkeypatch)
  assert "custom_vjp" in jaxpr and "reduce_window_max" not in jaxpr
