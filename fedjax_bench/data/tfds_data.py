"""Image datasets, converted once to a cache of .npy files; ``SPECS`` lists them.

The first load reads the prepared TFDS data (array_record) through ``tfds.data_source``,
which needs no TensorFlow, or, for datasets outside the TFDS catalog (CINIC-10), the
image files (``image_folder``), and writes uint8 NHWC images and int32 labels to
``<cache_dir>/<name>-<version>/``. Later loads read only that cache and never import
tensorflow_datasets; a corrupt cache (unreadable, labels out of range, shapes that
disagree) is removed and converted again.
"""

import dataclasses
import os
import pathlib
import socket
import threading

import numpy as np

from fedjax_bench.data import image_folder
from fedjax_bench.errors import DataMissingError, UsageError

_PROBE_HOST = ("storage.googleapis.com", 443)
_PROBE_TIMEOUT_S = 3.0
_ARRAYS = ("train_x", "train_y", "test_x", "test_y")


@dataclasses.dataclass(frozen=True)
class ImageSpec:
  tfds_name: str  # for source="folder", the folder name of the release
  version: str
  image_shape: tuple[int, int, int]
  num_classes: int
  num_train: int | None = None  # checked against the cache when known
  num_test: int | None = None
  train_split: str = "train"
  test_split: str = "test"
  source: str = "tfds"  # or "folder": image files, read by image_folder.convert
  # Metadata for training (federated.Dataset): per-channel standardization of pixels in
  # [0, 1] (done by the model) and the training augmentation (augment.AUGMENTATIONS).
  normalize_mean: tuple[float, float, float] | None = None
  normalize_std: tuple[float, float, float] | None = None
  augmentation: str = "none"


# Normalization constants and augmentations: the FedAWE authors' code (the paper's App. J).
# Candidate: "fmnist": ImageSpec("fashion_mnist", "3.0.1", (28, 28, 1), 10, 60000, 10000).
SPECS: dict[str, ImageSpec] = {
    "mnist": ImageSpec("mnist", "3.0.1", (28, 28, 1), 10, 60000, 10000),
    "fmnist": ImageSpec("fashion_mnist", "3.0.1", (28, 28, 1), 10, 60000, 10000),
    # FedALIGN's EMNIST (its Section 4 and App. B): the balanced split, 47 classes. TFDS stores the
    # images transposed; dense models do not care, and we keep TFDS's orientation.
    "emnist": ImageSpec("emnist/balanced", "3.1.0", (28, 28, 1), 47, 112800, 18800),
    # The "extra" split (531,131 images) is not used, as in the paper.
    "svhn": ImageSpec(
        "svhn_cropped", "3.1.0", (32, 32, 3), 10, 73257, 26032,
        normalize_mean=(0.4376821, 0.4437697, 0.47280442),
        normalize_std=(0.19803012, 0.20101562, 0.19703614), augmentation="crop"),
    "cifar10": ImageSpec(
        "cifar10", "3.0.2", (32, 32, 3), 10, 50000, 10000,
        normalize_mean=(0.4914, 0.4822, 0.4465), normalize_std=(0.2023, 0.1994, 0.2010),
        augmentation="crop_flip"),
    # Not in the TFDS catalog: the official release's train/ and test/ folders (the
    # paper's split; valid/ is unused). "1.0" only names the cache.
    "cinic10": ImageSpec(
        "CINIC-10", "1.0", (32, 32, 3), 10, 90000, 90000, source="folder",
        normalize_mean=(0.47889522, 0.47227842, 0.43047404),
        normalize_std=(0.24205776, 0.23828046, 0.25874835), augmentation="crop_flip"),
}


def _spec(name: str) -> ImageSpec:
  if name not in SPECS:
    raise UsageError(f"unknown image dataset {name!r}; choose one of {', '.join(SPECS)}")
  return SPECS[name]


def resolve_data_dir(data_dir: str | None = None) -> str | None:
  """The argument, else $TFDS_DATA_DIR, else None (the TFDS default)."""
  return data_dir or os.environ.get("TFDS_DATA_DIR") or None


def resolve_cache_dir(cache_dir: str | None = None) -> pathlib.Path:
  """The argument, else $FEDJAX_BENCH_CACHE, else ~/.cache/fedjax_bench."""
  d = cache_dir or os.environ.get("FEDJAX_BENCH_CACHE")
  return pathlib.Path(d) if d else pathlib.Path.home() / ".cache" / "fedjax_bench"


def _cache_paths(cache_dir: pathlib.Path, name: str, spec: ImageSpec) -> dict[str, pathlib.Path]:
  d = cache_dir / f"{name}-{spec.version}"
  return {k: d / f"{k}.npy" for k in _ARRAYS}


def _problem(a: dict[str, np.ndarray], spec: ImageSpec, suffix: str = "") -> str | None:
  """What is wrong with the arrays (uint8 images of ``spec.image_shape``, as many integer
  labels in [0, num_classes)), or None; ``suffix`` follows the arrays' names."""
  for split, n in (("train", spec.num_train), ("test", spec.num_test)):
    x, y = a[f"{split}_x"], a[f"{split}_y"]
    xn, yn = f"{split}_x{suffix}", f"{split}_y{suffix}"
    if x.dtype != np.uint8 or x.shape[1:] != spec.image_shape:
      return (f"{xn} is {x.dtype} {x.shape}, expected uint8 [n, "
              f"{', '.join(map(str, spec.image_shape))}]")
    if y.ndim != 1 or x.shape[0] != y.shape[0] or (n is not None and y.shape[0] != n):
      return (f"{yn} is {y.shape} for {xn} {x.shape}, expected "
              f"[{n if n is not None else x.shape[0]}]")
    if not np.issubdtype(y.dtype, np.integer):
      return f"{yn} is {y.dtype}, not integer labels"
    if y.size and (y.min() < 0 or y.max() >= spec.num_classes):
      return f"{yn} holds labels {y.min()}..{y.max()}, outside [0, {spec.num_classes})"
  return None


