"""LEAF's federated datasets as its scripts write them (``--dataset=leaf_json --data_dir=DIR``).

DIR is a LEAF dataset's ``data/`` directory (e.g. ``leaf/data/femnist/data``) after its
``preprocess.sh`` with ``-t sample``: ``train/*.json`` and ``test/*.json``, each file
``{"users": [...], ("hierarchies": [...],) "num_samples": [...], "user_data": {user:
{"x": [...], "y": [...]}}}``. A user is a client; ``users`` (not ``user_data``, which
also lists the users LEAF's split dropped, with no samples) says who is in a file.
Clients are in file order (file names sorted), then in ``users`` order. ``hierarchies``
is not used.

The kind of data is told from the first sample found (``detect``), which also decides
the arrays:

* FEMNIST (x: 784 numbers, y: an integer): 28x28x1 float32 images with LEAF's values
  (pixel / 255 of the grayscale character: 1.0 is the white background, as in TFF's
  files), 62 classes (0-9 digits, 10-35 upper case, 36-61 lower case).
* Shakespeare (x: a string, y: a string of one character): the 80 characters as int8
  ids of ``text`` (LEAF's windows are kept as they are; a shorter one is left-padded with
  ``text.PAD``), the label the id of y; a label outside LEAF's 80 characters is dropped
  and counted (``Read.dropped``), as ``text.samples`` does. ``num_classes`` and
  ``vocab_size`` are ``text.VOCAB_SIZE``.
* Sent140 (x: ``[id, date, query, user, text]``, y: 0/1): the tweet's characters as
  ``text`` ids, 80 of them (left-padded with ``text.PAD``; a longer tweet keeps its last
  80), ``vocab_size = text.VOCAB_SIZE``, 2 classes. (LEAF's own models read Sent140 as
  words with GloVe embeddings; here it is character text for the char models.)
* CelebA (x: an image file name, y: 0/1, "Smiling"): the images read from
  ``DIR/raw/img_align_celeba/``, where LEAF's README puts them and its CelebA model reads
  them (a name that leads out of it, absolute or by ``..``, is refused), resized to 84x84
  and converted to RGB as that model does (``resize`` then ``convert``; the filter is
  Pillow's default for resize, bicubic, named explicitly), uint8 NHWC, 2 classes.

Train samples come from ``train/``, test samples from ``test/`` under the same user.
The central test set is the chosen clients' test samples, in client order; when no user
of ``test/`` is a user of ``train/`` (LEAF's ``-t user`` split) it is every user of
``test/`` instead. ``settings.test_examples > 0`` keeps a random subset of that many
(``natural.subsample_test``).

Reading: a first pass reads only each file's head (``users``, ``num_samples``, and for
the kind one user's data), chooses the clients (``choose``), then each file that holds a
chosen client is parsed once and only its chosen users are converted. A file whose
``user_data`` comes before ``users`` (LEAF writes it last) is parsed whole in the first
pass too. Nothing is cached. Clients are chosen and the test set subsampled by
``natural.choose`` and ``natural.subsample_test``, as for every dataset with its own
clients.
"""

import concurrent.futures
import dataclasses
import json
import logging
import os
import pathlib
import re

import numpy as np

from fedjax_bench.data import text
from fedjax_bench.data.natural import check_partition, choose, data_settings, subsample_test
from fedjax_bench.data.federated import Dataset, FederatedData
from fedjax_bench.errors import UsageError

NAME = "leaf_json"
KINDS = ("femnist", "shakespeare", "sent140", "celeba")
NUM_CLASSES = {"femnist": 62, "shakespeare": text.VOCAB_SIZE, "sent140": 2, "celeba": 2}
FEMNIST_SIDE = 28
SENT140_LEN = 80
CELEBA_SIZE = 84  # LEAF's models/celeba/cnn.py IMAGE_SIZE
CELEBA_IMAGES = pathlib.Path("raw") / "img_align_celeba"
_WHERE = ("written by LEAF's preprocess.sh with -t sample (github.com/TalwalkarLab/leaf: "
          "data/<dataset>/preprocess.sh, e.g. ./preprocess.sh -s niid --sf 1.0 -k 0 -t sample "
          "in data/femnist)")
_log = logging.getLogger(__name__)


def fixed_length(strings, length: int) -> np.ndarray:
  """[n, length] int8 ``text`` ids of each string's last ``length`` characters,
  left-padded with ``text.PAD``."""
  out = np.full((len(strings), length), text.PAD, np.int8)
  if strings and all(len(s) == length for s in strings):
    return text.encode("".join(strings)).reshape(len(strings), length)
  for i, s in enumerate(strings):
    ids = text.encode(s[-length:]) if s else np.zeros(0, np.int8)
    out[i, length - ids.shape[0]:] = ids
  return out


