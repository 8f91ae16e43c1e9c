"""tff_h5: TFF's HDF5 client files, written here in TFF's layout with h5py."""

import h5py
import numpy as np
import pytest

from tests.conftest import one_line

from fedjax_bench.data import text, tff_h5
from fedjax_bench.data.settings import DataSettings
from fedjax_bench.errors import UsageError


def _write(path, clients):
  """TFF's HDF5ClientData layout: examples/<client id>/<feature> [n, ...]."""
  with h5py.File(path, "w") as f:
    ex = f.create_group("examples")
    for cid, feats in clients.items():
      g = ex.create_group(cid)
      for name, values in feats.items():
        if name == "snippets":
          g.create_dataset(name, data=np.array(values, dtype=object),
                           dtype=h5py.string_dtype())
        else:
          g.create_dataset(name, data=values)


def _emnist(rng, n, classes=62):
  return {"pixels": rng.uniform(0, 1, (n, 28, 28)).astype(np.float32),
          "label": rng.integers(0, classes, n).astype(np.int32)}


@pytest.fixture
def emnist(tmp_path):
  rng = np.random.default_rng(0)
  train = {c: _emnist(rng, n) for c, n in
           (("f0003_08", 2), ("f0000_14", 5), ("f0002_11", 1), ("f0001_41", 3))}
  test = {c: _emnist(rng, n) for c, n in (("f0000_14", 2), ("f0001_41", 1), ("f0003_08", 3))}
  _write(tmp_path / "fed_emnist_train.h5", train)
  _write(tmp_path / "fed_emnist_test.h5", test)
  return tmp_path, train, test


def _read(d, num_clients, seed=0, **kw):
  return tff_h5.read(num_clients=num_clients, partition="natural", partition_seed=seed,
                     data_dir=str(d), settings=DataSettings(**kw) if kw else None)


def test_emnist(emnist):
  d, train, test = emnist
  r = _read(d, 4, min_samples=1)
  ds = r.dataset
  assert r.kind == "emnist" and r.dropped == 0
  assert r.client_ids == ("f0000_14", "f0001_41", "f0002_11", "f0003_08")  # sorted ids
  assert ds.train.counts.tolist() == [5, 3, 1, 2]
  assert ds.name == "tff_h5" and ds.num_classes == 62 and ds.is_image
  assert ds.feature_shape == (28, 28, 1) and ds.vocab_size == 0
  assert ds.train.x.dtype == np.float32 and ds.train.y.dtype == np.int32
  for i, c in enumerate(r.client_ids):
    x, y = ds.train.client(i)
    np.testing.assert_array_equal(x, train[c]["pixels"][..., None])  # TFF's values kept
    np.testing.assert_array_equal(y, train[c]["label"])
  # f0002_11 is not in the test file: no test samples
  order = ["f0000_14", "f0001_41", "f0003_08"]
  np.testing.assert_array_equal(ds.test_x,
                                np.concatenate([test[c]["pixels"] for c in order])[..., None])
  np.testing.assert_array_equal(ds.test_y, np.concatenate([test[c]["label"] for c in order]))
  assert ds.test_x.dtype == np.float32 and ds.test_y.dtype == np.int32
  loaded = tff_h5.load(num_clients=4, partition=None, partition_seed=0, data_dir=str(d),
                       cache_dir=None, settings=DataSettings(min_samples=1))
  assert loaded.report() == ds.report()


def test_subsets(emnist):
  d, train, test = emnist
  assert _read(d, 3, min_samples=2).client_ids == ("f0000_14", "f0001_41", "f0003_08")
  assert _read(d, 1, min_samples=4).client_ids == ("f0000_14",)
  with pytest.raises(UsageError, match="number 3 with at least 2 training samples"):
    _read(d, 4, min_samples=2)
  drawn = {_read(d, 2, seed=s, min_samples=1).client_ids for s in range(12)}
  assert len(drawn) > 2 and all(list(ids) == sorted(ids) for ids in drawn)
  r = _read(d, 2, seed=5, min_samples=1)
  assert r.client_ids == _read(d, 2, seed=5, min_samples=1).client_ids
  want = [c for c in r.client_ids if c in test]
  np.testing.assert_array_equal(r.dataset.test_y,
                                np.concatenate([test[c]["label"] for c in want]))
  full = _read(d, 4, min_samples=1).dataset
  sub = _read(d, 4, seed=2, min_samples=1, test_examples=3).dataset
  assert sub.test_x.shape == (3, 28, 28, 1)
  rows = [int(np.flatnonzero((full.test_x == x).all(axis=(1, 2, 3)))[0]) for x in sub.test_x]
  assert rows == sorted(rows) and len(set(rows)) == 3
  np.testing.assert_array_equal(sub.test_y, full.test_y[rows])


