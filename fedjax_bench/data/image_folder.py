"""Image datasets outside the TFDS catalog, read from image files in class folders.

The layout is ``<root>/<split>/<class>/*.png`` (CINIC-10's official release), read in
torchvision ImageFolder order: classes sorted by name give the labels 0..C-1, and the
files of a class are sorted by name. Images are converted to RGB as ImageFolder's loader
does (CINIC-10 holds some grayscale PNGs).

The root is ``$<NAME>_DIR`` (e.g. $CINIC10_DIR) when set, else the first of
``<data_dir>/<folder>``, ``<data_dir>/<name>`` and ``<data_dir>`` itself that holds the
split folders, where data_dir is --data_dir or $TFDS_DATA_DIR.
"""

import concurrent.futures
import os
import pathlib
from typing import TYPE_CHECKING

import numpy as np

from fedjax_bench.errors import DataMissingError, UsageError

if TYPE_CHECKING:
  from fedjax_bench.data.tfds_data import ImageSpec

_HOW_TO_GET = {
    "cinic10": "download CINIC-10.tar.gz from https://datashare.ed.ac.uk/handle/10283/3192 "
               "(github.com/BayesWatch/cinic-10) and extract it",
}


def env_var(name: str) -> str:
  return f"{name.upper()}_DIR"


def candidate_roots(name: str, folder: str, data_dir: str | None) -> list[pathlib.Path]:
  """Where the dataset is looked for, in order (see the module docstring)."""
  if os.environ.get(env_var(name)):
    return [pathlib.Path(os.environ[env_var(name)])]
  if not data_dir:
    return []
  d = pathlib.Path(data_dir)
  return [d / folder, d / name, d]


def _find_root(name: str, spec: "ImageSpec", data_dir: str | None,
               cache_desc: str) -> pathlib.Path:
  splits = (spec.train_split, spec.test_split)
  candidates = candidate_roots(name, spec.tfds_name, data_dir)
  for root in candidates:
    if all((root / s).is_dir() for s in splits):
      return root
  looked = (f"looked in {', '.join(str(c) for c in candidates)}" if candidates
            else f"nowhere to look: ${env_var(name)}, --data_dir and $TFDS_DATA_DIR are unset")
  raise DataMissingError(
      f"dataset {name!r} is not cached in {cache_desc} and its {'/ and '.join(splits)}/ "
      f"folders were not found ({looked}): {_HOW_TO_GET.get(name, 'get the image files')}, "
      f"then set ${env_var(name)} (or --data_dir) to the folder that holds "
      f"{'/ and '.join(splits)}/ (or to its parent, as {spec.tfds_name}/)")


def _read_rgb(path: pathlib.Path) -> np.ndarray:
  from PIL import Image  # only needed to build the cache
  with Image.open(path) as im:
    return np.asarray(im.convert("RGB"), np.uint8)


def read_split(split_dir: pathlib.Path, image_shape: tuple[int, int, int],
               num_classes: int) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
  """Images [N, H, W, 3] uint8, labels [N] int32 and the class names of ``split_dir``."""
  classes = tuple(sorted(p.name for p in split_dir.iterdir() if p.is_dir()))
  if len(classes) != num_classes:
    raise UsageError(f"{split_dir} has {len(classes)} class folders, expected "
                     f"{num_classes}: {', '.join(classes)}")
  files, labels = [], []
  for label, c in enumerate(classes):
    names = sorted(p for p in (split_dir / c).iterdir() if p.suffix.lower() == ".png")
    files += names
    labels += [label] * len(names)
  x = np.empty((len(files),) + tuple(image_shape), np.uint8)
  with concurrent.futures.ThreadPoolExecutor(min(32, os.cpu_count() or 1)) as pool:
    for i, (path, image) in enumerate(zip(files, pool.map(_read_rgb, files))):
      if image.shape != x.shape[1:]:
        raise UsageError(f"{path} is {image.shape}, expected {x.shape[1:]}")
      x[i] = image
  return x, np.asarray(labels, np.int32), classes


def convert(name: str, spec: "ImageSpec", data_dir: str | None,
            cache_desc: str) -> dict[str, np.ndarray]:
  """train_x, train_y, test_x, test_y from the image files (see the module docstring)."""
  root = _find_root(name, spec, data_dir, cache_desc)
  a, classes = {}, {}
  for split, split_name, n in (("train", spec.train_split, spec.num_train),
                               ("test", spec.test_split, spec.num_test)):
    a[f"{split}_x"], a[f"{split}_y"], classes[split] = read_split(
        root / split_name, spec.image_shape, spec.num_classes)
    if n is not None and a[f"{split}_y"].shape[0] != n:
      raise UsageError(f"found {a[f'{split}_y'].shape[0]} images in {root / split_name}, "
                       f"expected {n} (the official {spec.tfds_name} release)")
  if classes["train"] != classes["test"]:
    raise UsageError(f"the class folders of {root / spec.train_split} and "
                     f"{root / spec.test_split} differ")
  return a
