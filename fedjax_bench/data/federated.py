"""The federated array layout: one flat example array plus per-client offsets and counts."""

import dataclasses

import numpy as np


def _feature_dtype(x: np.ndarray):
  """uint8 pixels stay uint8 (4x less memory and gather traffic), signed integers are token
  ids and stay as they are (`is_tokens`); the rest is float32."""
  dtype = np.asarray(x).dtype
  if dtype == np.uint8 or np.issubdtype(dtype, np.signedinteger):
    return dtype
  return np.float32


def is_tokens(x) -> bool:
  """Whether examples ``x`` are token ids (signed integers: text for a sequence model);
  uint8 is pixels, floats are features."""
  dtype = x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype
  return np.issubdtype(dtype, np.signedinteger)


def pixels_to_float(x):
  """What models see: uint8 pixels as float32 in [0, 1]; other features unchanged.

  Works on NumPy and JAX arrays alike; division (not a multiply by 1/255) so the
  result matches converting on the host exactly.
  """
  if x.dtype == np.uint8:
    return x.astype(np.float32) / np.float32(255)
  return x


def _label_dtype(y: np.ndarray):
  """int32 class labels, or float32 regression targets."""
  return np.int32 if np.issubdtype(np.asarray(y).dtype, np.integer) else np.float32


@dataclasses.dataclass(frozen=True)
class FederatedData:
  """Client i owns examples ``x[offsets[i] : offsets[i] + counts[i]]`` (ragged, no padding)."""
  x: np.ndarray        # [N, *feature_shape] float32, uint8 pixels (see pixels_to_float)
                       # or signed-integer token ids (is_tokens)
  y: np.ndarray        # [N] int32 labels (float32 for regression)
  offsets: np.ndarray  # [num_clients] int32
  counts: np.ndarray   # [num_clients] int32

  @property
  def num_clients(self) -> int:
    return int(self.counts.shape[0])

  @property
  def num_examples(self) -> int:
    return int(self.x.shape[0])

  def client(self, i: int) -> tuple[np.ndarray, np.ndarray]:
    s = slice(int(self.offsets[i]), int(self.offsets[i] + self.counts[i]))
    return self.x[s], self.y[s]

  @classmethod
  def from_partition(cls, x: np.ndarray, y: np.ndarray,
                     client_indices: list[np.ndarray]) -> "FederatedData":
    """Lays out ``x[client_indices[i]]`` contiguously, client after client."""
    counts = np.array([len(ix) for ix in client_indices], np.int32)
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32)
    order = (np.concatenate(client_indices).astype(np.int64)
             if client_indices else np.zeros(0, np.int64))
    return cls(x=np.ascontiguousarray(x[order], dtype=_feature_dtype(x)),
               y=np.ascontiguousarray(y[order], dtype=_label_dtype(y)),
               offsets=offsets, counts=counts)

  @classmethod
  def from_clients(cls, xs: list[np.ndarray], ys: list[np.ndarray]) -> "FederatedData":
    """Concatenates per-client arrays, client after client."""
    counts = np.array([len(y) for y in ys], np.int32)
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32)
    return cls(x=np.concatenate(xs).astype(_feature_dtype(xs[0])),
               y=np.concatenate(ys).astype(_label_dtype(ys[0])),
               offsets=offsets, counts=counts)


@dataclasses.dataclass(frozen=True)
class Dataset:
  """A federated training set, a central test set, and what the partitioner reports."""
  name: str
  train: FederatedData
  test_x: np.ndarray   # [M, *feature_shape], same dtype convention as train.x
  test_y: np.ndarray   # [M] int32
  num_classes: int
  feature_shape: tuple[int, ...]
  is_image: bool
  # Per-channel standardization of pixels in [0, 1], applied by the model (models.make).
  normalize_mean: tuple[float, ...] | None = None
  normalize_std: tuple[float, ...] | None = None
  # Training-time augmentation, one of augment.AUGMENTATIONS: "none", "crop", "crop_flip".
  augmentation: str = "none"
  # Prioritized FL (FedALIGN, Ravi & Shomorony): [num_clients] bool, the clients the objective
  # counts, and
  # the free clients a diagnostic calls aligned with them (data/priority.py). None: no roles.
  priority: np.ndarray | None = None
  aligned: np.ndarray | None = None
  # Each client's own test data (data/holdout.py, --holdout_fraction), laid out as train;
  # None: the dataset has only the central test set.
  client_test: "FederatedData | None" = None
  # Token data (`is_tokens`): the ids are in [0, vocab_size); 0 for other data.
  vocab_size: int = 0

  @property
  def normalize(self) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """(mean, std), or None; what models.make(normalize=...) takes."""
    if self.normalize_mean is None:
      return None
    return self.normalize_mean, self.normalize_std

  @property
  def client_sizes(self) -> np.ndarray:
    return self.train.counts

  def label_histograms(self) -> np.ndarray:
    """[num_clients, num_classes] example counts per label."""
    t = self.train
    if not np.issubdtype(t.y.dtype, np.integer):  # regression targets have no labels
      return np.zeros((t.num_clients, 0), np.int64)
    client_of = np.repeat(np.arange(t.num_clients), t.counts)
    h = np.zeros((t.num_clients, self.num_classes), np.int64)
    np.add.at(h, (client_of, t.y), 1)
    return h

  def report(self) -> dict:
    """Per-client sizes and label histograms, plus a few summary numbers."""
    sizes = self.client_sizes
    hist = self.label_histograms()
    return {
        "num_clients": int(sizes.shape[0]),
        "num_train_examples": int(sizes.sum()),
        "num_test_examples": int(self.test_y.shape[0]),
        "size_min": int(sizes.min()), "size_median": float(np.median(sizes)),
        "size_max": int(sizes.max()),
        "empty_clients": int((sizes == 0).sum()),
        "mean_classes_per_client": float((hist > 0).sum(1).mean()),
        "client_sizes": sizes.tolist(),
        "label_histograms": hist.tolist(),
    }