def test_emnist_digits(tmp_path):
  rng = np.random.default_rng(1)
  clients = {c: _emnist(rng, 3, classes=10) for c in ("f0000_14", "f0001_41", "f0002_11")}
  _write(tmp_path / "fed_emnist_digitsonly_train.h5", clients)
  _write(tmp_path / "fed_emnist_digitsonly_test.h5", clients)
  r = _read(tmp_path, 3)
  assert r.kind == "emnist_digitsonly" and r.dataset.num_classes == 10
  assert r.dataset.test_y.shape == (9,)


def test_shakespeare(tmp_path):
  train = {"THE_TRAGEDY_OF_KING_LEAR_MACBETH": [b"Hark!", b"When?", b"My name's Macbeth."],
           "MUCH_ADO_ABOUT_NOTHING_EMILIA": [b"Never.", "caf\u00e9 %".encode()],
           "THE_TAMING_OF_THE_SHREW_CUPID": [b"Hail to thee, worthy Timon, and to all"]}
  test = {"MUCH_ADO_ABOUT_NOTHING_EMILIA": [b"But now, my lord."],
          "THE_TAMING_OF_THE_SHREW_CUPID": [b"[Within.] I do beseech you"]}
  _write(tmp_path / "shakespeare_train.h5", {c: {"snippets": s} for c, s in train.items()})
  _write(tmp_path / "shakespeare_test.h5", {c: {"snippets": s} for c, s in test.items()})
  r = _read(tmp_path, 3)
  ds = r.dataset
  ids = sorted(train)
  assert r.kind == "shakespeare" and r.client_ids == tuple(ids)
  assert ds.num_classes == text.VOCAB_SIZE and ds.vocab_size == text.VOCAB_SIZE
  assert not ds.is_image and ds.feature_shape == (80,)
  assert ds.train.x.dtype == np.int8 and ds.train.y.dtype == np.int32
  dropped = 0
  for i, c in enumerate(ids):
    x, y, drop = text.samples([s.decode() for s in train[c]])
    dropped += drop
    got_x, got_y = ds.train.client(i)
    np.testing.assert_array_equal(got_x, x)
    np.testing.assert_array_equal(got_y, y)
  assert dropped == 2 and r.dropped == 2  # "é" and "%" are not LEAF's characters
  # the sample count (min_samples) is text.samples' count: 7 + 5 ... without the OOV labels
  assert ds.train.counts.tolist() == [len("Never.\n") + len("caf \n"),
                                      len("Hail to thee, worthy Timon, and to all\n"),
                                      len("Hark!\nWhen?\nMy name's Macbeth.\n")]
  x, y, _ = text.samples([test[c][0].decode() for c in ids if c in test])
  np.testing.assert_array_equal(ds.test_x, x)
  np.testing.assert_array_equal(ds.test_y, y)
  assert _read(tmp_path, 1, min_samples=30).client_ids == (ids[1], )


