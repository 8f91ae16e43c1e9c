"""Training-time image augmentation of NHWC batches (the FedAWE authors' code).

"crop" is torchvision's RandomCrop(H, padding=pad): pad every side with ``fill``, then cut
an H x W window at a uniform offset in [0, 2 pad]^2. "crop_flip" adds RandomHorizontalFlip
(p = 1/2). By default every image draws its own offset and flip; ``batchwise=True`` draws
one for the whole batch, as the authors' code does by transforming the batch tensor.

Pure jnp, so it can be jitted and vmapped over clients (``kind``, ``pad`` and
``batchwise`` are static).
"""

import jax
import jax.numpy as jnp

from fedjax_bench.errors import UsageError

AUGMENTATIONS = ("none", "crop", "crop_flip")


def _check(kind: str) -> str:
  if kind not in AUGMENTATIONS:
    raise UsageError(f"unknown augmentation {kind!r}; choose one of {', '.join(AUGMENTATIONS)}")
  return kind


def draw(key: jax.Array, batch: int, kind: str, *, pad: int = 4,
         batchwise: bool = False) -> tuple[jax.Array, jax.Array]:
  """Crop offsets ``[n, 2]`` (row, column) and flips ``[n]`` (bool); n = 1 if batchwise.

  "none" gives the centre offset (pad, pad) and no flips: ``apply`` is then the identity.
  """
  _check(kind)
  n = 1 if batchwise else batch
  k_crop, k_flip = jax.random.split(key)
  offsets = jax.random.randint(k_crop, (n, 2), 0, 2 * pad + 1)
  if kind == "none":
    offsets = jnp.full((n, 2), pad)
  flips = jax.random.bernoulli(k_flip, 0.5, (n,)) & (kind == "crop_flip")
  return offsets, flips


def apply(images: jax.Array, offsets: jax.Array, flips: jax.Array, *, pad: int = 4,
          fill=0) -> jax.Array:
  """Crops the padded ``images`` at ``offsets`` and flips where ``flips``; see ``draw``.

  ``fill`` (a scalar or one value per channel, in the images' own units) is the padding.
  Zero is torchvision's default on PIL images. The authors' code pads *normalized* tensors
  with 0, which is the per-channel mean in pixel units.
  """
  b, h, w, c = images.shape
  padded = jnp.broadcast_to(jnp.asarray(fill, images.dtype), (b, h + 2 * pad, w + 2 * pad, c))
  padded = jax.lax.dynamic_update_slice(padded, images, (0, pad, pad, 0))
  if offsets.shape[0] == 1:  # one window for the whole batch
    out = jax.lax.dynamic_slice(padded, (0, offsets[0, 0], offsets[0, 1], 0), (b, h, w, c))
  else:
    out = jax.vmap(lambda im, o: jax.lax.dynamic_slice(im, (o[0], o[1], 0), (h, w, c)))(
        padded, offsets)
  return jnp.where(flips[:, None, None, None], out[:, :, ::-1, :], out)


def augment(key: jax.Array, images: jax.Array, kind: str, *, pad: int = 4,
            batchwise: bool = False, fill=0) -> jax.Array:
  """A randomly augmented copy of the ``[B, H, W, C]`` batch (uint8 or float, dtype kept)."""
  if _check(kind) == "none":
    return images
  offsets, flips = draw(key, images.shape[0], kind, pad=pad, batchwise=batchwise)
  return apply(images, offsets, flips, pad=pad, fill=fill)
