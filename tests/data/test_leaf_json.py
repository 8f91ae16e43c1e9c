"""leaf_json: LEAF's train/ and test/ JSON files, written here as LEAF's scripts write them."""

import json
import re

import numpy as np
import pytest
from PIL import Image

from tests.conftest import one_line

from fedjax_bench.data import leaf_json, text
from fedjax_bench.data.settings import DataSettings
from fedjax_bench.errors import UsageError

TRAIN, TEST = "train", "test"


def _write(path, users, data, hierarchies=None, extra=(), user_data_first=False):
  """A LEAF file: users, (hierarchies,) num_samples, user_data in split_data.py's key order;
  ``extra`` users appear in user_data only, empty, as split_data.py leaves dropped users."""
  user_data = {u: {"x": data[u][0], "y": data[u][1]} for u in users}
  user_data.update({u: {"x": [], "y": []} for u in extra})
  head = {"users": list(users)}
  if hierarchies is not None:
    head["hierarchies"] = hierarchies
  head["num_samples"] = [len(data[u][1]) for u in users]
  obj = {"user_data": user_data, **head} if user_data_first else {**head,
                                                                   "user_data": user_data}
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(obj))


def _femnist_sample(rng, n):
  x = np.round(rng.uniform(0, 1, (n, 784)), 6)
  x[:, :100] = 1.0  # LEAF's white background
  return x.tolist(), rng.integers(0, 62, n).tolist()


@pytest.fixture
def femnist(tmp_path):
  """Two train files of 2 users each (an empty dropped user in the first), their tests."""
  rng = np.random.default_rng(0)
  sizes = {"f0000_14": (5, 2), "f0001_41": (1, 1), "f0100_10": (3, 1), "f0101_22": (4, 2)}
  train = {u: _femnist_sample(rng, a) for u, (a, b) in sizes.items()}
  test = {u: _femnist_sample(rng, b) for u, (a, b) in sizes.items()}
  d = tmp_path / "data"
  names = ["all_data_0_niid_05_keep_0_{}_9.json", "all_data_1_niid_05_keep_0_{}_9.json"]
  for split, data in ((TRAIN, train), (TEST, test)):
    # written in reverse name order: clients follow sorted file names, not the disk's
    _write(d / split / names[1].format(split), ["f0100_10", "f0101_22"], data)
    _write(d / split / names[0].format(split), ["f0000_14", "f0001_41"], data,
           hierarchies=["h0", "h1"], extra=["f0002_00"])
  return d, train, test


def _settings(**kw):
  return DataSettings(dataset="synthetic", **kw)


def _read(d, num_clients, seed=0, **kw):
  return leaf_json.read(num_clients=num_clients, partition="natural", partition_seed=seed,
                        data_dir=str(d), settings=_settings(**kw) if kw else None)


def _client(ds, i):
  return ds.train.client(i)


def test_femnist(femnist):
  d, train, test = femnist
  r = _read(d, 4, min_samples=1)
  ds = r.dataset
  assert r.kind == "femnist" and r.dropped == 0
  assert r.client_ids == ("f0000_14", "f0001_41", "f0100_10", "f0101_22")
  assert ds.train.counts.tolist() == [5, 1, 3, 4]
  assert ds.name == "leaf_json" and ds.num_classes == 62 and ds.is_image
  assert ds.feature_shape == (28, 28, 1) and ds.vocab_size == 0
  assert ds.train.x.dtype == np.float32 and ds.train.y.dtype == np.int32
  for i, u in enumerate(r.client_ids):
    x, y = _client(ds, i)
    np.testing.assert_array_equal(x, np.float32(train[u][0]).reshape(-1, 28, 28, 1))
    assert y.tolist() == train[u][1]
  # the central test set: the users' test samples in client order
  want_x = np.concatenate([np.float32(test[u][0]) for u in r.client_ids]).reshape(-1, 28, 28, 1)
  np.testing.assert_array_equal(ds.test_x, want_x)
  assert ds.test_y.tolist() == sum((test[u][1] for u in r.client_ids), [])
  assert ds.test_x.dtype == np.float32 and ds.test_y.dtype == np.int32
  assert leaf_json.load(num_clients=4, partition=None, partition_seed=0, data_dir=str(d),
                        cache_dir=None, settings=_settings(min_samples=1)).report() == ds.report()


