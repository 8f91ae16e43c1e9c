"""TFF's federated datasets as HDF5 client files (``--dataset=tff_h5 --data_dir=DIR``).

DIR holds one dataset's pair of files as ``tff.simulation.datasets.<name>.load_data``
downloads them (into ``~/.keras/datasets/``, from the archives of ``SPECS``, which unpack
to the pair). Each file has a group ``examples`` with one subgroup per client id, holding
one dataset per feature, a row per sample (TFF's ``HDF5ClientData``); the pair decides the
kind:

* ``fed_emnist_{train,test}.h5`` (62 classes: 0-9 digits, 10-35 upper case, 36-61 lower
  case) and ``fed_emnist_digitsonly_{train,test}.h5`` (10 classes): ``pixels`` [n, 28, 28]
  float32 and ``label`` [n] int32. The pixels are kept as TFF stores them, float32 in [0, 1]
  with 1.0 the background and 0.0 the ink (LEAF's FEMNIST values; the inverse of TFDS's
  MNIST; FedJAX's ``emnist.load_data`` feeds its models ``1 - pixels``), shaped
  28x28x1, ``is_image``.
* ``shakespeare_{train,test}.h5``: ``snippets`` [n] byte strings, each a passage (a
  speech) made into ``text.samples``, 80-character next-character samples (int8 ``text``
  ids; a label outside LEAF's characters is dropped and counted, ``Read.dropped``);
  ``num_classes`` and ``vocab_size`` are ``text.VOCAB_SIZE``. A client's number of
  training samples is its number of such samples.
* ``fed_cifar100_{train,test}.h5``: ``image`` [n, 32, 32, 3] uint8, ``label`` [n] int64
  (the 100 fine classes, used) and ``coarse_label`` (20, not used); uint8 NHWC images.
  No normalization or augmentation is set.

Clients are the train file's client ids in sorted (string) order, as TFF lists them; a
client's test samples are those under its id in the test file (a client absent there has
none). The central test set is the chosen clients' test samples, in client order, except
for CIFAR-100, whose 100 test clients are not its 500 train clients (both are numbered from
0): its central test set is every client of the test file, the whole CIFAR-100 test split.
``settings.test_examples > 0`` keeps a random subset of that many.

Reading: only the chosen clients' datasets are read, plus each client's sample count
(from the dataset's shape); Shakespeare's train file, a few megabytes, is read once whole
to count the samples of its snippets.
"""

import dataclasses
import logging
import pathlib

import numpy as np

from fedjax_bench.data import text
from fedjax_bench.data.federated import Dataset, FederatedData
from fedjax_bench.data.leaf_json import Read
from fedjax_bench.data.natural import check_partition, choose, data_settings, subsample_test
from fedjax_bench.errors import UsageError

NAME = "tff_h5"
URL = "https://storage.googleapis.com/tff-datasets-public/"
EXAMPLES = "examples"  # TFF's HDF5ClientData._EXAMPLES_GROUP


@dataclasses.dataclass(frozen=True)
class Spec:
  prefix: str         # the files are <prefix>_train.h5 and <prefix>_test.h5
  loader: str         # what downloads them
  fields: tuple       # the datasets each client has (all read but coarse_label)
  num_classes: int
  feature_shape: tuple

  @property
  def train(self) -> str:
    return f"{self.prefix}_train.h5"

  @property
  def test(self) -> str:
    return f"{self.prefix}_test.h5"

  @property
  def archive(self) -> str:
    return f"{URL}{self.prefix}.tar.bz2"


SPECS = {
    "emnist": Spec("fed_emnist", "tff.simulation.datasets.emnist.load_data(only_digits=False)",
                   ("pixels", "label"), 62, (28, 28, 1)),
    "emnist_digitsonly": Spec("fed_emnist_digitsonly",
                              "tff.simulation.datasets.emnist.load_data(only_digits=True)",
                              ("pixels", "label"), 10, (28, 28, 1)),
    "shakespeare": Spec("shakespeare", "tff.simulation.datasets.shakespeare.load_data()",
                        ("snippets",), text.VOCAB_SIZE, (text.SEQ_LEN,)),
    "cifar100": Spec("fed_cifar100", "tff.simulation.datasets.cifar100.load_data()",
                     ("image", "label"), 100, (32, 32, 3)),
}
_log = logging.getLogger(__name__)


def _expected() -> str:
  pairs = "; ".join(f"{s.train} and {s.test} ({s.loader} downloads them, or unpack "
                    f"{s.archive})" for s in SPECS.values())
  return f"TFF's pairs of client files: {pairs}"