def _read_cache(paths: dict[str, pathlib.Path],
                spec: ImageSpec) -> tuple[dict[str, np.ndarray] | None, str | None]:
  """Returns (arrays, problem): (None, None) when the cache is absent or incomplete, (None,
  what is wrong) when it is corrupt."""
  for p in paths.values():
    if p.exists() and not p.is_file():
      raise UsageError(f"the data cache file {p} is not a file (a directory?): delete it, "
                       "and the cache is rebuilt from the dataset")
  if not all(p.exists() for p in paths.values()):
    return None, None
  a = {}
  for k, p in paths.items():
    try:
      a[k] = np.load(p, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
      return None, f"{p.name} cannot be read: {e}"
  return (None, problem) if (problem := _problem(a, spec, ".npy")) else (a, None)


def _save_atomic(path: pathlib.Path, arr: np.ndarray) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
  with open(tmp, "wb") as f:
    np.save(f, arr, allow_pickle=False)
  os.replace(tmp, path)


def _network_ok() -> bool:
  """Connects to the TFDS bucket; a thread bounds the time a hanging DNS lookup can take.

  FEDJAX_BENCH_OFFLINE=1 skips the probe: never download.
  """
  if os.environ.get("FEDJAX_BENCH_OFFLINE", "") not in ("", "0"):
    return False
  ok = []

  def probe():
    try:
      socket.create_connection(_PROBE_HOST, timeout=_PROBE_TIMEOUT_S).close()
      ok.append(True)
    except OSError:
      pass

  t = threading.Thread(target=probe, daemon=True)
  t.start()
  t.join(_PROBE_TIMEOUT_S + 0.5)
  return bool(ok)


def _read_split(tfds, ident: str, split: str, data_dir: str | None,
                download: bool) -> tuple[np.ndarray, np.ndarray]:
  try:
    source = tfds.data_source(ident, split=split, data_dir=data_dir, download=download)
  except (NotImplementedError, RuntimeError) as e:
    first = str(e).splitlines()[0] if str(e) else type(e).__name__
    raise UsageError(f"cannot read TFDS {ident} split {split!r} from {data_dir}: "
                     f"{first} (the data must be prepared as array_record)") from e
  examples = source.__getitems__(range(len(source)))
  x = np.stack([np.asarray(e["image"], np.uint8) for e in examples])
  y = np.asarray([e["label"] for e in examples], np.int32)
  return x, y


def _convert(name: str, spec: ImageSpec, data_dir: str | None,
             cache_desc: str) -> dict[str, np.ndarray]:
  import tensorflow_datasets as tfds  # slow-ish, and only needed to build the cache

  ident = f"{spec.tfds_name}:{spec.version}"
  from absl import logging as absl_logging
  verbosity = absl_logging.get_verbosity()
  absl_logging.set_verbosity(absl_logging.ERROR)  # its "failed to load" notices are ours to say
  try:
    builder = tfds.builder(ident, data_dir=data_dir)
    prepared, builder_dir = builder.is_prepared(), str(builder.data_dir)
  finally:
    absl_logging.set_verbosity(verbosity)
  download = False
  if not prepared:
    if not _network_ok():
      root = builder_dir[:-len(f"/{spec.tfds_name}/{spec.version}")]
      looked = data_dir or f"the TFDS default ({root})"
      raise DataMissingError(
          f"dataset {name!r} ({ident}) is not prepared in {looked} nor cached in "
          f"{cache_desc}, and {_PROBE_HOST[0]} is unreachable: set TFDS_DATA_DIR "
          f"(or --data_dir) to a directory containing {spec.tfds_name}/{spec.version}, "
          f"or run once with internet access")
    download = True
  a = {}
  for split, split_name in (("train", spec.train_split), ("test", spec.test_split)):
    a[f"{split}_x"], a[f"{split}_y"] = _read_split(tfds, ident, split_name, data_dir,
                                                   download)
  problem = _problem(a, spec)
  if problem:
    raise UsageError(f"TFDS {ident} in {data_dir} is not as expected: {problem}")
  return a


def load_arrays(name: str, data_dir: str | None = None,
                cache_dir: str | None = None) -> dict:
  """train_x, train_y, test_x, test_y (uint8 NHWC images, int32 labels) and num_classes."""
  spec = _spec(name)
  paths = _cache_paths(resolve_cache_dir(cache_dir), name, spec)
  arrays, problem = _read_cache(paths, spec)
  if arrays is None:
    cache_desc = str(paths["train_x"].parent)
    if problem:
      for p in paths.values():
        try:
          p.unlink(missing_ok=True)
        except OSError as e:
          raise UsageError(f"the data cache {cache_desc} is corrupt ({problem}) and {p} "
                           f"cannot be removed ({e}): delete it") from None
      cache_desc += f" (a corrupt cache there was removed: {problem})"
    convert = image_folder.convert if spec.source == "folder" else _convert
    arrays = convert(name, spec, resolve_data_dir(data_dir), cache_desc)
    for k, p in paths.items():
      _save_atomic(p, arrays[k])
  return {**arrays, "num_classes": spec.num_classes}
