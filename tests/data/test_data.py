"""Tests of fedjax_bench.data: partitions, the synthetic generator, MNIST via TFDS."""

import dataclasses
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from fedjax_bench import data
from fedjax_bench.data import partition as part
from fedjax_bench.data import synthetic, tfds_data
from fedjax_bench.data.federated import pixels_to_float
from fedjax_bench.errors import DataMissingError, UsageError

REPO = pathlib.Path(__file__).resolve().parents[2]


def _mnist_dir() -> pathlib.Path | None:
  candidates = [os.environ.get("TFDS_DATA_DIR"), REPO.parent / "shared" / "tfds"]
  for d in candidates:
    if d and (pathlib.Path(d) / "mnist" / "3.0.1" / "dataset_info.json").exists():
      return pathlib.Path(d)
  return None


MNIST_DIR = _mnist_dir()
needs_mnist = pytest.mark.skipif(
    MNIST_DIR is None, reason="MNIST (TFDS mnist/3.0.1) not found in $TFDS_DATA_DIR "
    "or ../shared/tfds relative to the repo")


def _labels(n=2000, c=10, seed=0):
  return np.random.default_rng(seed).integers(0, c, n)


def _all_once(clients, n):
  flat = np.concatenate(clients)
  return flat.shape[0] == n and np.array_equal(np.sort(flat), np.arange(n))


PARTITION_KW = {"iid": {}, "dirichlet": {"alpha": 0.3}, "shards": {"shards_per_client": 2}}


# --- partitions --------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(PARTITION_KW))
def test_partition_assigns_every_index_once(name):
  y = _labels()
  clients = part.partition(name, y, 37, seed=1, **PARTITION_KW[name])
  assert len(clients) == 37
  assert all(c.dtype == np.int64 for c in clients)
  assert _all_once(clients, y.shape[0])


@pytest.mark.parametrize("name", sorted(PARTITION_KW))
def test_partition_deterministic_per_seed(name):
  y = _labels()
  a = part.partition(name, y, 20, seed=3, **PARTITION_KW[name])
  b = part.partition(name, y, 20, seed=3, **PARTITION_KW[name])
  c = part.partition(name, y, 20, seed=4, **PARTITION_KW[name])
  assert all(np.array_equal(u, v) for u, v in zip(a, b))
  assert not all(np.array_equal(u, v) for u, v in zip(a, c))


def test_iid_sizes_nearly_equal():
  sizes = [len(c) for c in part.iid(_labels(1003), 10, 0)]
  assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 1003


def _mean_tv(y, clients, c):
  g = np.bincount(y, minlength=c) / y.shape[0]
  tvs = [0.5 * np.abs(np.bincount(y[ix], minlength=c) / len(ix) - g).sum()
         for ix in clients if len(ix)]
  return float(np.mean(tvs))


def test_dirichlet_skew_grows_as_alpha_falls():
  y = _labels(5000)
  tv = [np.mean([_mean_tv(y, part.dirichlet(y, 20, a, s, 10), 10) for s in range(3)])
        for a in (100.0, 1.0, 0.1)]
  assert tv[0] < tv[1] < tv[2], tv
  assert tv[0] < 0.1 and tv[2] > 0.5, tv


def _dirichlet_by_hand(labels, m, alpha, seed, c):
  q = np.random.default_rng(seed).dirichlet(alpha * np.ones(c), m).tolist()
  colsum = [sum(q[n][k] for n in range(m)) for k in range(c)]
  idx = [[j for j, l in enumerate(labels) if l == k] for k in range(c)]
  start = [0] * c
  clients = [[] for _ in range(m)]
  for n in range(m):
    for k in range(c):
      cum = 0.0
      for j in range(n + 1):
        cum += q[j][k]
      end = round(len(idx[k]) * cum / colsum[k])
      clients[n] += idx[k][start[k]:end]
      start[k] = end
  return clients