def test_min_samples_and_subsets(femnist):
  d, train, test = femnist
  # min_samples=2 drops f0001_41 (1 training sample); the default 1 keeps it
  r = _read(d, 3, min_samples=2)
  assert r.client_ids == ("f0000_14", "f0100_10", "f0101_22")
  with pytest.raises(UsageError, match=r"number 3 with at least 2 training samples"):
    _read(d, 4, min_samples=2)
  assert len(_read(d, 4).client_ids) == 4
  assert _read(d, 1, min_samples=5).client_ids == ("f0000_14",)
  drawn = {_read(d, 2, seed=s, min_samples=1).client_ids for s in range(12)}
  assert len(drawn) > 2
  for ids in drawn:  # file order, without repeats
    order = ["f0000_14", "f0001_41", "f0100_10", "f0101_22"]
    assert list(ids) == sorted(ids, key=order.index) and len(set(ids)) == 2
  a = _read(d, 2, seed=7, min_samples=1)
  b = _read(d, 2, seed=7, min_samples=1)
  assert a.client_ids == b.client_ids
  np.testing.assert_array_equal(a.dataset.train.x, b.dataset.train.x)
  # the test set follows the chosen users
  assert a.dataset.test_y.tolist() == sum((test[u][1] for u in a.client_ids), [])


def test_test_examples(femnist):
  d, _, _ = femnist
  full = _read(d, 4, min_samples=1).dataset
  sub = _read(d, 4, seed=3, min_samples=1, test_examples=4).dataset
  assert sub.test_y.shape == (4,) and sub.test_x.shape == (4, 28, 28, 1)
  rows = [int(np.flatnonzero((full.test_x == x).all(axis=(1, 2, 3)))[0]) for x in sub.test_x]
  assert rows == sorted(rows) and len(set(rows)) == 4  # a subset, in order
  assert sub.test_y.tolist() == full.test_y[rows].tolist()
  assert _read(d, 4, min_samples=1, test_examples=100).dataset.test_y.shape == (6,)
  other = _read(d, 4, seed=4, min_samples=1, test_examples=4).dataset
  assert sub.train.x.shape == other.train.x.shape


def test_head_order_and_chunks(femnist, monkeypatch):
  d, _, _ = femnist
  want = _read(d, 4, min_samples=1).dataset
  # tiny read chunks: values and numbers cut at every place
  for chunk in (1, 2, 3, 5, 8):
    monkeypatch.setattr(leaf_json, "_FIRST_CHUNK", chunk)
    for p in sorted((d / TRAIN).iterdir()):
      h = leaf_json._scan(p, want_first=True)
      data = json.loads(p.read_text())
      assert h.users == data["users"] and h.num_samples == data["num_samples"]
      first = data["user_data"][data["users"][0]]
      assert h.first == (first["x"][0], first["y"][0])
  monkeypatch.undo()
  # a file whose user_data comes first is read whole, with the same result
  for p in sorted((d / TRAIN).iterdir()):
    data = json.loads(p.read_text())
    p.write_text(json.dumps({"user_data": data["user_data"], "users": data["users"],
                             "num_samples": data["num_samples"]}))
  got = _read(d, 4, min_samples=1).dataset
  np.testing.assert_array_equal(got.train.x, want.train.x)
  np.testing.assert_array_equal(got.test_y, want.test_y)