# ---- reading a file's head ----------------------------------------------------------------

class _NotLeafOrder(Exception):
  """The head cannot be read without parsing user_data: parse the file whole."""


_WS = re.compile(r"[ \t\n\r]*")
_FIRST_CHUNK = 1 << 16  # characters; doubled at each read
_DECODER = json.JSONDecoder()


class _Stream:
  """Reads JSON values one after another from a file, only as far as asked."""

  def __init__(self, f):
    self.f, self.buf, self.pos, self.eof, self.chunk = f, "", 0, False, _FIRST_CHUNK

  def _more(self):
    data = self.f.read(self.chunk)
    self.chunk = min(2 * self.chunk, 1 << 26)
    self.eof = not data
    self.buf = self.buf[self.pos:] + data
    self.pos = 0

  def peek(self) -> str:
    while True:
      self.pos = _WS.match(self.buf, self.pos).end()
      if self.pos < len(self.buf):
        return self.buf[self.pos]
      if self.eof:
        raise _NotLeafOrder("unexpected end")
      self._more()

  def char(self, allowed: str) -> str:
    c = self.peek()
    if c not in allowed:
      raise _NotLeafOrder(f"expected one of {allowed!r}, found {c!r}")
    self.pos += 1
    return c

  def value(self):
    self.peek()
    while True:
      try:
        v, end = _DECODER.raw_decode(self.buf, self.pos)
        if end < len(self.buf) or self.eof:  # a number cut by the buffer's end may go on
          self.pos = end
          return v
      except json.JSONDecodeError:
        if self.eof:
          raise
      self._more()


@dataclasses.dataclass
class _File:
  path: pathlib.Path
  users: list
  num_samples: list
  first: tuple | None  # (x, y) of the first sample of user_data, if looked for and found


def _first_in(user_data: dict):
  for d in user_data.values():
    if isinstance(d, dict) and d.get("x"):
      return d["x"][0], (d.get("y") or [None])[0]
  return None


def _scan(path: pathlib.Path, want_first: bool) -> _File:
  with open(path, encoding="utf-8") as f:
    s = _Stream(f)
    s.char("{")
    head = {}
    if s.peek() == "}":
      raise _NotLeafOrder("empty")
    while True:
      key = s.value()
      s.char(":")
      if key == "user_data":
        break
      head[key] = s.value()
      if s.char(",}") == "}":
        raise _NotLeafOrder("no user_data")
    if "users" not in head or "num_samples" not in head:
      raise _NotLeafOrder("user_data first")
    first = None
    if want_first:
      s.char("{")
      while s.peek() != "}":
        s.value()
        s.char(":")
        first = _first_in({0: s.value()})
        if first is not None or s.char(",}") == "}":
          break
  return _File(path, head["users"], head["num_samples"], first)


def _parse(path: pathlib.Path) -> dict:
  try:
    with open(path, encoding="utf-8") as f:
      data = json.load(f)
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise UsageError(f"{path} is not valid JSON ({e})") from None
  except RecursionError:
    raise UsageError(f"{path} nests lists or objects too deeply to be a LEAF data file "
                     "(more than Python's recursion limit)") from None
  if not isinstance(data, dict) or not isinstance(data.get("users"), list) or not isinstance(
      data.get("user_data"), dict):
    raise UsageError(f"{path} is not a LEAF data file: it needs \"users\" (a list) and "
                     "\"user_data\" (an object)")
  return data


def _head(path: pathlib.Path, want_first: bool) -> _File:
  try:
    info = _scan(path, want_first)
  except (_NotLeafOrder, json.JSONDecodeError, UnicodeDecodeError, RecursionError):
    data = _parse(path)
    users = data["users"]
    ns = data.get("num_samples")
    if ns is None:
      ns = [len(data["user_data"].get(u, {}).get("y", [])) for u in users]
    info = _File(path, users, ns, _first_in(data["user_data"]) if want_first else None)
  if (not isinstance(info.users, list) or not isinstance(info.num_samples, list)
      or len(info.users) != len(info.num_samples)):
    raise UsageError(f"{path}: \"users\" and \"num_samples\" must be lists of one length")
  if not all(isinstance(u, str) for u in info.users):
    raise UsageError(f"{path}: \"users\" must be strings (the keys of \"user_data\")")
  if not all(isinstance(n, int) and n >= 0 for n in info.num_samples):
    raise UsageError(f"{path}: \"num_samples\" must be counts")
  return info