@pytest.mark.parametrize("seed,alpha", [(0, 0.5), (1, 0.1), (2, 5.0), (7, 1.0)])
def test_dirichlet_matches_reference_procedure(seed, alpha):
  labels = [int(v) for v in np.random.default_rng(100 + seed).integers(0, 4, 30)]
  got = part.dirichlet(np.array(labels), 5, alpha, seed, 4)
  want = _dirichlet_by_hand(labels, 5, alpha, seed, 4)
  assert [g.tolist() for g in got] == want


def test_shards_at_most_k_classes_per_client():
  y = _labels(3000, seed=5)
  for k in (1, 2, 3):
    clients = part.shards(y, 40, k, 0, 10)
    assert _all_once(clients, 3000)
    assert max(len(np.unique(y[c])) for c in clients) <= k


def test_shards_spread_over_classes_and_nearly_equal():
  y = _labels(3000, seed=6)
  clients = part.shards(y, 25, 1, 0, 10)  # one shard per client: shards are visible
  per_class = {}
  for ix in clients:
    (c,) = np.unique(y[ix])
    per_class.setdefault(int(c), []).append(len(ix))
  # 25 shards over 10 classes: 3 for classes 0-4, 2 for classes 5-9.
  assert {c: len(s) for c, s in per_class.items()} == {c: 3 if c < 5 else 2 for c in range(10)}
  assert all(max(s) - min(s) <= 1 for s in per_class.values())


@pytest.mark.parametrize("name,n,m,kw", [
    ("iid", 10, 0, {}), ("iid", 10, 11, {}), ("dirichlet", 100, 5, {"alpha": 0.0}),
    ("dirichlet", 100, -1, {"alpha": 1.0}), ("shards", 100, 40, {"shards_per_client": 3}),
    ("shards", 100, 5, {"shards_per_client": 0}), ("shards", 100, 50, {"shards_per_client": 2}),
])
def test_partition_impossible_sizes(name, n, m, kw):
  # The last case: 100 shards over 10 classes, but some classes have fewer than 10 examples.
  with pytest.raises(UsageError):
    part.partition(name, _labels(n, seed=9), m, 0, num_classes=10, **kw)


def test_partition_unknown_name_lists_choices():
  with pytest.raises(UsageError, match="iid, dirichlet, shards"):
    part.partition("sorted", _labels(), 10, 0)


# --- synthetic ---------------------------------------------------------------------

def test_synthetic_shapes_and_split():
  d = synthetic.leaf_synthetic(15, 1.0, 1.0, seed=0, max_examples_per_client=400)
  assert d.name == "synthetic" and not d.is_image and d.feature_shape == (60,)
  assert d.num_classes == 10 and d.train.num_clients == 15
  assert d.train.x.shape == (d.train.num_examples, 60) and d.train.x.dtype == np.float32
  assert d.train.y.dtype == np.int32 and d.test_y.dtype == np.int32
  assert d.test_x.shape == (d.test_y.shape[0], 60)
  total = d.train.num_examples + d.test_y.shape[0]
  assert d.train.counts.min() >= 1 and d.train.counts.max() <= 400
  # Each user holds back int-truncated 10 %: between 10 % and 10 % + 1 per user.
  assert 0.1 * total <= d.test_y.shape[0] <= 0.1 * total + 15
  assert d.train.y.min() >= 0 and d.train.y.max() < 10


def test_synthetic_sizes_follow_lognormal_plus_50():
  d = synthetic.leaf_synthetic(200, 1.0, 1.0, seed=1, test_fraction=0.0)
  sizes = d.train.counts
  assert sizes.min() >= 50 and d.test_y.shape[0] == 0
  assert 50 + 30 < np.median(sizes) < 50 + 90  # median of int(LogNormal(4, 2)) ~ e^4 = 55


def test_synthetic_deterministic():
  a = synthetic.leaf_synthetic(10, 1.0, 1.0, seed=4, max_examples_per_client=300)
  b = synthetic.leaf_synthetic(10, 1.0, 1.0, seed=4, max_examples_per_client=300)
  c = synthetic.leaf_synthetic(10, 1.0, 1.0, seed=5, max_examples_per_client=300)
  assert np.array_equal(a.train.x, b.train.x) and np.array_equal(a.test_y, b.test_y)
  assert not np.array_equal(a.train.counts, c.train.counts)