def test_shakespeare(tmp_path):
  passage = "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer"
  windows = [passage[i:i + 80] for i in range(4)]
  labels = [passage[i + 80] for i in range(4)]
  train = {"HAMLET": (windows, labels),
           "OPHELIA": (["x" * 80, "y" * 80, "z" * 80], ["a", "%", "\n"]),  # "%": not LEAF's
           "POLONIUS": ([" " * 79 + "Q", "é" * 80], ["}", "b"])}
  test = {"HAMLET": (["w" * 80], ["%"]), "OPHELIA": (["v" * 80], ["c"]),
          "POLONIUS": (["u" * 80], ["d"])}
  d = tmp_path / "shakespeare" / "data"
  _write(d / TRAIN / "all_data_niid_2_keep_0_train_9.json", list(train), train)
  _write(d / TEST / "all_data_niid_2_keep_0_test_9.json", list(test), test)
  r = _read(d, 3)
  ds = r.dataset
  assert r.kind == "shakespeare" and r.dropped == 2  # OPHELIA's "%" and HAMLET's test "%"
  assert ds.num_classes == text.VOCAB_SIZE and ds.vocab_size == text.VOCAB_SIZE
  assert not ds.is_image and ds.feature_shape == (80,)
  assert ds.train.x.dtype == np.int8 and ds.train.y.dtype == np.int32
  assert ds.train.counts.tolist() == [4, 2, 2]
  x, y = ds.train.client(0)
  assert [text.decode(w) for w in x] == windows
  assert y.tolist() == [int(text.encode(c)[0]) for c in labels]
  x, y = ds.train.client(1)
  assert [text.decode(w) for w in x] == ["x" * 80, "z" * 80]
  assert text.decode(y) == "a\n"
  x, y = ds.train.client(2)
  assert text.decode(x[0]) == " " * 79 + "Q" and (x[1] == text.OOV).all()
  assert text.decode(y) == "}b"
  assert text.decode(ds.test_y) == "cd" and ds.test_x.dtype == np.int8


def _tweet(t, user="u"):
  return ["1467810369", "Mon Apr 06 22:19:45 PDT 2009", "NO_QUERY", user, t]


def test_sent140(tmp_path):
  long = "@friend " + "a long tweet, " * 8 + "END!"
  train = {"alice": ([_tweet("I love it :)"), _tweet(long)], [1, 0]),
           "bob": ([_tweet(""), _tweet("meh ~~")], [0, 1]),
           "carol": ([_tweet("x")], [1])}
  test = {"alice": ([_tweet("ok")], [1]), "bob": ([_tweet("no")], [0]),
          "carol": ([_tweet("yes")], [1])}
  d = tmp_path / "sent140" / "data"
  _write(d / TRAIN / "all_data_niid_0_keep_0_train_9.json", list(train), train)
  _write(d / TEST / "all_data_niid_0_keep_0_test_9.json", list(test), test)
  r = _read(d, 3, min_samples=1)
  ds = r.dataset
  assert r.kind == "sent140" and ds.num_classes == 2 and ds.vocab_size == text.VOCAB_SIZE
  assert ds.train.x.shape == (5, 80) and ds.train.x.dtype == np.int8 and not ds.is_image
  x, y = ds.train.client(0)
  assert (x[0, :-12] == text.PAD).all() and text.decode(x[0]) == "I love it :)"
  assert len(long) > 80 and text.decode(x[1]) == long[-80:]
  assert y.tolist() == [1, 0]
  x, _ = ds.train.client(1)
  assert (x[0] == text.PAD).all() and (x[1, -2:] == text.OOV).all()  # "~" is not LEAF's
  assert ds.test_y.tolist() == [1, 0, 1] and text.decode(ds.test_x[2]) == "yes"
  # two users, drawn
  assert len(_read(d, 2, seed=1, min_samples=1).client_ids) == 2


def test_celeba(tmp_path):
  d = tmp_path / "celeba" / "data"
  images = d / "raw" / "img_align_celeba"
  images.mkdir(parents=True)
  rng = np.random.default_rng(0)
  names = []
  for i in range(7):
    name = f"{i + 1:06d}." + ("jpg" if i % 2 else "png")
    pixels = rng.integers(0, 256, (14, 11, 3), dtype=np.uint8)
    Image.fromarray(pixels if i != 2 else pixels[..., 0]).save(images / name)  # one grey
    names.append(name)
  # LEAF's metadata_to_json writes y as (int + 1) / 2: floats
  train = {"5": (names[:2], [1.0, 0.0]), "12": (names[2:4], [0.0, 0.0]),
           "99": (names[4:5], [1.0])}
  test = {"5": (names[5:6], [1.0]), "12": (names[6:7], [0.0]), "99": (names[0:1], [1.0])}
  _write(d / TRAIN / "all_data_niid_05_keep_5_train_9.json", list(train), train)
  _write(d / TEST / "all_data_niid_05_keep_5_test_9.json", list(test), test)
  r = _read(d, 2, min_samples=2)  # "99" has one training sample
  ds = r.dataset
  assert r.kind == "celeba" and r.client_ids == ("5", "12")
  assert ds.is_image and ds.feature_shape == (84, 84, 3) and ds.num_classes == 2
  assert ds.train.x.dtype == np.uint8 and ds.train.x.shape == (4, 84, 84, 3)
  assert ds.train.y.tolist() == [1, 0, 0, 0] and ds.test_y.tolist() == [1, 0]

  def leaf(name):  # LEAF's models/celeba/cnn.py _load_image
    return np.array(Image.open(images / name).resize((84, 84)).convert("RGB"))
  for i, name in enumerate(names[:4]):
    np.testing.assert_array_equal(ds.train.x[i], leaf(name))
  np.testing.assert_array_equal(ds.test_x[1], leaf(names[6]))
  # the images folder missing: one line saying where they come from
  (images / names[0]).unlink()
  with pytest.raises(UsageError, match="CelebA image .*000001.png is missing"):
    _read(d, 2)
  images.rename(d / "raw" / "elsewhere")
  with pytest.raises(UsageError, match=r"raw/img_align_celeba/ \(LEAF's layout\).*CelebA"):
    _read(d, 2)


