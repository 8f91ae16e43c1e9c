"""Every default that docs/FLAGS.md and the prose documents (README.md and every other page
of docs/) state for a setting is the value a run resolves to (`config.resolve`, the papers'
presets included), for every algorithm it is stated for.

docs/FLAGS.md: each table row's default, for every algorithm that reads the setting ("all":
every algorithm), except those its "[default X for A, B; Y for C]" names with a value of
their own. The prose documents: "`--name`, default V" and "`--name` ... (default V" name the
algorithms of their table row (an "| `algo`, `algo` |" row), else every algorithm that reads
the setting; "`--name=...` ... the default `V`" (in one sentence) the same.
"""

import functools
import re

import pytest

from tests.conftest import REPO
from fedjax_bench import algorithms, config

# The asynchronous algorithms' preset evaluates about 20 times a run (--rounds / 20), a
# value derived from --rounds that docs/FLAGS.md's eval_every row does not state.
DERIVED = {("eval_every", n) for n, a in algorithms.ALGORITHMS.items()
           if a.kind == algorithms.ASYNCHRONOUS}
VALUE = r"`?([A-Za-z0-9_.+-]+)`?(?=[\s;,)])"


@functools.cache
def _flat(algo: str) -> dict:
  return config.resolve({"algo": algo}).flat()


def _resolved(algo: str, name: str):
  flat = _flat(algo)
  assert name in flat, f"{name} is documented for {algo}, which does not read it"
  return flat[name], flat


def _same(text: str, value) -> bool:
  if isinstance(value, bool) or value is None:
    return text == str(value)
  if isinstance(value, (int, float)):
    try:
      return float(text) == value
    except ValueError:
      return False
  if isinstance(value, tuple):
    return text == ",".join(map(str, value))
  return text == value


def _readers(name: str) -> list[str]:
  return [a for a in algorithms.ALGORITHMS if name in config.specs(a)]


def flags_md_statements(text: str) -> list[tuple[str, str, str, str]]:
  """[(setting, algorithm, the stated default, the row's help)] of docs/FLAGS.md's tables."""
  out = []
  for line in text.splitlines():
    if not line.startswith("| `--"):
      continue
    cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
    if len(cells) != 4:
      continue
    name, default, who, meaning = cells[0].strip("`")[2:], cells[1].strip("`"), cells[2], cells[3]
    readers = _readers(name) if who == "all" else [a.strip() for a in who.split(",")]
    own = {}
    m = re.search(r"\[default (.*?)\]", meaning)
    if m:
      for part in m.group(1).split("; "):
        value, sep, names = part.partition(" for ")
        assert sep, f"docs/FLAGS.md --{name}: unreadable '[default {m.group(1)}]'"
        own.update({a.strip(): value for a in names.split(",")})
    for a in readers:
      out.append((name, a, own.get(a, default), meaning))
  return out


def doc_statements(text: str) -> list[tuple[str, str, str]]:
  """[(setting, algorithm, the stated default)] of a prose document's sentences."""
  out, blocks = [], []
  for line in text.splitlines():  # table rows one by one, other text by paragraph
    if line.startswith("|") or not line.strip() or not blocks or blocks[-1].startswith("|"):
      blocks.append(line)
    else:
      blocks[-1] += " " + line.strip()
  for line in blocks:
    algos = []
    if line.startswith("| `"):
      first = line.split("|")[1]
      algos = [a for a in re.findall(r"`([a-z0-9_]+)`", first) if a in algorithms.ALGORITHMS]
    found = []
    found += re.findall(r"`--([a-z0-9_]+)`, default " + VALUE, line)
    found += re.findall(r"`--([a-z0-9_]+)`[^`()|]*\(default " + VALUE, line)
    found += re.findall(r"`--([a-z0-9_]+)=[^`]*`[^.|`]*?the default `([A-Za-z0-9_.+-]+)`", line)
    for name, value in found:
      for a in algos or _readers(name):
        out.append((name, a, value))
  return out


FLAGS_MD = flags_md_statements((REPO / "docs" / "FLAGS.md").read_text())
# The prose documents: the README and every page of docs/ but the generated FLAGS.md.
DOCS = [REPO / "README.md"] + sorted(p for p in (REPO / "docs").rglob("*.md")
                                     if p.name != "FLAGS.md")
STATEMENTS = [(str(p.relative_to(REPO)), *s) for p in DOCS for s in doc_statements(p.read_text())]


def test_the_documents_are_read():
  """The parsers find what the documents state (a changed layout must not pass vacuously)."""
  assert len({(n, a) for n, a, _, _ in FLAGS_MD}) > 1000
  stated = {(n, a): v for n, a, v, _ in FLAGS_MD}
  assert {("prox_mu", "fedprox"), ("prox_mu", "fedalign_prox"), ("weighting", "fedavg"),
          ("weighting", "fedalign"), ("participation", "fedalign")} <= set(stated)
  found = {(doc, n, a) for doc, n, a, _ in STATEMENTS}
  assert {("docs/algorithms.md", "prox_mu", "fedprox_priority"),
          ("docs/algorithms.md", "local_optimum", "fedsoftmax"),
          ("docs/running.md", "checkpoint_every", "fedavg"),
          ("docs/running.md", "host_devices", "fedavg")} <= found


def test_the_parsers_read_a_per_algorithm_default():
  row = ("| `--prox_mu` | `0.01` | fedalign, fedprox | FedProx term. [default 1.0 for fedalign] "
         "Sweepable. |")
  assert [(n, a, v) for n, a, v, _ in flags_md_statements(row)] == [
      ("prox_mu", "fedalign", "1.0"), ("prox_mu", "fedprox", "0.01")]
  line = "| `fedprox` | Li et al. | the FedProx term (`--prox_mu`, default 1) |"
  assert doc_statements(line) == [("prox_mu", "fedprox", "1")]
  assert not _same("1", config.resolve({"algo": "fedprox"}).flat()["prox_mu"])


def _flags_md_mismatch(name, algo, stated, meaning):
  if (name, algo) in DERIVED:
    return None
  value, flat = _resolved(algo, name)
  rule = re.search(r"\((-?\d+): (\d+)% of --rounds\)", meaning)
  if rule and stated == rule.group(1):  # a documented sentinel, resolved by the preset
    ok = value in (int(stated), flat["rounds"] * int(rule.group(2)) // 100)
  else:
    ok = _same(stated, value)
  return None if ok else f"{algo}: docs/FLAGS.md says {stated}, it resolves to {value!r}"


@pytest.mark.parametrize("name", sorted({n for n, *_ in FLAGS_MD}))
def test_flags_md_default_is_the_resolved_one(name):
  wrong = [_flags_md_mismatch(*row) for row in FLAGS_MD if row[0] == name]
  wrong = [w for w in wrong if w]
  assert not wrong, f"--{name}: " + "; ".join(wrong)


@pytest.mark.parametrize("doc,name,algo,stated", STATEMENTS,
                         ids=[f"{d}-{n}-{a}" for d, n, a, _ in STATEMENTS])
def test_documented_default_is_the_resolved_one(doc, name, algo, stated):
  value, _ = _resolved(algo, name)
  assert _same(stated, value), (f"{doc} says --{name} defaults to {stated} for {algo}; "
                                f"it resolves to {value!r}")