def test_synthetic_beta_spreads_client_feature_means():
  def spread(beta):
    d = synthetic.leaf_synthetic(40, 0.0, beta, seed=2, max_examples_per_client=300)
    means = [d.train.client(i)[0].mean() for i in range(40)]
    return float(np.std(means))
  s0, s1, s3 = spread(0.0), spread(1.0), spread(3.0)
  assert s0 < s1 < s3, (s0, s1, s3)


def test_synthetic_labels_are_skewed_per_client():
  d = synthetic.leaf_synthetic(30, 1.0, 1.0, seed=0, max_examples_per_client=500)
  assert d.report()["mean_classes_per_client"] < 6


def test_load_synthetic_and_unknown_names():
  d = data.load("synthetic", num_clients=5, partition="natural", partition_seed=3,
                synthetic_max_examples_per_client=200)
  assert d.train.num_clients == 5
  with pytest.raises(UsageError, match="natural"):
    data.load("synthetic", num_clients=5, partition="dirichlet")
  with pytest.raises(UsageError, match="synthetic, mnist"):
    data.load("cifar100", num_clients=5)


# --- MNIST through TFDS -------------------------------------------------------------

@pytest.fixture(scope="module")
def mnist_cache(tmp_path_factory):
  """Converts MNIST once per session into a fresh cache dir."""
  if MNIST_DIR is None:
    pytest.skip("MNIST not available")
  cache = tmp_path_factory.mktemp("mnist_cache")
  arrays = tfds_data.load_arrays("mnist", data_dir=str(MNIST_DIR), cache_dir=str(cache))
  return cache, arrays


def _run_py(code: str, env_extra: dict, timeout: float) -> subprocess.CompletedProcess:
  env = {**os.environ, **env_extra, "PYTHONPATH": str(REPO)}
  return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                        text=True, timeout=timeout, cwd=str(REPO), check=False)


@needs_mnist
def test_mnist_arrays(mnist_cache):
  _, a = mnist_cache
  assert a["train_x"].shape == (60000, 28, 28, 1) and a["train_x"].dtype == np.uint8
  assert a["test_x"].shape == (10000, 28, 28, 1) and a["test_y"].shape == (10000,)
  assert a["num_classes"] == 10
  assert set(np.unique(a["train_y"])) == set(range(10))
  assert a["train_x"].max() == 255


@needs_mnist
def test_mnist_load_partitioned(mnist_cache):
  cache, _ = mnist_cache
  d = data.load("mnist", num_clients=100, partition="shards", cache_dir=str(cache))
  assert d.is_image and d.feature_shape == (28, 28, 1) and d.num_classes == 10
  assert d.train.num_examples == 60000 and d.test_x.shape == (10000, 28, 28, 1)
  assert d.train.x.dtype == np.uint8 and d.train.x.max() == 255 and d.test_x.dtype == np.uint8
  pixels = pixels_to_float(d.train.x[:100])
  assert pixels.dtype == np.float32 and 0.0 <= pixels.min() and pixels.max() <= 1.0
  assert (d.label_histograms() > 0).sum(1).max() <= 2


@needs_mnist
def test_mnist_second_load_is_fast_and_skips_tfds(mnist_cache):
  cache, _ = mnist_cache
  code = (
      "import sys, time\n"
      "from fedjax_bench import data\n"
      "t = time.perf_counter()\n"
      f"d = data.load('mnist', num_clients=50, cache_dir={str(cache)!r})\n"
      "dt = time.perf_counter() - t\n"
      "assert d.train.num_examples == 60000\n"
      "print(dt, 'tensorflow_datasets' in sys.modules)\n")
  # An empty TFDS_DATA_DIR proves that the cache alone is enough.
  r = _run_py(code, {"TFDS_DATA_DIR": str(cache / "no_tfds_here")}, timeout=60)
  assert r.returncode == 0, r.stderr
  dt, imported = r.stdout.split()
  assert float(dt) < 3.0 and imported == "False", r.stdout


