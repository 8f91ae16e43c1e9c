"""Training augmentation: torchvision RandomCrop(padding) and RandomHorizontalFlip on NHWC batches."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_bench.data import augment
from fedjax_bench.errors import UsageError


def _images(b=6, h=8, w=8, c=3, dtype=np.uint8, seed=0):
  return np.random.default_rng(seed).integers(1, 256, (b, h, w, c)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("kind", augment.AUGMENTATIONS)
def test_shape_and_dtype_kept(kind, dtype):
  x = _images(dtype=dtype)
  y = augment.augment(jax.random.PRNGKey(0), jnp.asarray(x), kind)
  assert y.shape == x.shape and y.dtype == x.dtype


def test_no_padding_no_flip_is_the_identity():
  x = jnp.asarray(_images())
  for batchwise in (False, True):
    y = augment.augment(jax.random.PRNGKey(1), x, "crop", pad=0, batchwise=batchwise)
    assert np.array_equal(np.asarray(y), np.asarray(x))
  assert augment.augment(jax.random.PRNGKey(1), x, "none") is x


def test_crop_is_the_window_of_the_zero_padded_image_at_the_drawn_offsets():
  x, pad = _images(b=16), 4
  key = jax.random.PRNGKey(2)
  offsets, flips = augment.draw(key, 16, "crop", pad=pad)
  assert not np.any(np.asarray(flips))
  y = np.asarray(augment.augment(key, jnp.asarray(x), "crop", pad=pad))
  padded = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
  offsets = np.asarray(offsets)
  assert offsets.min() >= 0 and offsets.max() <= 2 * pad and len(np.unique(offsets)) > 3
  for i, (r, c) in enumerate(offsets):
    assert np.array_equal(y[i], padded[i, r:r + 8, c:c + 8])


def test_offsets_cover_the_range_uniformly():
  offsets, _ = augment.draw(jax.random.PRNGKey(3), 9000, "crop", pad=4)
  counts = np.bincount(np.asarray(offsets).ravel(), minlength=9)
  assert counts.shape == (9,) and np.all(np.abs(counts / counts.sum() - 1 / 9) < 0.01)


def test_flip_reverses_the_width_axis():
  x = jnp.asarray(_images(b=32))
  offsets = jnp.full((32, 2), 4)
  flips = jnp.arange(32) % 2 == 0
  y = np.asarray(augment.apply(x, offsets, flips, pad=4))
  assert np.array_equal(y[::2], np.asarray(x)[::2, :, ::-1])
  assert np.array_equal(y[1::2], np.asarray(x)[1::2])
  _, drawn = augment.draw(jax.random.PRNGKey(4), 1000, "crop_flip")
  assert 0.45 < float(np.mean(np.asarray(drawn))) < 0.55


def test_batchwise_uses_one_offset_and_one_flip():
  x = _images(b=10)
  key = jax.random.PRNGKey(5)
  offsets, flips = augment.draw(key, 10, "crop_flip", batchwise=True)
  assert offsets.shape == (1, 2) and flips.shape == (1,)
  y = np.asarray(augment.augment(key, jnp.asarray(x), "crop_flip", batchwise=True))
  (r, c), flip = np.asarray(offsets)[0], bool(flips[0])
  want = np.pad(x, ((0, 0), (4, 4), (4, 4), (0, 0)))[:, r:r + 8, c:c + 8]
  assert np.array_equal(y, want[:, :, ::-1] if flip else want)


def test_fill_pads_with_a_value_per_channel():
  x = jnp.zeros((1, 4, 4, 3), jnp.float32)
  fill = (0.25, 0.5, 0.75)
  y = np.asarray(augment.apply(x, jnp.array([[0, 0]]), jnp.array([False]), pad=2, fill=fill))
  assert np.allclose(y[0, 0, 0], fill) and np.allclose(y[0, 3, 3], 0.0)


def test_deterministic_per_key_and_jit_vmap_friendly():
  x = jnp.asarray(_images(b=8))
  f = jax.jit(functools.partial(augment.augment, kind="crop_flip"))
  a, b = f(jax.random.PRNGKey(6), x), f(jax.random.PRNGKey(6), x)
  c = f(jax.random.PRNGKey(7), x)
  assert np.array_equal(np.asarray(a), np.asarray(b)) and not np.array_equal(a, c)
  assert np.array_equal(np.asarray(a), np.asarray(augment.augment(jax.random.PRNGKey(6), x,
                                                                  "crop_flip")))
  keys = jax.random.split(jax.random.PRNGKey(8), 3)
  per_client = jax.vmap(f)(keys, jnp.stack([x, x, x]))
  assert per_client.shape == (3,) + x.shape
  assert np.array_equal(np.asarray(per_client[1]), np.asarray(f(keys[1], x)))


def test_unknown_kind():
  with pytest.raises(UsageError, match="crop_flip"):
    augment.augment(jax.random.PRNGKey(0), jnp.zeros((1, 4, 4, 1)), "rotate")