def test_by_user_split(femnist):
  """LEAF's -t user split: test users are not train users; the test set is all of them."""
  d, _, test = femnist
  for p in (d / TEST).iterdir():
    p.unlink()
  rng = np.random.default_rng(1)
  other = {"f0500_00": _femnist_sample(rng, 2), "f0501_00": _femnist_sample(rng, 3)}
  _write(d / TEST / "all_data_0_niid_05_keep_0_test_9.json", list(other), other)
  ds = _read(d, 1, min_samples=1).dataset
  assert ds.test_y.tolist() == other["f0500_00"][1] + other["f0501_00"][1]


def test_errors(femnist, tmp_path):
  d, _, _ = femnist
  with pytest.raises(UsageError) as e:
    leaf_json.read(num_clients=2, data_dir=None)
  assert "needs --data_dir" in one_line(e) and "preprocess.sh" in str(e.value)
  with pytest.raises(UsageError) as e:
    _read(tmp_path / "nowhere", 2)
  assert "is not a directory" in one_line(e) and "train/*.json" in str(e.value)
  (tmp_path / "empty" / "train").mkdir(parents=True)
  with pytest.raises(UsageError) as e:
    _read(tmp_path / "empty", 2)
  assert "has no train/*.json nor test/*.json" in one_line(e)
  assert "TalwalkarLab/leaf" in str(e.value)
  with pytest.raises(UsageError) as e:
    leaf_json.read(num_clients=2, partition="iid", data_dir=str(d))
  assert "--partition must be natural" in one_line(e)
  with pytest.raises(UsageError) as e:
    _read(d, 5, min_samples=1)
  assert "--num_clients=5 is more than there are" in one_line(e)
  assert "number 4 with at least 1" in str(e.value)
  # LEAF's Synthetic (60 features) is not one of the four kinds
  bad = tmp_path / "synthetic" / "data"
  data = {"0": ([[0.5] * 60, [0.1] * 60], [3, 1])}
  _write(bad / TRAIN / "a.json", ["0"], data)
  _write(bad / TEST / "a.json", ["0"], data)
  with pytest.raises(UsageError) as e:
    _read(bad, 1)
  assert "cannot tell which LEAF dataset" in one_line(e)
  assert "x: a list of 60, y: int" in str(e.value)
  # a sample of another kind than the first
  mixed = tmp_path / "mixed" / "data"
  data = {"0": (["a" * 80, [0.5] * 784], ["b", 1])}
  _write(mixed / TRAIN / "a.json", ["0"], data)
  _write(mixed / TEST / "a.json", ["0"], data)
  with pytest.raises(UsageError, match="sample 1 .* is not shakespeare"):
    _read(mixed, 1)


def test_empty_user(tmp_path):
  """--min_samples=0 keeps a user with no training sample (an empty client)."""
  rng = np.random.default_rng(3)
  data = {"E": ([], []), "A": _femnist_sample(rng, 2)}
  d = tmp_path / "data"
  _write(d / TRAIN / "a.json", ["E", "A"], data)
  _write(d / TEST / "a.json", ["E", "A"], data)
  ds = _read(d, 2, min_samples=0).dataset
  assert ds.train.counts.tolist() == [0, 2] and ds.train.x.shape == (2, 28, 28, 1)
  assert ds.test_y.tolist() == data["A"][1]


@pytest.mark.parametrize("value,text_", [(float("nan"), "NaN"), (float("inf"), "Infinity"),
                                         (None, "null"), (1e39, "1e+39")])