def _find(data_dir) -> tuple[str, pathlib.Path]:
  if not data_dir:
    raise UsageError(f"--dataset={NAME} needs --data_dir, the directory of one of "
                     f"{_expected()}")
  d = pathlib.Path(data_dir)
  if not d.is_dir():
    raise UsageError(f"--data_dir={data_dir} is not a directory; give the directory of "
                     f"one of {_expected()}")
  full = [k for k, s in SPECS.items() if (d / s.train).is_file() and (d / s.test).is_file()]
  if len(full) > 1:
    raise UsageError(f"--data_dir={data_dir} holds several TFF datasets "
                     f"({', '.join(SPECS[k].prefix for k in full)}); give a directory with "
                     "one pair of files")
  if not full:
    half = [(s, n) for s in SPECS.values() for n, m in ((s.train, s.test), (s.test, s.train))
            if (d / m).is_file() and not (d / n).is_file()]
    if half:
      s, n = half[0]
      raise UsageError(f"--data_dir={data_dir} has {s.test if n == s.train else s.train} "
                       f"but not {n}: {s.loader} downloads both, or unpack {s.archive}")
    raise UsageError(f"--data_dir={data_dir} holds none of {_expected()}")
  return full[0], d


def _examples(f, path: pathlib.Path):
  group = _open(f, EXAMPLES, path) if EXAMPLES in f else None
  if group is None or not hasattr(group, "keys"):
    raise UsageError(f"{path} has no group {EXAMPLES!r}: not a TFF client file")
  return group


def _open(group, name: str, path: pathlib.Path):
  """``group[name]``; a link that leads nowhere is a UsageError naming it."""
  try:
    return group[name]
  except (KeyError, OSError) as e:
    import h5py
    link = group.get(name, getlink=True)
    if isinstance(link, h5py.SoftLink):
      what = f"a soft link to {link.path}, which does not exist"
    elif isinstance(link, h5py.ExternalLink):
      what = f"an external link to {link.filename}:{link.path}, which cannot be opened"
    else:
      what = "unreadable"
    raise UsageError(f"{path}: {group.name.rstrip('/')}/{name} is {what} ({e})") from None


def _field(group, field: str, path: pathlib.Path, cid: str):
  if not hasattr(group, "keys"):
    raise UsageError(f"{path}: {EXAMPLES}/{cid} is not a group of datasets: not a TFF "
                     "client file")
  if field not in group:
    raise UsageError(f"{path}: client {cid!r} has no dataset {field!r} (it has "
                     f"{', '.join(group.keys()) or 'none'})")
  ds = _open(group, field, path)
  if not hasattr(ds, "shape") or not ds.shape:
    raise UsageError(f"{path}: client {cid!r}'s {field} is "
                     f"{'a scalar' if hasattr(ds, 'shape') else 'a group'}, not a dataset of "
                     "one row per sample")
  return ds


def _passages(group, path: pathlib.Path, cid: str) -> list[str]:
  raw = _field(group, "snippets", path, cid)[()]
  return [s.decode("utf-8", "replace") if isinstance(s, bytes) else str(s)
          for s in np.asarray(raw, object).reshape(-1)]


def _count(passages: list[str]) -> int:
  """text.samples' number of samples (its OOV labels left out), without making them."""
  return sum(int(np.count_nonzero(text.encode(p + text.END) != text.OOV)) for p in passages)