def test_missing_data_raises_quickly(tmp_path):
  # An unresolvable probe host keeps the test offline even where the network works.
  code = (
      "from fedjax_bench.data import tfds_data\n"
      "from fedjax_bench.errors import DataMissingError\n"
      "tfds_data._PROBE_HOST = ('fedjax-bench-probe.invalid', 443)\n"
      "try:\n"
      "  tfds_data.load_arrays('mnist')\n"
      "except DataMissingError as e:\n"
      "  print('MISSING', e)\n")
  t = time.perf_counter()
  r = _run_py(code, {"TFDS_DATA_DIR": str(tmp_path / "tfds"),
                     "FEDJAX_BENCH_CACHE": str(tmp_path / "cache")}, timeout=30)
  assert time.perf_counter() - t < 10
  assert r.returncode == 0, r.stderr
  out = r.stdout.strip()
  assert out.startswith("MISSING") and "TFDS_DATA_DIR" in out and "mnist" in out, out
  assert str(tmp_path / "tfds") in out and len(out.splitlines()) == 1


def test_unknown_image_dataset():
  with pytest.raises(UsageError, match="mnist"):
    tfds_data.load_arrays("imagenet")


def _corrupted_copy(src: pathlib.Path, dst: pathlib.Path) -> pathlib.Path:
  shutil.copytree(src, dst)
  f = dst / "mnist-3.0.1" / "test_y.npy"
  f.write_bytes(f.read_bytes()[:100])
  return f


@needs_mnist
def test_corrupt_cache_without_tfds_data_is_usage_error(mnist_cache, tmp_path, monkeypatch):
  cache, _ = mnist_cache
  bad = _corrupted_copy(cache, tmp_path / "cache")
  monkeypatch.setattr(tfds_data, "_network_ok", lambda: False)
  with pytest.raises(UsageError, match="corrupt"):
    tfds_data.load_arrays("mnist", data_dir=str(tmp_path / "empty"),
                          cache_dir=str(tmp_path / "cache"))
  assert not bad.exists()


@needs_mnist
def test_corrupt_cache_is_rebuilt(mnist_cache, tmp_path):
  cache, good = mnist_cache
  bad = _corrupted_copy(cache, tmp_path / "cache")
  a = tfds_data.load_arrays("mnist", data_dir=str(MNIST_DIR),
                            cache_dir=str(tmp_path / "cache"))
  assert np.array_equal(a["test_y"], good["test_y"])
  assert np.array_equal(np.load(bad), good["test_y"])


# --- the FedAWE image datasets (docs/papers/fedawe.md) ----------------------------------

def test_image_specs_follow_the_paper():
  s = tfds_data.SPECS
  assert (s["svhn"].tfds_name, s["svhn"].version) == ("svhn_cropped", "3.1.0")
  assert (s["cifar10"].tfds_name, s["cifar10"].version) == ("cifar10", "3.0.2")
  assert s["cinic10"].source == "folder" and s["svhn"].source == s["cifar10"].source == "tfds"
  sizes = {k: (s[k].num_train, s[k].num_test) for k in ("svhn", "cifar10", "cinic10")}
  assert sizes == {"svhn": (73257, 26032), "cifar10": (50000, 10000),
                   "cinic10": (90000, 90000)}
  assert all(s[k].image_shape == (32, 32, 3) and s[k].num_classes == 10 for k in sizes)
  assert s["svhn"].normalize_mean == (0.4376821, 0.4437697, 0.47280442)
  assert s["svhn"].normalize_std == (0.19803012, 0.20101562, 0.19703614)
  assert s["cifar10"].normalize_mean == (0.4914, 0.4822, 0.4465)
  assert s["cifar10"].normalize_std == (0.2023, 0.1994, 0.2010)
  assert s["cinic10"].normalize_mean == (0.47889522, 0.47227842, 0.43047404)
  assert s["cinic10"].normalize_std == (0.24205776, 0.23828046, 0.25874835)
  assert [s[k].augmentation for k in ("mnist", "svhn", "cifar10", "cinic10")] == [
      "none", "crop", "crop_flip", "crop_flip"]
  assert s["mnist"].normalize_mean is None
  assert set(sizes) <= set(data.DATASETS)


