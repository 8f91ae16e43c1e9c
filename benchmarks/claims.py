"""Every paper's claims, checked from its runs (`fedjax_bench.claims`).

  python benchmarks/claims.py --check            # committed reports = what the runs give
  python benchmarks/claims.py --list [PAPER ...]  # each claim's verdict, each run's state
  python benchmarks/claims.py PAPER [--claim=ID] [--force]
      # makes PAPER's missing and stale runs (or claim ID's), then writes its report files
  python benchmarks/claims.py --report_only PAPER [PAPER ...]
      # writes the report files from the committed runs, running nothing
  python benchmarks/claims.py --verify [PAPER ...] [--claim=ID] [--refresh | --remake]
      # reruns them aside; fails if a verdict differs from the committed runs' one; a
      # whole paper's verification is written to results/PAPER/VERIFY.md (the slow tier:
      # every paper, hours on 2 cores); --refresh: a stale run whose rerun gives the
      # same numbers takes the rerun's record (the current code's hashes); --remake:
      # every stale run takes its rerun's record and the report is regenerated
  python benchmarks/claims.py leaderboard --pending=TASK
      # makes the runs of a leaderboard task still without its table

(`python -m benchmarks.claims ...` from the repository root is the same.)

A paper is declared in benchmarks/papers/PAPER.py: its runs (settings, seeds) and its
claims (the paper's statement and number, the test that gives the verdict). Runs are
cached in results/PAPER/runs/, one JSON file each, with the key of their configuration
and the hashes of the library code they ran on; a run whose configuration or code
changed is stale: `PAPER` reruns it before writing the report. The report is three files
in results/PAPER/: REPORT.md (the answer: the verdict counts of the paper's claims and its
multiplicity, the claim tables, then the setting, the checks that are not claims of the
paper, the figures), VERDICTS.md (the rules, and how each verdict is computed) and RUNS.md
(the runs, their times and commands). `--check` reads files only (the default test suite runs
it): it fails when a report file is not what the runs give, a run is missing or of
another configuration, or a claim compares two algorithms of which a paper's preset gives
one settings the other reads at other values (`fedjax_bench.claims.pairs`; making the runs
refuses that too), and warns about runs made on code that changed since (`--strict`: fails
on them too), so a library change does not wait on hours of reruns, and the warning says
which reports to regenerate.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not __package__:
  # Run as a file, Python puts benchmarks/ first on sys.path; the repository root takes its
  # place, so that `benchmarks.papers` and this checkout's `fedjax_bench` import, as with
  # `python -m benchmarks.claims` from the root.
  sys.path[0] = ROOT

from absl import flags  # noqa: E402

from fedjax_bench import cli  # noqa: E402
from fedjax_bench.output import results  # noqa: E402
from fedjax_bench.claims import pairs, paper as paper_lib, store  # noqa: E402
from fedjax_bench.errors import UsageError  # noqa: E402
from benchmarks import papers  # noqa: E402

flags.DEFINE_bool("check", False, "Fail if a committed report file (REPORT.md, VERDICTS.md, "
                  "RUNS.md) differs from what its committed runs produce, or a run is missing "
                  "or of another "
                  "configuration; runs made on code changed since are a warning.")
flags.DEFINE_bool("strict", False, "With --check, runs made on code changed since fail too.")
flags.DEFINE_bool("list", False, "Print each claim's verdict and each run's state.")
flags.DEFINE_string("claim", "", "Only this claim's runs (with a PAPER).")
flags.DEFINE_bool("force", False, "Rerun the runs even when fresh.")
flags.DEFINE_string("pending", "", "With a PAPER: make the runs of its pending group of this "
                    "name (a leaderboard task without its table), which no report reads yet, "
                    "instead of the report's; the report files are then written as usual.")
flags.DEFINE_bool("report_only", False, "Write the named papers' report files and figures "
                  "from their committed runs, running nothing (runs made on code changed "
                  "since are reported, as --check accepts them); fails if a run is missing "
                  "or of another configuration.")
flags.DEFINE_bool("verify", False, "Rerun the papers' runs (every paper's, or those named; "
                  "with --claim one claim's) in a temporary directory, leaving the committed "
                  "ones, and fail if a verdict differs from the committed runs' one; a whole "
                  "paper's verification is written to results/PAPER/VERIFY.md.")
flags.DEFINE_bool("refresh", False, "With --verify: a committed run made on code changed since "
                  "whose rerun gives the same record (every metric to its 7 digits, the same "
                  "divergence) is replaced by the rerun, which carries the current code's "
                  "hashes; a run whose numbers moved is left stale for `PAPER` to remake.")
flags.DEFINE_bool("remake", False, "With --verify: every committed run made on "
                  "code changed since (or missing) takes its rerun's record whatever its "
                  "numbers, and the report is regenerated; VERIFY.md lists the verdicts of the "
                  "runs committed before and of the reruns, so a change of code that moved "
                  "numbers is verified and remade in one pass.")
flags.DEFINE_string("verify_dir", "", "With --verify: keep the reruns in VERIFY_DIR/PAPER/ "
                    "instead of a temporary directory; an interrupted verification started "
                    "again reuses the reruns there that are fresh.")
flags.DEFINE_string("results_dir", os.path.join(ROOT, "results"),
                    "Where results/PAPER/ lives.")
FLAGS = flags.FLAGS


def chosen(names) -> list:
  unknown = [n for n in names if n not in papers.PAPERS]
  if unknown:
    raise UsageError(f"unknown paper {unknown[0]!r}; valid: {', '.join(papers.PAPERS)}")
  return [papers.PAPERS[n] for n in (names or papers.PAPERS)]


def records_of(p, root: str) -> dict:
  out = {}
  for r in p.runs:
    rec = store.load(p.runs_dir(root), r)
    if rec is not None:
      out[r.name] = rec
  return out


def report_path(p, root: str, file: str = "REPORT.md") -> str:
  return os.path.join(p.directory(root), file)


def states(p, records, prepared=None) -> dict:
  """{run name: state} of the runs the claims read; ``prepared``: {run name:
  store.prepare(run)}, where the caller has resolved them."""
  prepared = prepared or {}
  key = lambda r: store.config_key(r, prepared[r.name]) if r.name in prepared else None
  return {r.name: store.status(records.get(r.name), r, key(r)) for r in p.claim_runs()}


def check(ps, root: str, strict: bool) -> int:
  bad = 0
  for p in ps:
    records = records_of(p, root)
    prepared = {r.name: store.prepare(r) for r in p.claim_runs()}  # for states and pairs
    st = states(p, records, prepared)
    if p.name in papers.PENDING:
      made = sum(s == "fresh" or s.startswith("code changed") for s in st.values())
      print(f"{p.name}: pending, not checked: {made} of its {len(st)} runs made "
            f"(python benchmarks/claims.py {p.name} makes the others)")
      continue
    problems = [f"run {n}: {s}" for n, s in st.items()
                if s != "fresh" and (strict or not s.startswith("code changed"))]
    problems += pairs.unequal_presets(p, {n: c[0] for n, c in prepared.items()})
    for n, s in st.items():
      if s.startswith("code changed") and not strict:
        print(f"{p.name}: warning: run {n} is stale, {s} "
              f"(python benchmarks/claims.py {p.name} reruns it)")
    if not problems:
      for file, want in paper_lib.render(p, records).items():
        path = report_path(p, root, file)
        have = open(path).read() if os.path.exists(path) else None
        if have != want:
          problems.append(f"{path} differs from what its runs produce "
                          f"(python benchmarks/claims.py --report_only {p.name})")
    for line in problems:
      print(f"{p.name}: {line}")
    print(f"{p.name}: {'FAILED' if problems else 'ok'}")
    bad += bool(problems)
  return 1 if bad else 0


def listing(ps, root: str) -> int:
  for p in ps:
    records = records_of(p, root)
    st = states(p, records)
    print(f"{p.name}: {len(p.claims)} claims, {len(st)} runs "
          f"({sum(s == 'fresh' for s in st.values())} fresh)")
    for c in p.claims:
      runs = c.test.runs() if c.test is not None else ()
      if all(st.get(r) == "fresh" for r in runs):
        o = c.outcome(records)
        print(f"  {c.id:<14} {o.verdict:<15} {o.ours} {o.interval}"
              + (" (a check)" if c.check else ""))
      else:
        print(f"  {c.id:<14} {'(runs missing or stale)':<15}")
    for n, s in st.items():
      if s != "fresh":
        print(f"  run {n}: {s}")
  return 0


def make(p, root: str, claim_id: str, force: bool, pending: str = "") -> int:
  if pending:
    runs = _pending_runs(p, pending, claim_id)
  else:
    _known_claim(p, claim_id)
    runs = p.claim_runs(claim_id or None)
    unequal = pairs.unequal_presets(p)
    if unequal:
      raise UsageError(f"{p.name}: {unequal[0]}" + (f" (and {len(unequal) - 1} more)"
                                                     if len(unequal) > 1 else ""))
  todo = [r for r in runs if force or store.status(store.load(p.runs_dir(root), r), r) != "fresh"]
  print(f"{p.name}: {len(runs)} runs, {len(todo)} to make", flush=True)
  for i, r in enumerate(todo):
    print(f"[{i + 1}/{len(todo)}] {r.name}", flush=True)
    store.execute(p.runs_dir(root), r)
  records = write_report(p, root) or records_of(p, root)
  for c in p.claims:
    if claim_id in ("", c.id) and all(n in records for n in
                                      (c.test.runs() if c.test is not None else ())):
      o = c.outcome(records)
      print(f"  {c.id:<14} {o.verdict:<15} {o.ours} {o.interval}")
  return 0


def write_report(p, root: str) -> dict:
  """Writes the paper's report files (`paper_lib.render`) and figures from its
  committed runs when each has the configuration its declaration gives (a run made on
  code changed since is reported, as `--check` accepts it, and named; `--check --strict`
  fails on it); returns the records, or None when a run is missing or of another
  configuration."""
  records = records_of(p, root)
  st = states(p, records)
  unusable = {n: s for n, s in st.items() if s != "fresh" and not s.startswith("code changed")}
  if unusable:  # with --claim, the others' runs may not be made
    print(f"{p.name}: report not written, {len(unusable)} runs missing or of another "
          f"configuration (python benchmarks/claims.py {p.name})")
    return None
  files = paper_lib.render(p, records)
  for file, text in files.items():
    results.atomic_write_text(report_path(p, root, file), text)
  paper_lib.plot(p, records, root)
  changed = sum(s.startswith("code changed") for s in st.values())
  note = (f" ({changed} of its runs made on code changed since: python benchmarks/claims.py "
          f"{p.name} reruns them)" if changed else "")
  print(f"wrote {', '.join(report_path(p, root, f) for f in files)}{note}")
  return records


def verify(p, root: str, claim_id: str, refresh: bool = False, remake: bool = False) -> int:
  """Reruns the claims' runs aside and compares each verdict with the committed one (not
  where the committed run is of another configuration: its declaration changed); with
  ``refresh``, stale committed runs whose rerun has the same numbers take it; with
  ``remake``, every stale or missing committed run takes its rerun and the report is
  regenerated."""
  import tempfile

  import numpy as np
  _known_claim(p, claim_id)
  runs = p.claim_runs(claim_id or None)
  committed = records_of(p, root)
  with tempfile.TemporaryDirectory() as tmp:
    aside = os.path.join(FLAGS.verify_dir, p.name) if FLAGS.verify_dir else tmp
    rerun = {}
    for i, r in enumerate(runs):
      kept = store.load(aside, r)
      if kept is not None and store.status(kept, r) == "fresh":
        print(f"[{i + 1}/{len(runs)}] {p.name} {r.name}: rerun already in {aside}", flush=True)
        rerun[r.name] = kept
        continue
      print(f"[{i + 1}/{len(runs)}] {p.name} {r.name}", flush=True)
      rerun[r.name] = store.execute(aside, r)
  seconds = sum(rec["seconds"] for rec in rerun.values())
  run_rows, claim_rows, refreshed, remade = [], [], [], []
  other = set()  # committed runs of another configuration: no verdict of theirs compares
  runs_dir = os.path.join(p.directory(root), "runs")
  for r in runs:
    gap = None
    old = committed.get(r.name)
    if old is None or store.status(old, r) != "fresh":
      if old is not None and (refresh or remake) and store.same_numbers(rerun[r.name], old):
        results.atomic_write_json(store.path(runs_dir, r), rerun[r.name])
        refreshed.append(r.name)
        print(f"  {r.name}: the same numbers on the current code; refreshed")
      elif remake:
        results.atomic_write_json(store.path(runs_dir, r), rerun[r.name])
        remade.append(r.name)
        print(f"  {r.name}: remade from its rerun")
    if r.name in committed and rerun[r.name]["key"] != committed[r.name].get("key"):
      gap = "another configuration"  # other seeds, settings or rounds: nothing to compare
      other.add(r.name)
      print(f"  {r.name}: the committed run is of another configuration (seeds "
            f"{_seeds(committed[r.name])}, now {_seeds(rerun[r.name])})")
    elif r.name in committed:
      gap = max(float(np.nanmax(np.abs(np.asarray(rerun[r.name]["metrics"][m], np.float64)
                                       - np.asarray(committed[r.name]["metrics"][m], np.float64)),
                                initial=0.0))
                for m in rerun[r.name]["metrics"])
      same = "; the same numbers" if store.same_numbers(rerun[r.name], committed[r.name]) \
          else ""
      print(f"  {r.name}: largest difference of any metric from the committed run "
            f"{gap:.3g}{same}")
    run_rows.append((r.name, rerun[r.name]["seconds"], gap))
  for c in p.claims:
    if c.test is None or not set(c.test.runs()) <= set(rerun):
      continue
    # A claim that read a committed run of another configuration (its declaration changed
    # since) has no verdict to compare (same: None): a different one is no failure of the
    # code, and runs of other seeds may not even pair.
    apart = bool(set(c.test.runs()) & other)
    old, was = None, "missing"
    if all(n in committed for n in c.test.runs()):
      try:
        old = c.outcome(committed)
        was = old.verdict
      except ValueError:
        if not apart:
          raise
        was = "not computable"
    new = c.outcome({**committed, **rerun})
    same = None if apart else (old is not None and old.verdict == new.verdict)
    claim_rows.append((c.id, was, new.verdict, same))
    state = {True: "same", False: "DIFFERS", None: "another configuration"}[same]
    print(f"  {c.id:<14} {state}: committed {was} {old.ours if old else ''}, rerun "
          f"{new.verdict} {new.ours} {new.interval}")
  if not claim_id:
    path = os.path.join(p.directory(root), "VERIFY.md")
    results.atomic_write_text(path, paper_lib.verification_report(
        p.name, run_rows, claim_rows, seconds, next(iter(rerun.values()), {}), refreshed,
        remade))
    print(f"wrote {path}")
  if remade:
    write_report(p, root)
  return 1 if any(row[3] is False for row in claim_rows) else 0


def _seeds(record) -> str:
  return ",".join(str(s) for s in record["seeds"])


def _known_claim(p, claim_id: str) -> None:
  if claim_id and claim_id not in {c.id for c in p.claims}:
    raise UsageError(f"unknown claim {claim_id!r} of {p.name}; valid: "
                     + ", ".join(c.id for c in p.claims))
  if claim_id and not p.claim_runs(claim_id):  # a claim not attempted: nothing to run
    raise UsageError(f"claim {claim_id!r} of {p.name} has no runs; claims with runs: "
                     + ", ".join(c.id for c in p.claims if p.claim_runs(c.id)))


def _pending_runs(p, group: str, claim_id: str) -> list:
  if claim_id:
    raise UsageError("--pending and --claim exclude each other: a pending group's runs are "
                     "read by no claim yet")
  if group not in p.pending:
    raise UsageError(f"{p.name} has no pending group {group!r}; valid: "
                     + (", ".join(p.pending) or "none"))
  return list(p.pending[group])


def main(argv) -> int:
  names = argv[1:]
  root = FLAGS.results_dir
  if FLAGS.pending and (FLAGS.check or FLAGS.list or FLAGS.report_only or FLAGS.verify):
    raise UsageError("--pending makes a pending group's runs: not with --check, --list, "
                     "--report_only or --verify")
  if FLAGS.check:
    return check(chosen(names), root, FLAGS.strict)
  if FLAGS.list:
    return listing(chosen(names), root)
  if FLAGS.report_only:
    if not names:
      raise UsageError("name the papers whose report files to write (valid: "
                       + ", ".join(papers.PAPERS) + ")")
    return max(int(write_report(p, root) is None) for p in chosen(names))
  if FLAGS.verify and not FLAGS.claim:
    return max(verify(p, root, "", FLAGS.refresh, FLAGS.remake) for p in chosen(names))
  if len(names) != 1:
    raise UsageError("name one paper to run (valid: " + ", ".join(papers.PAPERS)
                     + "), or pass --check, --list, --report_only or --verify")
  if FLAGS.verify:
    return verify(chosen(names)[0], root, FLAGS.claim, FLAGS.refresh, FLAGS.remake)
  return make(chosen(names)[0], root, FLAGS.claim, FLAGS.force, FLAGS.pending)


if __name__ == "__main__":
  cli.run_script(main)
