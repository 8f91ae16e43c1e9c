"""Planted clusters by rotation (--rotation_clusters, IFCA's rotated MNIST): each client's
images against np.rot90 of the untransformed data, image by image; what stays; what is
refused; and runs end to end on generated images (LEAF FEMNIST files written here)."""

import numpy as np
import pytest

from tests.conftest import one_line, toy_dataset
from tests.data.test_leaf_json import _femnist_sample, _write
from fedjax_bench import api, config, experiment
from fedjax_bench.data import holdout, rotation
from fedjax_bench.data.federated import Dataset, FederatedData
from fedjax_bench.engine import run_dir
from fedjax_bench.errors import UsageError


def image_dataset(sizes=(5, 0, 3, 7, 4, 6, 2), side=6, channels=1, num_test=11, seed=0,
                  dtype=np.uint8) -> Dataset:
  """Random square images (no symmetry: every rotation changes them), clients of ``sizes``."""
  rng = np.random.default_rng(seed)
  n = sum(sizes)
  x = rng.integers(0, 256, (n, side, side, channels)).astype(dtype)
  y = rng.integers(0, 10, n)
  parts = np.split(rng.permutation(n), np.cumsum(sizes)[:-1])
  test_x = rng.integers(0, 256, (num_test, side, side, channels)).astype(dtype)
  return Dataset("imgs", FederatedData.from_partition(x, y, parts), test_x,
                 rng.integers(0, 10, num_test).astype(np.int32), 10, (side, side, channels),
                 True)


def _turn(img, quarters):
  """``img`` [H, W, C] turned counterclockwise by ``quarters`` x 90 degrees, written out by
  index: one quarter turn is out[a, b] = img[b, W - 1 - a]."""
  out = img
  for _ in range(quarters % 4):
    h, w = out.shape[:2]
    out = np.stack([np.stack([out[b, w - 1 - a] for b in range(h)]) for a in range(w)])
  return out