@pytest.mark.parametrize("name,ident", [("svhn", "svhn_cropped"), ("cifar10", "cifar10")])
def test_missing_tfds_image_data_fails_fast(name, ident, tmp_path, monkeypatch):
  monkeypatch.setattr(tfds_data, "_network_ok", lambda: False)
  (tmp_path / "tfds").mkdir()  # exists, but holds nothing
  t = time.perf_counter()
  with pytest.raises(DataMissingError) as e:
    data.load(name, num_clients=10, data_dir=str(tmp_path / "tfds"),
              cache_dir=str(tmp_path / "cache"))
  assert time.perf_counter() - t < 10
  msg = str(e.value)
  assert f"{name!r}" in msg and ident in msg and "TFDS_DATA_DIR" in msg
  assert str(tmp_path / "tfds") in msg and len(msg.splitlines()) == 1


CINIC_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                 "ship", "truck")


def _fake_cinic(root: pathlib.Path, per_class=(2, 1)) -> dict:
  """A CINIC-10 tree with a few 32x32 PNGs per class (and a grayscale one, as CINIC has)."""
  from PIL import Image
  rng = np.random.default_rng(0)
  want = {}
  for split, n in zip(("train", "test", "valid"), per_class + (1,)):
    xs = []
    for label, c in enumerate(CINIC_CLASSES):
      (root / split / c).mkdir(parents=True)
      for j in reversed(range(n)):  # written out of order: the reader sorts file names
        name = f"n0{label}_{j}.png"
        if split == "train" and label == 3 and j == 0:
          gray = rng.integers(0, 256, (32, 32), dtype=np.uint8)
          Image.fromarray(gray, "L").save(root / split / c / name)
          img = np.repeat(gray[..., None], 3, axis=-1)
        else:
          img = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
          Image.fromarray(img).save(root / split / c / name)
        xs.append((label, j, img))
    xs.sort(key=lambda t: (t[0], t[1]))
    want[f"{split}_x"] = np.stack([t[2] for t in xs])
    want[f"{split}_y"] = np.array([t[0] for t in xs], np.int32)
  (root / "README.md").write_text("not an image")
  return want


@pytest.fixture
def small_cinic_spec(monkeypatch):
  spec = dataclasses.replace(tfds_data.SPECS["cinic10"], num_train=None, num_test=None)
  monkeypatch.setitem(tfds_data.SPECS, "cinic10", spec)
  monkeypatch.delenv("CINIC10_DIR", raising=False)


def test_cinic10_from_the_folder_layout(tmp_path, small_cinic_spec, monkeypatch):
  want = _fake_cinic(tmp_path / "data" / "CINIC-10")
  cache = tmp_path / "cache"
  a = tfds_data.load_arrays("cinic10", data_dir=str(tmp_path / "data"), cache_dir=str(cache))
  for k in ("train_x", "train_y", "test_x", "test_y"):
    assert np.array_equal(a[k], want[k]), k
    assert a[k].dtype == want[k].dtype
  assert (cache / "cinic10-1.0" / "train_x.npy").exists()
  # $CINIC10_DIR names the root itself; the cache is read once it exists.
  shutil.rmtree(tmp_path / "data")
  monkeypatch.setenv("CINIC10_DIR", str(tmp_path / "gone"))
  d = data.load("cinic10", num_clients=4, cache_dir=str(cache))
  assert d.is_image and d.feature_shape == (32, 32, 3) and d.train.num_examples == 20
  assert d.train.x.dtype == np.uint8 and d.test_y.shape == (10,)
  assert d.normalize == (tfds_data.SPECS["cinic10"].normalize_mean,
                         tfds_data.SPECS["cinic10"].normalize_std)
  assert d.augmentation == "crop_flip"