def test_non_finite_femnist_pixels_are_refused(tmp_path, value, text_):
  """json reads NaN, Infinity and null, and 1e39 is inf in float32: each is refused at
  load, naming the file, the user and the sample, not trained on."""
  rng = np.random.default_rng(4)
  data = {"A": _femnist_sample(rng, 3)}
  data["A"][0][2][100] = value
  d = tmp_path / "data"
  _write(d / TRAIN / "a.json", ["A"], data)
  _write(d / TEST / "a.json", ["A"], {"A": _femnist_sample(rng, 1)})
  assert text_ in (d / TRAIN / "a.json").read_text()
  with pytest.raises(UsageError) as e:
    _read(d, 1, min_samples=1)
  assert f"{d / TRAIN / 'a.json'}, user 'A': sample 2's x holds a non-finite value" in (
      one_line(e))


@pytest.mark.parametrize("label,says", [
    (float("inf"), "y must be integer labels; sample 1's is inf"),
    (float("nan"), "y must be integer labels; sample 1's is nan"),
    (2.5, "y must be integer labels; sample 1's is 2.5"),
    ("3", "y must be integer labels"),
    (62, r"labels must be in \[0, 62\), found \d+\.\.62"),
    (-1, r"labels must be in \[0, 62\), found -1\.\."),
])
def test_bad_labels_are_refused(tmp_path, label, says):
  rng = np.random.default_rng(5)
  data = {"A": _femnist_sample(rng, 3)}
  data["A"][1][1] = label
  d = tmp_path / "data"
  _write(d / TRAIN / "a.json", ["A"], data)
  _write(d / TEST / "a.json", ["A"], {"A": _femnist_sample(rng, 1)})
  with pytest.raises(UsageError) as e:
    _read(d, 1, min_samples=1)
  assert one_line(e).startswith(f"{d / TRAIN / 'a.json'}, user 'A': ")
  assert re.search(says, str(e.value)), str(e.value)


@pytest.mark.parametrize("split", [TRAIN, TEST])
def test_deeply_nested_json_is_one_line(tmp_path, split):
  """A value nested past Python's recursion limit, in the sample that tells the kind (the
  head's read) or in a test file (parsed whole): one line naming the file."""
  rng = np.random.default_rng(6)
  data = {"A": _femnist_sample(rng, 2)}
  d = tmp_path / "data"
  _write(d / TRAIN / "a.json", ["A"], data)
  _write(d / TEST / "a.json", ["A"], data)
  path = d / split / "a.json"
  deep = "[" * 5000 + "]" * 5000
  path.write_text(path.read_text().replace('"x": [', f'"x": [{deep}, ', 1))
  with pytest.raises(UsageError) as e:
    _read(d, 1, min_samples=1)
  assert one_line(e).startswith(f"{path} nests lists or objects too deeply")


@pytest.mark.parametrize("name", ["../../../../../../../../etc/passwd", "/etc/passwd",
                                  "../000001.png", "a/../../000001.png", "", ".", "x\0.png"])
def test_celeba_image_names_outside_the_images_folder_are_refused(tmp_path, name):
  d = tmp_path / "celeba" / "data"
  images = d / "raw" / "img_align_celeba"
  images.mkdir(parents=True)
  Image.fromarray(np.zeros((14, 11, 3), np.uint8)).save(images / "000001.png")
  Image.fromarray(np.zeros((14, 11, 3), np.uint8)).save(d / "raw" / "000001.png")
  train = {"5": (["000001.png", "sub/../000001.png", name], [1.0, 0.0, 1.0])}
  test = {"5": (["000001.png"], [1.0])}
  _write(d / TRAIN / "a.json", list(train), train)
  _write(d / TEST / "a.json", list(test), test)
  with pytest.raises(UsageError) as e:
    _read(d, 1, min_samples=1)
  assert one_line(e).startswith(f"{d / TRAIN / 'a.json'}, user '5': sample 2's image name "
                                f"{name!r} is not a file name inside {images}/")
  # the same names made harmless read (a name with '..' that stays inside is a file name)
  train["5"][0][2] = "000001.png"
  _write(d / TRAIN / "a.json", list(train), train)
  assert _read(d, 1, min_samples=1).dataset.train.x.shape == (3, 84, 84, 3)
