"""Input standardization that the models apply to themselves."""


import jax.numpy as jnp

# ((mean per channel), (std per channel)), for inputs in [0, 1].
Normalize = tuple[tuple[float, ...], tuple[float, ...]]


def as_normalize(normalize) -> Normalize | None:
  """(mean, std) sequences as a hashable tuple of float tuples (a flax attribute), or None."""
  if normalize is None:
    return None
  mean, std = normalize
  mean, std = tuple(float(m) for m in mean), tuple(float(s) for s in std)
  if len(mean) != len(std) or not all(s > 0 for s in std):
    raise ValueError(f"normalize needs one mean and one positive std per channel, "
                     f"got {mean}, {std}")
  return mean, std


def standardize(x, normalize: Normalize | None):
  """(x - mean) / std over the last (channel) axis; x unchanged when normalize is None."""
  if normalize is None:
    return x
  mean, std = normalize
  if x.shape[-1] != len(mean):
    raise ValueError(f"normalize has {len(mean)} channels, the input {x.shape[-1]}")
  return (x - jnp.asarray(mean, x.dtype)) / jnp.asarray(std, x.dtype)