def test_cifar100(tmp_path):
  rng = np.random.default_rng(2)

  def clients(ids, n):
    return {c: {"coarse_label": rng.integers(0, 20, n).astype(np.int64),
                "image": rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8),
                "label": rng.integers(0, 100, n).astype(np.int64)} for c in ids}
  train = clients(["0", "1", "2", "10"], 3)
  test = clients(["0", "1"], 2)
  _write(tmp_path / "fed_cifar100_train.h5", train)
  _write(tmp_path / "fed_cifar100_test.h5", test)
  r = _read(tmp_path, 4)
  ds = r.dataset
  assert r.kind == "cifar100" and r.client_ids == ("0", "1", "10", "2")  # TFF's string order
  assert ds.num_classes == 100 and ds.is_image and ds.feature_shape == (32, 32, 3)
  assert ds.train.x.dtype == np.uint8 and ds.train.y.dtype == np.int32
  np.testing.assert_array_equal(ds.train.client(2)[0], train["10"]["image"])
  np.testing.assert_array_equal(ds.train.client(2)[1], train["10"]["label"])  # fine labels
  assert ds.normalize is None and ds.augmentation == "none"
  # the test clients are not the train clients: the test set is the whole test file
  for chosen in (_read(tmp_path, 4), _read(tmp_path, 1, seed=3)):
    np.testing.assert_array_equal(chosen.dataset.test_x,
                                  np.concatenate([test["0"]["image"], test["1"]["image"]]))
    np.testing.assert_array_equal(chosen.dataset.test_y,
                                  np.concatenate([test["0"]["label"], test["1"]["label"]]))
  assert _read(tmp_path, 4, test_examples=3).dataset.test_y.shape == (3,)


def test_errors(emnist, tmp_path):
  d, _, _ = emnist
  with pytest.raises(UsageError) as e:
    tff_h5.read(num_clients=2, data_dir=None)
  msg = one_line(e)
  assert "needs --data_dir" in msg and "fed_emnist_train.h5 and fed_emnist_test.h5" in msg
  assert "tff.simulation.datasets.shakespeare.load_data()" in msg
  assert "https://storage.googleapis.com/tff-datasets-public/fed_cifar100.tar.bz2" in msg
  with pytest.raises(UsageError) as e:
    _read(tmp_path / "nowhere", 2)
  assert "is not a directory" in one_line(e)
  empty = tmp_path / "empty"
  empty.mkdir()
  with pytest.raises(UsageError) as e:
    _read(empty, 2)
  assert "holds none of TFF's pairs" in one_line(e)
  _write(empty / "shakespeare_train.h5", {"A": {"snippets": [b"x"]}})
  with pytest.raises(UsageError) as e:
    _read(empty, 1)
  assert "has shakespeare_train.h5 but not shakespeare_test.h5" in one_line(e)
  with pytest.raises(UsageError) as e:
    tff_h5.read(num_clients=2, partition="dirichlet", data_dir=str(d))
  assert "--partition must be natural" in one_line(e)
  with pytest.raises(UsageError) as e:
    _read(d, 5, min_samples=1)
  assert "--num_clients=5 is more than there are" in one_line(e)
  assert "number 4 with at least 1" in str(e.value)
  both = tmp_path / "both"
  both.mkdir()
  for name in ("fed_emnist_train.h5", "fed_emnist_test.h5", "fed_emnist_digitsonly_train.h5",
               "fed_emnist_digitsonly_test.h5"):
    (both / name).write_bytes((d / name.replace("_digitsonly", "")).read_bytes())
  with pytest.raises(UsageError) as e:
    _read(both, 1)
  assert "several TFF datasets" in one_line(e)
  # not TFF's fields, not HDF5
  odd = tmp_path / "odd"
  odd.mkdir()
  _write(odd / "fed_emnist_train.h5", {"a": {"image": np.zeros((2, 28, 28)),
                                             "labels": np.zeros(2, np.int32)}})
  _write(odd / "fed_emnist_test.h5", {})
  with pytest.raises(UsageError) as e:
    _read(odd, 1)
  assert "client 'a' has no dataset 'label' (it has image, labels)" in one_line(e)
  (odd / "fed_emnist_train.h5").write_text("not hdf5")
  with pytest.raises(UsageError) as e:
    _read(odd, 1)
  assert "as HDF5" in one_line(e)


def _edit(path, edit):
  with h5py.File(path, "r+") as f:
    edit(f)


