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

from fedjax_bench import results
from fedjax_bench.errors import UsageError

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
    for key in ("fingerprint", "run_seconds", "diverged"):
      meta[key]  # noqa: B018 (KeyError if absent)
    leaves = [arrays[f"leaf_{i}"] for i in range(meta["num_leaves"])]
    eval_rounds = meta["eval_rounds"]
    records = []
    for e in range(len(eval_rounds)):
      part = lambda kind: {k.split(".", 1)[1]: v for k, v in arrays.items()
                           if k.startswith(f"{kind}_{e}.")}
      records.append((part("eval"), part("block")))
  except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile,
          UnicodeDecodeError) as e:
    raise UsageError(f"checkpoint {path} is corrupt ({type(e).__name__}: {e}); delete it to "
                     "start over") from None
  return leaves, records, eval_rounds, meta


def check_matches(path: str, meta: dict, fingerprint: dict) -> None:
  """The checkpoint must come from the same configuration (seeds, grid, flags)."""
  saved = meta.get("fingerprint", {})
  if saved == fingerprint:
    return
  keys = sorted(set(saved) | set(fingerprint))
  diff = [k for k in keys if saved.get(k) != fingerprint.get(k)]
  shown = ", ".join(f"{k}: {_short(saved.get(k))} there, {_short(fingerprint.get(k))} now"
                    for k in diff[:3])
  raise UsageError(f"checkpoint {path} was written by another configuration ({shown}); "
                   "give the same flags, or another --output_dir")


def _short(value: Any) -> str:
  text = json.dumps(value)
  return text if len(text) <= 40 else text[:37] + "..."