# ---- the kinds ----------------------------------------------------------------------------

def _number(v) -> bool:
  return isinstance(v, (int, float)) and not isinstance(v, bool)


def detect(x, y) -> str | None:
  """The kind of a sample (one of KINDS), or None.

  x a string: Shakespeare when y is a string too, CelebA (x an image file name) when y
  is a number. x a list: FEMNIST when it is 784 numbers, Sent140 when it is 5 items
  (``[id, date, query, user, text]``) whose last is a string.
  """
  if isinstance(x, str):
    if isinstance(y, str):
      return "shakespeare"
    if _number(y):
      return "celeba"
  elif isinstance(x, list):
    if len(x) == FEMNIST_SIDE * FEMNIST_SIDE and all(_number(v) for v in x):
      return "femnist"
    if len(x) == 5 and isinstance(x[4], str):
      return "sent140"
  return None


def _looks(kind: str, x, y) -> bool:
  """A cheap check that a sample is of ``kind`` (FEMNIST's numbers are checked by NumPy)."""
  if kind == "femnist":
    return isinstance(x, list) and len(x) == FEMNIST_SIDE * FEMNIST_SIDE
  if kind == "sent140":
    return isinstance(x, list) and len(x) == 5 and isinstance(x[4], str)
  return isinstance(x, str) and (isinstance(y, str) if kind == "shakespeare" else _number(y))


def _describe(v) -> str:
  if isinstance(v, str):
    return f"a string of {len(v)} characters"
  if isinstance(v, list):
    return f"a list of {len(v)}"
  return type(v).__name__


def _labels(ys, n: int, where: str) -> np.ndarray:
  y = np.asarray(ys)
  if y.shape != (len(ys),) or not (np.issubdtype(y.dtype, np.integer) or np.issubdtype(
      y.dtype, np.floating) or y.dtype == bool):
    raise UsageError(f"{where}: y must be integer labels")
  bad = ~np.isfinite(y) | (y != np.round(y))
  if bad.any():
    i = int(np.argmax(bad))
    raise UsageError(f"{where}: y must be integer labels; sample {i}'s is {ys[i]!r}")
  y = y.astype(np.int64)
  if y.size and (y.min() < 0 or y.max() >= n):
    raise UsageError(f"{where}: labels must be in [0, {n}), found {y.min()}..{y.max()}")
  return y.astype(np.int32)


def _inside(name: str) -> bool:
  """Whether an image name, taken as a path under the images directory, stays there."""
  norm = os.path.normpath(name)
  return bool(name) and "\0" not in name and not os.path.isabs(norm) and norm != ".." and (
      not norm.startswith(".." + os.sep)) and norm != "."


