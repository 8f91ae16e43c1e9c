"""Checkpoints of a whole simulation: every run's state (server, clients, round counter,
divergence record), the evaluations so far and the wall time spent, in one .npz file
written atomically.

No PRNG state is saved because none exists between rounds: round t of a run draws from
`keys.round_key(keys.root(seed), t)` (engine.py), so the round counter is the key.

Layout: ``meta`` (JSON as uint8: format, fingerprint, config, rounds done, ...), ``leaf_I``
(the state's leaves in `jax.tree.flatten` order, run axis first) and ``eval_E.NAME`` /
``block_E.NAME`` (per-run metrics of evaluation E). Nothing is pickled.
"""

import json
import zipfile
from typing import Any

import numpy as np

from fedjax_bench.errors import UsageError
from fedjax_bench.output import results

FORMAT = 1
FILE = "checkpoint.npz"


def save(path: str, *, leaves: list, records: list, eval_rounds: list, meta: dict) -> None:
  """``records``: one (evals, block_metrics) pair of {name: [runs] array} per evaluation."""
  arrays = {f"leaf_{i}": np.asarray(leaf) for i, leaf in enumerate(leaves)}
  for e, (evals, block) in enumerate(records):
    arrays.update({f"eval_{e}.{k}": np.asarray(v) for k, v in evals.items()})
    arrays.update({f"block_{e}.{k}": np.asarray(v) for k, v in block.items()})
  header = {**meta, "format": FORMAT, "num_leaves": len(leaves),
            "eval_rounds": [int(r) for r in eval_rounds]}
  arrays["meta"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
  results.atomic_write_with(path, lambda f: np.savez(f, **arrays))


def load(path: str) -> tuple[list, list, list, dict]:
  """(leaves, records, eval_rounds, meta); a damaged file is a UsageError naming it."""
  try:
    with np.load(path, allow_pickle=False) as z:
      arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays.pop("meta").tobytes().decode())
    if meta.get("format") != FORMAT:
      raise ValueError(f"format {meta.get('format')!r}, expected {FORMAT}")
    _check_meta(meta)
    leaves = [arrays[f"leaf_{i}"] for i in range(meta["num_leaves"])]
    eval_rounds = meta["eval_rounds"]
    records = []
    for e in range(len(eval_rounds)):
      part = lambda kind: {k.split(".", 1)[1]: v for k, v in arrays.items()
                           if k.startswith(f"{kind}_{e}.")}
      records.append((part("eval"), part("block")))
  except (OSError, ValueError, KeyError, TypeError, AttributeError, EOFError,
          zipfile.BadZipFile, UnicodeDecodeError) as e:
    raise corrupt(path, f"{type(e).__name__}: {e}") from None
  return leaves, records, eval_rounds, meta


def corrupt(path: str, why: str) -> UsageError:
  why = why if len(why) <= 80 else why[:77] + "..."
  return UsageError(f"checkpoint {path} is corrupt ({why}); delete it or use "
                    "--overwrite to start over")


def _check_meta(meta: dict) -> None:
  """The types the reader relies on (ValueError otherwise): a damaged header must not pass
  as a state (a short `diverged` list would be broadcast over the runs)."""
  is_int = lambda v: isinstance(v, int) and not isinstance(v, bool)
  if not isinstance(meta.get("fingerprint"), dict):
    raise ValueError("no fingerprint")
  if not isinstance(meta.get("run_seconds"), (int, float)):
    raise ValueError("run_seconds is not a number")
  if not is_int(meta.get("num_leaves")) or meta["num_leaves"] < 0:
    raise ValueError("num_leaves is not a count")
  rounds = meta.get("eval_rounds")
  if (not isinstance(rounds, list) or not rounds or not all(map(is_int, rounds))
      or any(b <= a for a, b in zip(rounds, rounds[1:])) or rounds[0] != 0):
    raise ValueError(f"eval_rounds {_short(rounds)} are not increasing rounds from 0")
  diverged = meta.get("diverged")
  if not isinstance(diverged, list) or not all(map(is_int, diverged)):
    raise ValueError("diverged is not a list of rounds")


def check_matches(path: str, meta: dict, fingerprint: dict) -> None:
  """The checkpoint must come from the same configuration (seeds, grid, flags)."""
  saved = meta.get("fingerprint", {})
  if saved == fingerprint:
    return
  raise UsageError(f"checkpoint {path} was written by another configuration "
                   f"({difference(saved, fingerprint)}); give the same flags, another "
                   "--output_dir, or --overwrite to start over")


def difference(saved: dict, now: dict) -> str:
  """The first settings in which two fingerprints differ: "k: a there, b now, ..."."""
  keys = sorted(set(saved) | set(now))
  diff = [k for k in keys if saved.get(k) != now.get(k)]
  return ", ".join(f"{k}: {_short(saved.get(k))} there, {_short(now.get(k))} now"
                   for k in diff[:3])


def _short(value: Any, width: int = 40) -> str:
  text = json.dumps(value)
  return text if len(text) <= width else text[:width - 3] + "..."