def _clients_rotated(got: FederatedData, orig: FederatedData, k: int):
  for i in range(orig.num_clients):
    xg, yg = got.client(i)
    xo, yo = orig.client(i)
    r = i % k
    assert xg.shape == xo.shape and xg.dtype == xo.dtype
    for a, b in zip(xg, xo):
      np.testing.assert_array_equal(a, np.rot90(b, r * (4 // k), axes=(0, 1)))
      np.testing.assert_array_equal(a, _turn(b, r * 4 // k))
    np.testing.assert_array_equal(yg, yo)
  np.testing.assert_array_equal(got.offsets, orig.offsets)
  np.testing.assert_array_equal(got.counts, orig.counts)
  assert got.x.shape == orig.x.shape and got.x.dtype == orig.x.dtype
  assert got.y.dtype == orig.y.dtype


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("channels", [1, 3])
def test_each_clients_images_turn_by_its_cluster(k, channels):
  orig = image_dataset(channels=channels)
  ds = holdout.split(orig, 0.3, 0)   # each client's own test data, then the rotation
  got = rotation.rotate_clusters(ds, k)
  again = holdout.split(image_dataset(channels=channels), 0.3, 0)  # drawn independently
  _clients_rotated(got.train, again.train, k)
  _clients_rotated(got.client_test, again.client_test, k)
  for j, (a, b) in enumerate(zip(got.test_x, again.test_x)):
    np.testing.assert_array_equal(a, np.rot90(b, (j % k) * (4 // k), axes=(0, 1)))
  np.testing.assert_array_equal(got.test_y, again.test_y)
  assert got.test_x.dtype == np.uint8 and got.test_x.shape == again.test_x.shape
  assert got.name == f"imgs_rot{k}" and got.feature_shape == again.feature_shape
  assert (got.num_classes, got.is_image) == (again.num_classes, again.is_image)
  # the input is not written to
  np.testing.assert_array_equal(ds.train.x, again.train.x)
  np.testing.assert_array_equal(ds.test_x, again.test_x)
  # every rotation is a different image here, and every cluster is rotated
  moved = [not np.array_equal(got.train.client(i)[0], again.train.client(i)[0])
           for i in range(again.train.num_clients) if again.train.counts[i]]
  assert moved == [i % k != 0 for i in range(again.train.num_clients) if again.train.counts[i]]
  assert got.report() == again.report()


def test_the_test_set_has_an_equal_share_per_rotation_and_half_turns_are_exact():
  orig = image_dataset(num_test=8)
  got = rotation.rotate_clusters(orig, 4)
  for j in range(8):  # 0, 90, 180, 270 degrees, twice
    want = {0: orig.test_x[j], 1: orig.test_x[j].transpose(1, 0, 2)[::-1],
            2: orig.test_x[j][::-1, ::-1], 3: orig.test_x[j].transpose(1, 0, 2)[:, ::-1]}[j % 4]
    np.testing.assert_array_equal(got.test_x[j], want)
  half = rotation.rotate_clusters(orig, 2)
  np.testing.assert_array_equal(half.test_x[1::2], orig.test_x[1::2, ::-1, ::-1])
  np.testing.assert_array_equal(half.test_x[::2], orig.test_x[::2])
  np.testing.assert_array_equal(rotation.cluster_of(7, 4), [0, 1, 2, 3, 0, 1, 2])
  np.testing.assert_array_equal(rotation.cluster_of(5, 2), [0, 1, 0, 1, 0])
  np.testing.assert_array_equal(rotation.cluster_of(3, 0), [0, 0, 0])


def test_float_images_keep_their_dtype():
  orig = image_dataset(dtype=np.float32)
  got = rotation.rotate_clusters(orig, 4)
  assert got.train.x.dtype == np.float32 and got.test_x.dtype == np.float32
  _clients_rotated(got.train, orig.train, 4)


@pytest.mark.parametrize("k", [0, 1])
def test_zero_and_one_leave_the_data_bit_for_bit(k):
  orig = holdout.split(image_dataset(), 0.3, 0)
  got = rotation.rotate_clusters(orig, k)
  for a, b in ((got.train.x, orig.train.x), (got.client_test.x, orig.client_test.x),
               (got.test_x, orig.test_x)):
    assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
  assert got.name == orig.name
  # and the identity does not need images
  toy = toy_dataset()
  assert rotation.rotate_clusters(toy, k) is toy


def test_what_is_refused():
  with pytest.raises(UsageError) as e:
    rotation.rotate_clusters(toy_dataset(), 4)
  assert "--rotation_clusters=4 needs a dataset of square images" in one_line(e)
  assert "got --dataset=toy (not images)" in one_line(e)
  ds = image_dataset()
  wide = Dataset("wide", FederatedData(np.zeros((2, 4, 6, 1), np.uint8), np.zeros(2, np.int32),
                                       np.array([0, 1], np.int32), np.array([1, 1], np.int32)),
                 np.zeros((1, 4, 6, 1), np.uint8), np.zeros(1, np.int32), 10, (4, 6, 1), True)
  with pytest.raises(UsageError) as e:
    rotation.rotate_clusters(wide, 2)
  assert "images of shape 4x6x1, not square" in one_line(e)
  flat = Dataset("flat", FederatedData(ds.train.x.reshape(len(ds.train.y), -1), ds.train.y,
                                       ds.train.offsets, ds.train.counts),
                 ds.test_x, ds.test_y, 10, (6, 6, 1), True)
  with pytest.raises(UsageError) as e:
    rotation.rotate_clusters(flat, 2)
  assert "images stored as 36, not 6x6x1" in one_line(e)
  with pytest.raises(ValueError, match="must be one of 0, 1, 2, 4"):
    rotation.rotate_clusters(ds, 3)
  with pytest.raises(UsageError) as e:
    config.resolve({"algo": "fedavg", "rotation_clusters": 3})
  assert "--rotation_clusters=3 is not valid; valid: 0, 1, 2, 4" in one_line(e)
  with pytest.raises(UsageError) as e:
    experiment.setup({"algo": "fedavg", "dataset": "synthetic", "num_clients": 10,
                      "rotation_clusters": 2, "host_devices": 1})
  assert "got --dataset=synthetic (not images)" in one_line(e)
  with pytest.raises(UsageError) as e:
    experiment.setup({"algo": "fedavg", "dataset": "synthetic", "num_clients": 10,
                      "rotation_clusters": 2, "data_per_seed": True, "host_devices": 1},
                     seeds=[0, 1])
  assert "--rotation_clusters does not work with --data_per_seed yet" in one_line(e)


def test_the_fingerprint_holds_the_setting_only_when_it_is_on():
  def fp(**kw):
    return run_dir.run_fingerprint(config.resolve({"algo": "fedavg", **kw}), [0], [])
  assert "rotation_clusters" not in fp()
  assert "rotation_clusters" not in fp(rotation_clusters=0)
  assert fp(rotation_clusters=4)["rotation_clusters"] == 4
  assert fp(rotation_clusters=1)["rotation_clusters"] == 1


@pytest.fixture
def femnist_dir(tmp_path):
  """LEAF FEMNIST files (28x28 float images): 8 writers of 6 training and 3 test samples."""
  rng = np.random.default_rng(1)
  users = [f"f{u:04d}_00" for u in range(8)]
  for split, n in (("train", 6), ("test", 3)):
    data = {u: _femnist_sample(rng, n) for u in users}
    _write(tmp_path / "data" / split / f"all_data_0_niid_05_keep_0_{split}_9.json", users, data)
  return tmp_path / "data"


def test_setup_rotates_after_the_holdout_split(femnist_dir):
  common = dict(algo="fedavg", dataset="leaf_json", data_dir=str(femnist_dir), num_clients=8,
                model="logreg", holdout_fraction=0.25, host_devices=1, clients_per_round=4)
  plain = experiment.setup(common).dataset
  exp = experiment.setup({**common, "rotation_clusters": 4})
  got = exp.dataset
  assert got.name == "leaf_json_rot4" and got.feature_shape == (28, 28, 1)
  _clients_rotated(got.train, plain.train, 4)
  _clients_rotated(got.client_test, plain.client_test, 4)
  for j, (a, b) in enumerate(zip(got.test_x, plain.test_x)):
    np.testing.assert_array_equal(a, np.rot90(b, j % 4, axes=(0, 1)))
  # the task trains and scores the rotated examples
  n = got.train.num_examples  # (the task holds them as logreg reads them: flat)
  np.testing.assert_array_equal(np.asarray(exp.task.x)[:n].reshape(got.train.x.shape),
                                got.train.x)
  assert run_dir.data_digest(exp) != run_dir.data_digest(experiment.setup(common))
  one = experiment.setup({**common, "rotation_clusters": 1})
  assert run_dir.data_digest(one) == run_dir.data_digest(experiment.setup(common))


def test_a_run_on_rotated_images(femnist_dir):
  r = api.run(algo="fedavg", dataset="leaf_json", data_dir=str(femnist_dir), num_clients=8,
              model="logreg", rotation_clusters=4, holdout_fraction=0.25, rounds=2,
              eval_every=1, seeds=[0], progress=False, host_devices=1, clients_per_round=4)
  assert r.config.data.rotation_clusters == 4
  acc = r.curves["test_accuracy"]
  assert acc.shape[0] >= 2 and np.all(np.isfinite(acc))
  assert np.all(np.isfinite(r.curves["client_test_accuracy"]))