def _client(kind: str, group, path: pathlib.Path, cid: str, passages=None):
  """(x, y, dropped) of one client."""
  spec = SPECS[kind]
  if kind == "shakespeare":
    if passages is None:
      passages = _passages(group, path, cid)
    return text.samples(passages)
  xname, yname = spec.fields
  x = np.asarray(_field(group, xname, path, cid)[()])
  y = np.asarray(_field(group, yname, path, cid)[()])
  if y.ndim == 2 and y.shape[1] == 1:
    y = y[:, 0]
  n = y.shape[0] if y.ndim == 1 else -1
  shape = spec.feature_shape[:2] if kind.startswith("emnist") else spec.feature_shape
  if x.shape != (n,) + shape:
    raise UsageError(f"{path}: client {cid!r} has {xname} {x.shape} and {yname} {y.shape}; "
                     f"expected [n, {', '.join(map(str, shape))}] and [n]")
  if not np.issubdtype(y.dtype, np.integer):
    raise UsageError(f"{path}: client {cid!r}'s {yname} are {y.dtype}, not integer labels")
  if n and (y.min() < 0 or y.max() >= spec.num_classes):
    raise UsageError(f"{path}: client {cid!r}'s labels must be in [0, {spec.num_classes}), "
                     f"found {y.min()}..{y.max()}")
  if x.dtype.kind not in "biuf":
    raise UsageError(f"{path}: client {cid!r}'s {xname} are {x.dtype}, not numbers")
  if kind == "cifar100":
    if x.dtype != np.uint8:
      if not np.issubdtype(x.dtype, np.integer) or (n and (x.min() < 0 or x.max() > 255)):
        raise UsageError(f"{path}: client {cid!r}'s images are {x.dtype}, not 0..255 pixels")
      x = x.astype(np.uint8)
  else:
    with np.errstate(over="ignore"):  # beyond float32 becomes inf, refused below
      x = x.astype(np.float32)[..., None]
    finite = np.isfinite(x).all(axis=(1, 2, 3))
    if not finite.all():
      raise UsageError(f"{path}: client {cid!r}'s {xname} of sample {int(np.argmin(finite))} "
                       "hold a non-finite value (NaN or inf, or beyond float32's range); "
                       "pixels must be finite numbers")
  return x, y.astype(np.int32), 0


def read(*, num_clients: int, partition: str | None = "natural", partition_seed: int = 0,
         data_dir: str | None = None, settings=None) -> Read:
  """The Dataset of ``num_clients`` clients of the TFF files in ``data_dir`` (see the
  module docstring), with the kind, the client ids chosen and the labels dropped."""
  import h5py

  check_partition(NAME, partition)
  s = data_settings(settings)
  kind, d = _find(data_dir)
  spec = SPECS[kind]
  train_path, test_path = d / spec.train, d / spec.test
  dropped = 0
  try:
    with h5py.File(train_path, "r") as f:
      ex = _examples(f, train_path)
      ids = sorted(ex.keys())
      passages = None
      if kind == "shakespeare":
        passages = [_passages(_open(ex, c, train_path), train_path, c) for c in ids]
        counts = [_count(p) for p in passages]
      else:
        counts = [_field(_open(ex, c, train_path), spec.fields[1], train_path, c).shape[0]
                  for c in ids]
      chosen = choose(counts, num_clients, partition_seed, s.min_samples,
                      f"the clients of {train_path}")
      chosen_ids = [ids[i] for i in chosen]
      xs, ys = [], []
      for i, c in zip(chosen, chosen_ids):
        x, y, drop = _client(kind, _open(ex, c, train_path), train_path, c,
                             passages[i] if passages is not None else None)
        xs.append(x)
        ys.append(y)
        dropped += drop
    with h5py.File(test_path, "r") as f:
      ex = _examples(f, test_path)
      test_ids = sorted(ex.keys()) if kind == "cifar100" else [c for c in chosen_ids
                                                               if c in ex]
      parts = []
      for c in test_ids:
        x, y, drop = _client(kind, _open(ex, c, test_path), test_path, c)
        parts.append((x, y))
        dropped += drop
  except OSError as e:  # h5py's error for a file that is not HDF5
    raise UsageError(f"cannot read {train_path} or {test_path} as HDF5: {e}") from None
  test_x = np.concatenate([p[0] for p in parts]) if parts else None
  test_y = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int32)
  if test_y.shape[0] == 0:
    raise UsageError(f"the chosen clients have no test samples in {test_path}")
  test_x, test_y = subsample_test(test_x, test_y, s.test_examples, partition_seed)
  dataset = Dataset(name=NAME, train=FederatedData.from_clients(xs, ys), test_x=test_x,
                    test_y=test_y, num_classes=spec.num_classes,
                    feature_shape=spec.feature_shape, is_image=kind != "shakespeare",
                    vocab_size=text.VOCAB_SIZE if kind == "shakespeare" else 0)
  if dropped:
    _log.info("%s: %d samples dropped, their label out of LEAF's vocabulary", d, dropped)
  return Read(dataset=dataset, kind=kind, client_ids=tuple(chosen_ids), dropped=dropped)


def load(*, num_clients: int, partition: str | None, partition_seed: int,
         data_dir: str | None, cache_dir: str | None = None, settings=None) -> Dataset:
  """The loader of ``natural.LOADERS["tff_h5"]``; ``cache_dir`` is not used."""
  del cache_dir
  return read(num_clients=num_clients, partition=partition, partition_seed=partition_seed,
              data_dir=data_dir, settings=settings).dataset
