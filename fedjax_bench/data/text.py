"""Character text as next-character samples, LEAF's Shakespeare form.

Each passage (a speech) gives one sample per character of it and one for its end: the
input is the SEQ_LEN characters before that position (left-padded with PAD at the start
of the passage), the label the character there, or END ("\\n", LEAF's line end) after the
passage's last character. LEAF pads with spaces; PAD is its own id here, so the model can
tell the start of a speech from a space. Ids: PAD 0, LEAF's 80 characters 1..80 (END is
"\\n", id 1), OOV 81 for any other character. A sample whose label would be OOV is not
made (its character still appears, as OOV, in later inputs): accuracy is then counted over
in-vocabulary characters, as FedJAX's ``accuracy_in_vocab`` leaves out what no model can
name. Samples never have PAD as label.
"""

import numpy as np

SEQ_LEN = 80
# LEAF's ALL_LETTERS (models/utils/language_utils.py), in its order.
LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
PAD, OOV = 0, len(LETTERS) + 1
VOCAB_SIZE = len(LETTERS) + 2
END = "\n"
_IDS = np.full(0x110000, OOV, np.int8)
_IDS[[ord(c) for c in LETTERS]] = np.arange(1, len(LETTERS) + 1)


def encode(text: str) -> np.ndarray:
  """[len(text)] int8 ids."""
  codes = np.frombuffer(text.encode("utf-32-le"), np.uint32)
  return _IDS[codes]


def decode(ids) -> str:
  """The characters of ids (PAD as "", OOV as "\\ufffd")."""
  table = {0: "", OOV: "\ufffd", **{i + 1: c for i, c in enumerate(LETTERS)}}
  return "".join(table[int(i)] for i in np.asarray(ids).reshape(-1))


def stream(passages, seq_len: int = SEQ_LEN) -> np.ndarray:
  """[S] int8: each passage's ids and END, each after seq_len PAD: the text `windows`
  turns into samples (a compact form to store: one byte a sample, plus the padding)."""
  parts = []
  for passage in passages:
    parts += [np.full(seq_len, PAD, np.int8), encode(passage + END)]
  return np.concatenate(parts) if parts else np.zeros(0, np.int8)


def windows(ids: np.ndarray, seq_len: int = SEQ_LEN) -> tuple[np.ndarray, np.ndarray, int]:
  """(x [n, seq_len] int8, y [n] int32, dropped) of a `stream`: a sample at every position
  that holds a character of a passage or its END (not PAD), its input the seq_len ids
  before it; a position holding OOV makes no sample and is counted in ``dropped``."""
  ids = np.asarray(ids, np.int8)
  if ids.shape[0] <= seq_len:
    return np.zeros((0, seq_len), np.int8), np.zeros(0, np.int32), 0
  label = ids[seq_len:]
  keep = np.flatnonzero((label != PAD) & (label != OOV))
  dropped = int(np.sum(label == OOV))
  view = np.lib.stride_tricks.sliding_window_view(ids[:-1], seq_len)
  return view[keep], label[keep].astype(np.int32), dropped


def samples(passages, seq_len: int = SEQ_LEN) -> tuple[np.ndarray, np.ndarray, int]:
  """(x [n, seq_len] int8, y [n] int32, dropped): the next-character samples of the
  passages in order, and how many labels were OOV (not made)."""
  return windows(stream(passages, seq_len), seq_len)