class _Converter:
  """A user's raw x, y -> (x, y, dropped labels) arrays of ``kind``."""

  def __init__(self, kind: str, data_dir: pathlib.Path):
    self.kind, self.images = kind, data_dir / CELEBA_IMAGES

  @property
  def feature_shape(self) -> tuple[int, ...]:
    return {"femnist": (FEMNIST_SIDE, FEMNIST_SIDE, 1), "shakespeare": (text.SEQ_LEN,),
            "sent140": (SENT140_LEN,), "celeba": (CELEBA_SIZE, CELEBA_SIZE, 3)}[self.kind]

  def __call__(self, xs: list, ys: list, where: str):
    if not isinstance(xs, list) or not isinstance(ys, list) or len(xs) != len(ys):
      raise UsageError(f"{where}: x and y must be lists of one length")
    kind, n = self.kind, len(ys)
    bad = next((i for i, (a, b) in enumerate(zip(xs, ys)) if not _looks(kind, a, b)), None)
    if bad is not None:
      raise UsageError(f"{where}: sample {bad} (x: {_describe(xs[bad])}, y: "
                       f"{_describe(ys[bad])}) is not {kind} like the first sample")
    dropped = 0
    if kind == "femnist":
      try:
        with np.errstate(over="ignore"):  # a number beyond float32 becomes inf, refused below
          x = (np.asarray(xs, np.float32) if n  # an empty user's [] has shape (0,)
               else np.zeros((0, FEMNIST_SIDE * FEMNIST_SIDE), np.float32))
      except (ValueError, TypeError):
        x = None
      if x is None or x.shape != (n, FEMNIST_SIDE * FEMNIST_SIDE):
        raise UsageError(f"{where}: FEMNIST's x must be lists of {FEMNIST_SIDE ** 2} numbers")
      finite = np.isfinite(x).all(axis=1)
      if not finite.all():
        bad = int(np.argmin(finite))
        raise UsageError(f"{where}: sample {bad}'s x holds a non-finite value (NaN, inf, "
                         "null or beyond float32's range); pixels must be finite numbers")
      x = x.reshape((n,) + self.feature_shape)
      y = _labels(ys, NUM_CLASSES[kind], where)
    elif kind == "shakespeare":
      if any(len(c) != 1 for c in ys):
        raise UsageError(f"{where}: y must be single characters")
      x = fixed_length(xs, text.SEQ_LEN)
      y = text.encode("".join(ys)).astype(np.int32)
      keep = y != text.OOV
      dropped = int(n - keep.sum())
      x, y = x[keep], y[keep]
    elif kind == "sent140":
      x = fixed_length([row[4] for row in xs], SENT140_LEN)
      y = _labels(ys, 2, where)
    else:
      y = _labels(ys, 2, where)
      bad = next((i for i, name in enumerate(xs) if not _inside(name)), None)
      if bad is not None:
        raise UsageError(f"{where}: sample {bad}'s image name {xs[bad]!r} is not a file "
                         f"name inside {self.images}/ (it is empty, absolute or leads out "
                         "by '..'); LEAF's CelebA names files there, such as 000001.jpg")
      x = self._images(xs)
    return x, y, dropped

  def _images(self, names: list) -> np.ndarray:
    x = np.empty((len(names),) + self.feature_shape, np.uint8)
    if not names:
      return x
    with concurrent.futures.ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:
      for i, image in enumerate(pool.map(self._image, names)):
        x[i] = image
    return x

  def _image(self, name: str) -> np.ndarray:
    from PIL import Image
    path = self.images / os.path.normpath(name)  # what `_inside` checked
    try:
      with Image.open(path) as im:  # as LEAF's models/celeba/cnn.py: resize, then RGB
        im = im.resize((CELEBA_SIZE, CELEBA_SIZE), Image.Resampling.BICUBIC).convert("RGB")
        return np.asarray(im, np.uint8)
    except FileNotFoundError:
      raise UsageError(f"CelebA image {path} is missing (the JSON names it)") from None
    except OSError as e:
      raise UsageError(f"cannot read CelebA image {path}: {e}") from None


# ---- the loader ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Read:
  """What ``read`` found besides the Dataset."""
  dataset: Dataset
  kind: str             # one of KINDS
  client_ids: tuple     # the chosen users, in client order
  dropped: int          # Shakespeare: train and test samples whose label was out of vocabulary


def _json_files(d: pathlib.Path) -> list[pathlib.Path]:
  return sorted(p for p in d.iterdir() if p.name.endswith(".json") and p.is_file())


def _files(data_dir) -> tuple[pathlib.Path, list[pathlib.Path], list[pathlib.Path]]:
  expect = f"a LEAF dataset's data/ directory, holding train/*.json and test/*.json {_WHERE}"
  if not data_dir:
    raise UsageError(f"--dataset={NAME} needs --data_dir: {expect}")
  d = pathlib.Path(data_dir)
  if not d.is_dir():
    raise UsageError(f"--data_dir={data_dir} is not a directory; give {expect}")
  found = {s: _json_files(d / s) if (d / s).is_dir() else [] for s in ("train", "test")}
  missing = [f"{s}/*.json" for s, v in found.items() if not v]
  if missing:
    raise UsageError(f"--data_dir={data_dir} has no {' nor '.join(missing)}; give {expect}")
  return d, found["train"], found["test"]