def test_cinic10_env_var_and_wrong_counts(tmp_path, monkeypatch):
  monkeypatch.setenv("CINIC10_DIR", str(tmp_path / "cinic"))
  _fake_cinic(tmp_path / "cinic", per_class=(1, 1))
  with pytest.raises(UsageError, match="found 10 images .*expected 90000"):
    tfds_data.load_arrays("cinic10", cache_dir=str(tmp_path / "cache"))


def test_missing_cinic10_fails_fast_with_where_to_get_it(tmp_path, monkeypatch):
  monkeypatch.delenv("CINIC10_DIR", raising=False)
  monkeypatch.delenv("TFDS_DATA_DIR", raising=False)
  (tmp_path / "d").mkdir()
  t = time.perf_counter()
  with pytest.raises(DataMissingError) as e:
    data.load("cinic10", num_clients=10, data_dir=str(tmp_path / "d"),
              cache_dir=str(tmp_path / "cache"))
  assert time.perf_counter() - t < 2
  msg = str(e.value)
  assert "'cinic10'" in msg and "datashare.ed.ac.uk" in msg and "CINIC10_DIR" in msg
  assert str(tmp_path / "d" / "CINIC-10") in msg and len(msg.splitlines()) == 1
  monkeypatch.setenv("CINIC10_DIR", str(tmp_path / "elsewhere"))
  with pytest.raises(DataMissingError, match="elsewhere"):
    tfds_data.load_arrays("cinic10", cache_dir=str(tmp_path / "cache"))


# --- the caches, checked when read --------------------------------------------------

def _spoil_labels(d):
  np.save(d / "train_y.npy", np.load(d / "train_y.npy") + 1)  # truck 9 becomes 10


def _spoil_negative(d):
  y = np.load(d / "test_y.npy")
  y[3] = -1
  np.save(d / "test_y.npy", y)


def _spoil_float(d):
  np.save(d / "test_y.npy", np.load(d / "test_y.npy").astype(np.float32))


def _spoil_count(d):
  np.save(d / "test_y.npy", np.load(d / "test_y.npy")[:-1])


def _spoil_truncate(d):
  f = d / "train_x.npy"
  f.write_bytes(f.read_bytes()[:-100])


@pytest.mark.parametrize("spoil,says", [
    (_spoil_labels, r"train_y\.npy holds labels 1\.\.10, outside \[0, 10\)"),
    (_spoil_negative, r"test_y\.npy holds labels -1\.\.9, outside \[0, 10\)"),
    (_spoil_float, r"test_y\.npy is float32, not integer labels"),
    (_spoil_count, r"test_y\.npy is \(9,\) for test_x\.npy \(10, 32, 32, 3\), expected \[10\]"),
    (_spoil_truncate, r"train_x\.npy cannot be read: "),
])
def test_corrupt_image_cache_is_rebuilt_or_named(tmp_path, small_cinic_spec, spoil, says):
  """A cache whose labels are out of range, not integers, or whose shapes disagree is
  corrupt: removed and rebuilt from the data, or, with no data, named in the one line."""
  want = _fake_cinic(tmp_path / "data" / "CINIC-10")
  cache = tmp_path / "cache"
  tfds_data.load_arrays("cinic10", data_dir=str(tmp_path / "data"), cache_dir=str(cache))
  d = cache / "cinic10-1.0"
  spoil(d)
  a = tfds_data.load_arrays("cinic10", data_dir=str(tmp_path / "data"), cache_dir=str(cache))
  for k in ("train_x", "train_y", "test_x", "test_y"):
    np.testing.assert_array_equal(a[k], want[k])
    np.testing.assert_array_equal(np.load(d / f"{k}.npy"), want[k])
  spoil(d)
  shutil.rmtree(tmp_path / "data")
  with pytest.raises(DataMissingError) as e:
    tfds_data.load_arrays("cinic10", data_dir=str(tmp_path / "data"), cache_dir=str(cache))
  msg = str(e.value)
  assert "\n" not in msg and f"{d} (a corrupt cache there was removed: " in msg
  assert re.search(says, msg), msg
  assert not any(d.iterdir())