@pytest.mark.parametrize("split", ["train", "test"])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf, 1e39])
def test_non_finite_pixels_are_refused(emnist, split, value):
  """NaN or inf pixels (or float64 beyond float32's range) are refused at load, naming the
  file, the client and the sample, not trained on."""
  d, _, _ = emnist
  path = d / f"fed_emnist_{split}.h5"

  def poison(f):
    pixels = f["examples/f0001_41/pixels"][()].astype(np.float64)
    pixels[-1, 3, 4] = value  # f0001_41 has 3 training samples, 1 test sample
    del f["examples/f0001_41/pixels"]
    f["examples/f0001_41/pixels"] = pixels
  _edit(path, poison)
  with pytest.raises(UsageError) as e:
    _read(d, 4, min_samples=1)
  sample = 2 if split == "train" else 0
  assert one_line(e).startswith(f"{path}: client 'f0001_41''s pixels of sample {sample} "
                                "hold a non-finite value")


def test_pixels_that_are_not_numbers_are_refused(emnist):
  d, _, _ = emnist
  path = d / "fed_emnist_train.h5"

  def strings(f):
    del f["examples/f0001_41/pixels"]
    f["examples/f0001_41/pixels"] = np.full((3, 28, 28), b"a", "S1")
  _edit(path, strings)
  with pytest.raises(UsageError) as e:
    _read(d, 4, min_samples=1)
  assert one_line(e) == f"{path}: client 'f0001_41''s pixels are |S1, not numbers"


@pytest.mark.parametrize("field", ["label", "pixels"])
def test_scalar_datasets_are_refused(emnist, field):
  d, _, _ = emnist
  path = d / "fed_emnist_train.h5"

  def scalar(f):
    del f[f"examples/f0002_11/{field}"]
    f[f"examples/f0002_11/{field}"] = np.int32(3)
  _edit(path, scalar)
  with pytest.raises(UsageError) as e:
    _read(d, 4, min_samples=1)
  assert one_line(e) == (f"{path}: client 'f0002_11''s {field} is a scalar, not a dataset "
                         "of one row per sample")


@pytest.mark.parametrize("split", ["train", "test"])
@pytest.mark.parametrize("where", ["examples/f0001_41/label", "examples/f0001_41",
                                   "examples"])
@pytest.mark.parametrize("link", ["soft", "external"])
def test_dangling_links_are_one_line(emnist, tmp_path, split, where, link):
  d, _, _ = emnist
  path = d / f"fed_emnist_{split}.h5"
  target = (h5py.SoftLink("/nowhere") if link == "soft"
            else h5py.ExternalLink(str(tmp_path / "gone.h5"), "/examples"))

  def dangle(f):
    del f[where]
    f[where] = target
  _edit(path, dangle)
  with pytest.raises(UsageError) as e:
    _read(d, 4, min_samples=1)
  says = ("a soft link to /nowhere, which does not exist" if link == "soft" else
          f"an external link to {tmp_path / 'gone.h5'}:/examples, which cannot be opened")
  assert one_line(e).startswith(f"{path}: /{where} is {says}")


def test_a_dangling_client_link_in_shakespeare(tmp_path):
  _write(tmp_path / "shakespeare_train.h5", {"A": {"snippets": [b"To be."]}})
  _write(tmp_path / "shakespeare_test.h5", {"A": {"snippets": [b"Or not."]}})
  _edit(tmp_path / "shakespeare_train.h5",
        lambda f: f.__setitem__("examples/B", h5py.SoftLink("/nowhere")))
  with pytest.raises(UsageError) as e:
    _read(tmp_path, 1, min_samples=1)
  assert one_line(e).startswith(f"{tmp_path / 'shakespeare_train.h5'}: /examples/B is a "
                                "soft link to /nowhere")


@pytest.mark.parametrize("labels,says", [
    (np.array([0, 62, 1]), r"labels must be in \[0, 62\), found 0\.\.62"),
    (np.array([0, -1, 1]), r"labels must be in \[0, 62\), found -1\.\.1"),
    (np.array([0.0, 1.0, 2.0]), "label are float64, not integer labels"),
    (np.array([True, False, True]), "label are bool, not integer labels"),
])
def test_bad_labels_are_refused(emnist, labels, says):
  d, _, _ = emnist
  path = d / "fed_emnist_train.h5"

  def relabel(f):
    del f["examples/f0001_41/label"]
    f["examples/f0001_41/label"] = labels
  _edit(path, relabel)
  with pytest.raises(UsageError, match=f"^{path}: client 'f0001_41''s {says}$") as e:
    _read(d, 4, min_samples=1)
  one_line(e)