def read(*, num_clients: int, partition: str | None = "natural", partition_seed: int = 0,
         data_dir: str | None = None, settings=None) -> Read:
  """The Dataset of ``num_clients`` users of the LEAF data in ``data_dir`` (see the module
  docstring), with the kind, the users chosen and the labels dropped."""
  check_partition(NAME, partition)
  s = data_settings(settings)
  d, train_files, test_files = _files(data_dir)

  heads, kind, first = [], None, None
  for path in train_files:
    heads.append(_head(path, want_first=kind is None))
    if kind is None and heads[-1].first is not None:
      first = heads[-1].first
      kind = detect(*first)
      if kind is None:
        raise UsageError(f"cannot tell which LEAF dataset {path} holds: its first sample has "
                         f"x: {_describe(first[0])}, y: {_describe(first[1])}; {NAME} reads "
                         "FEMNIST (x: 784 numbers), Shakespeare (x: a string, y: a "
                         "character), Sent140 (x: [id, date, query, user, text]) and CelebA "
                         "(x: an image file name, y: 0/1)")
  if kind is None:
    raise UsageError(f"the users of {d / 'train'} have no samples: nothing to tell the "
                     "dataset by, nor to train on")
  converter = _Converter(kind, d)
  if kind == "celeba" and not converter.images.is_dir():
    raise UsageError(f"{d} holds LEAF's CelebA, whose images are read from "
                     f"{converter.images}/ (LEAF's layout): put the aligned CelebA images "
                     "(img_align_celeba, from mmlab.ie.cuhk.edu.hk/projects/CelebA.html) there")

  owner, counts = {}, []
  for fi, h in enumerate(heads):
    for u, n in zip(h.users, h.num_samples):
      if u in owner:
        raise UsageError(f"user {u!r} is in both {heads[owner[u][0]].path.name} and "
                         f"{h.path.name} of {d / 'train'}")
      owner[u] = (fi, len(counts))
      counts.append(n)
  users = [u for h in heads for u in h.users]
  chosen = choose(counts, num_clients, partition_seed, s.min_samples, f"the users of {d}")
  chosen_users = [users[i] for i in chosen]

  dropped = 0
  train = {}
  by_file = {}
  for u in chosen_users:
    by_file.setdefault(owner[u][0], []).append(u)
  for fi, us in sorted(by_file.items()):
    data = _parse(heads[fi].path)
    for u in us:
      ud = data["user_data"].get(u)
      where = f"{heads[fi].path}, user {u!r}"
      if not isinstance(ud, dict):
        raise UsageError(f"{where}: listed in \"users\" but not in \"user_data\"")
      n = counts[owner[u][1]]
      if len(ud.get("y", [])) != n:
        raise UsageError(f"{where}: \"num_samples\" says {n} samples, \"user_data\" holds "
                         f"{len(ud.get('y', []))}")
      x, y, drop = converter(ud.get("x", []), ud.get("y", []), where)
      train[u], dropped = (x, y), dropped + drop
    del data

  test_heads = [_head(p, want_first=False) for p in test_files]
  test_users = {u for h in test_heads for u in h.users}
  by_user = not test_users & set(users)  # LEAF's -t user split: test users are others
  wanted = test_users if by_user else set(chosen_users)
  test = {}
  for h in test_heads:
    us = [u for u in h.users if u in wanted]
    if not us:
      continue
    data = _parse(h.path)
    for u in us:
      ud = data["user_data"].get(u)
      where = f"{h.path}, user {u!r}"
      if not isinstance(ud, dict):
        raise UsageError(f"{where}: listed in \"users\" but not in \"user_data\"")
      x, y, drop = converter(ud.get("x", []), ud.get("y", []), where)
      test.setdefault(u, []).append((x, y))
      dropped += drop
    del data
  order = ([u for h in test_heads for u in h.users if u in test] if by_user
           else [u for u in chosen_users if u in test])
  parts = [p for u in order for p in test[u]]
  shape = converter.feature_shape
  dtype = {"femnist": np.float32, "celeba": np.uint8}.get(kind, np.int8)
  test_x = (np.concatenate([p[0] for p in parts]) if parts
            else np.zeros((0,) + shape, dtype))
  test_y = (np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int32))
  if test_y.shape[0] == 0:
    raise UsageError(f"the chosen users have no test samples in {d / 'test'}")
  test_x, test_y = subsample_test(test_x, test_y, s.test_examples, partition_seed)

  xs = [train[u][0] for u in chosen_users]
  ys = [train[u][1] for u in chosen_users]
  tokens = kind in ("shakespeare", "sent140")
  dataset = Dataset(name=NAME, train=FederatedData.from_clients(xs, ys), test_x=test_x,
                    test_y=test_y.astype(np.int32), num_classes=NUM_CLASSES[kind],
                    feature_shape=shape, is_image=kind in ("femnist", "celeba"),
                    vocab_size=text.VOCAB_SIZE if tokens else 0)
  if dropped:
    _log.info("%s: %d %s samples dropped, their label out of LEAF's vocabulary", d, dropped,
              kind)
  return Read(dataset=dataset, kind=kind, client_ids=tuple(chosen_users), dropped=dropped)


def load(*, num_clients: int, partition: str | None, partition_seed: int,
         data_dir: str | None, cache_dir: str | None = None, settings=None) -> Dataset:
  """The loader of ``natural.LOADERS["leaf_json"]``; ``cache_dir`` is not used."""
  del cache_dir
  return read(num_clients=num_clients, partition=partition, partition_seed=partition_seed,
              data_dir=data_dir, settings=settings).dataset