@pytest.mark.parametrize("which", ["test_y.npy", "train_x.npy"])
def test_image_cache_file_replaced_by_a_directory(tmp_path, small_cinic_spec, which):
  _fake_cinic(tmp_path / "data" / "CINIC-10")
  cache = tmp_path / "cache"
  tfds_data.load_arrays("cinic10", data_dir=str(tmp_path / "data"), cache_dir=str(cache))
  f = cache / "cinic10-1.0" / which
  f.unlink()
  (f / "inside").mkdir(parents=True)
  with pytest.raises(UsageError) as e:
    tfds_data.load_arrays("cinic10", data_dir=str(tmp_path / "data"), cache_dir=str(cache))
  assert str(e.value) == (f"the data cache file {f} is not a file (a directory?): delete "
                          "it, and the cache is rebuilt from the dataset")
  assert (f / "inside").is_dir()  # the directory is the user's to delete


def _tiny_shakespeare():
  from fedjax_bench.data import shakespeare, text
  roles = [["To be, or not to be."], ["Ay.", "No\u2014ho!"]]
  streams = [text.stream(r) for r in roles]
  labels = [int(np.sum((s != text.PAD) & (s != text.OOV))) for s in streams]
  return {"stream": np.concatenate(streams),
          "lengths": np.array([len(s) for s in streams], np.int64),
          "counts": np.array(labels, np.int32),
          "oov": np.array([int(np.sum(s == text.OOV)) for s in streams], np.int32),
          "roles": np.array(["p/A", "p/B"]),
          "dropped": np.zeros(len(shakespeare.DROPPED), np.int64)}


@pytest.fixture
def tiny_shakespeare_cache(tmp_path, monkeypatch):
  from fedjax_bench.data import shakespeare
  path = tmp_path / "shakespeare.npz"
  builds = []

  def build():
    builds.append(1)
    return _tiny_shakespeare()
  monkeypatch.setattr(shakespeare, "cache_path", lambda cache_dir=None: path)
  monkeypatch.setattr(shakespeare, "build", build)
  shakespeare.load_arrays()
  assert builds == [1] and path.is_file()
  return shakespeare, path, builds


def _set(path, **arrays):
  with np.load(path) as f:
    a = {k: f[k] for k in f.files}
  a.update(arrays)
  np.savez(path, **a)


@pytest.mark.parametrize("spoil", ["id", "count", "length"])
def test_corrupt_shakespeare_cache_is_rebuilt(tiny_shakespeare_cache, spoil, caplog):
  shakespeare, path, builds = tiny_shakespeare_cache
  good = _tiny_shakespeare()
  assert shakespeare.load_arrays()["counts"].tolist() == good["counts"].tolist()
  assert builds == [1]  # read from the cache
  if spoil == "id":  # an id beyond the vocabulary: an out-of-range label or embedding row
    stream = good["stream"].copy()
    stream[-2] = 100
    _set(path, stream=stream)
    says = "the stream holds ids 0..100, outside [0, 82)"
  elif spoil == "count":
    _set(path, counts=good["counts"] + np.array([0, 5], np.int32))
    says = "the roles' sample counts are not those of the stream"
  else:
    _set(path, lengths=good["lengths"] + np.array([-3, 3]))
    says = "the roles' sample counts are not those of the stream"
  with caplog.at_level("INFO"):
    a = shakespeare.load_arrays()
  assert builds == [1, 1]
  assert f"the data cache {path} is corrupt ({says}): removed, rebuilding it" in caplog.text
  for k in good:
    np.testing.assert_array_equal(a[k], good[k])
  assert shakespeare._problem(dict(np.load(path))) is None


def test_shakespeare_cache_replaced_by_a_directory(tiny_shakespeare_cache):
  shakespeare, path, builds = tiny_shakespeare_cache
  path.unlink()
  (path / "inside").mkdir(parents=True)
  with pytest.raises(UsageError) as e:
    shakespeare.load_arrays()
  assert str(e.value) == (f"the data cache file {path} is not a file (a directory?): "
                          "delete it, and the cache is rebuilt from the plays")
  assert builds == [1]
