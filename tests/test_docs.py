"""The documentation cites only what exists.

For every Markdown file at the repository root and under docs/ (not results/ or benchmarks/,
whose files are generated or local):

1. every relative link `[text](path#anchor)` resolves to a file or directory of the
   repository, and its anchor to a heading of the target (GitHub's slugs);
2. every code name cited in backticks that points into the package resolves:
   - a path (`fedjax_bench/core/local.py`, `core/local.py`, `claims/store.py`,
     `tests/core/test_keys.py`, `results/speed/`) exists, relative to the repository root or to
     the package; a bare file name (`compile_cache.py`) exists somewhere under
     fedjax_bench/, benchmarks/ or tests/;
   - a dotted name whose first part is a module of the package (`rounds.static`,
     `claims.store.config_key`, `algorithms/asynchronous.Method`, `fedjax_bench.run`) is an
     attribute of that module; one whose first part is a class or function the package
     defines (`Task.for_run`, `ServerState.aux`) is an attribute or field of it. A call's
     arguments are ignored (`config.resolve(values)` is `config.resolve`). Dotted names of
     other libraries (`jax.random`, `np.savez`) and file names (`config.json`) are not
     checked;
   - a test name (`test_keys_are_never_reused`, or a prefix ending in `*`) is defined under
     tests/;
3. every flag cited (a code span starting with `--`, or a `--name` inside a cited
   `python benchmarks/...` / `python -m benchmarks...` / `python -m fedjax_bench` /
   `fedjax-bench` command) is a declared setting, a run-only flag of the command line, or a
   flag a benchmark script defines.

Placeholders (`algorithms/NAME.py`, `results/PAPER/REPORT.md`, `--FLAG=VALUE`) are skipped.
A bare `name()` is not checked: it usually names a protocol's method (`init`, `round`).

Beyond the docs, no file of the repository (sources, tests, flagfiles, reports; not the run
records under results/*/runs/ nor this file) cites the notes the project was started from,
which a clone does not have: the shared folder beside the checkout (its specs, papers and
design notes; only its TFDS data directory may be named, as a default location) or a spec's
section numbers ("spec 000 §8", "the spec's pseudocode"). Cite the paper's own sections,
equations, tables and figures, or the decision record in docs/papers/.
"""

import functools
import importlib
import inspect
import os
import pkgutil
import re
import subprocess

import pytest

import fedjax_bench

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.dirname(os.path.abspath(fedjax_bench.__file__))

FILE_EXTENSIONS = {"json", "csv", "png", "md", "cfg", "toml", "txt", "npz", "npy", "flags",
                   "yaml", "yml", "h5", "gz", "zip", "svg", "pdf", "cff", "lock", "html", "sh",
                   "cc"}
PLACEHOLDER = re.compile(r"NAME|PAPER|FLAG|VALUE|<|>|\*|\{|\.\.\.")
ALWAYS_FLAGS = {"help", "helpfull", "helpshort", "flagfile"}


def doc_files() -> list[str]:
  out = [f for f in sorted(os.listdir(ROOT)) if f.endswith(".md")]
  docs = os.path.join(ROOT, "docs")
  for base, _, files in os.walk(docs):
    out += [os.path.relpath(os.path.join(base, f), ROOT) for f in sorted(files)
            if f.endswith(".md")]
  return out


# --- Markdown -----------------------------------------------------------------------------

FENCE = re.compile(r"^\s*(```|~~~)")


def prose_lines(text: str) -> list[tuple[int, str]]:
  """(line number, line) outside fenced code blocks."""
  out, fenced = [], False
  for n, line in enumerate(text.splitlines(), 1):
    if FENCE.match(line):
      fenced = not fenced
      continue
    if not fenced:
      out.append((n, line))
  return out


CODE_SPAN = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def code_spans(text: str) -> list[tuple[int, str]]:
  out = []
  for n, line in prose_lines(text):
    for m in CODE_SPAN.finditer(line):
      out.append((n, m.group(2).strip()))
  return out


def links(text: str) -> list[tuple[int, str]]:
  out = []
  for n, line in prose_lines(text):
    line = CODE_SPAN.sub("", line)
    out += [(n, m.group(1)) for m in LINK.finditer(line)]
  return out


def slug(heading: str) -> str:
  """GitHub's anchor for a heading's text."""
  text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
  text = text.replace("`", "").strip().lower()
  text = re.sub(r"[^\w\- ]", "", text)
  return text.replace(" ", "-")


def anchors(path: str) -> set[str]:
  with open(path, encoding="utf-8") as f:
    text = f.read()
  out, seen = set(), {}
  for _, line in prose_lines(text):
    m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
    if not m:
      continue
    s = slug(m.group(1))
    k = seen.get(s, 0)
    out.add(s if k == 0 else f"{s}-{k}")
    seen[s] = k + 1
  return out


def link_problems(doc: str, text: str) -> list[str]:
  problems = []
  here = os.path.dirname(os.path.join(ROOT, doc))
  for n, target in links(text):
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
      continue  # http:, https:, mailto:
    path, _, anchor = target.partition("#")
    full = os.path.normpath(os.path.join(here, path)) if path else os.path.join(ROOT, doc)
    if not os.path.exists(full):
      problems.append(f"{doc}:{n}: link to {target}: no such file")
      continue
    if not os.path.realpath(full).startswith(os.path.realpath(ROOT) + os.sep):
      problems.append(f"{doc}:{n}: link to {target}: outside the repository")
      continue
    if anchor and full.endswith(".md") and anchor not in anchors(full):
      problems.append(f"{doc}:{n}: link to {target}: no heading #{anchor}")
  return problems


# --- the package's names ------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def package_modules() -> dict:
  """{dotted name without the package prefix: module} of every importable submodule."""
  out = {"": fedjax_bench}
  for info in pkgutil.walk_packages(fedjax_bench.__path__, "fedjax_bench."):
    if info.name.endswith("__main__"):
      continue
    out[info.name[len("fedjax_bench."):]] = importlib.import_module(info.name)
  return out


@functools.lru_cache(maxsize=None)
def by_leaf() -> dict:
  out = {}
  for name, module in package_modules().items():
    if name:
      out.setdefault(name.split(".")[-1], []).append(module)
  return out


@functools.lru_cache(maxsize=None)
def defined_names() -> dict:
  """{top-level name: [objects]} of the classes and functions the package defines."""
  out = {}
  for module in package_modules().values():
    for name, obj in vars(module).items():
      if (inspect.isclass(obj) or inspect.isfunction(obj)) and \
          getattr(obj, "__module__", "").startswith("fedjax_bench"):
        out.setdefault(name, [])
        if obj not in out[name]:
          out[name].append(obj)
  return out


def _fields(cls) -> set:
  names = set()
  for klass in inspect.getmro(cls):
    names |= set(getattr(klass, "__dataclass_fields__", {}))
    names |= set(getattr(klass, "__annotations__", {}))
    names |= set(getattr(klass, "_fields", ()))
  return names


def has_attr(obj, name: str):
  """The attribute, `_FIELD` for a field that only instances have, or `_MISSING`."""
  if inspect.ismodule(obj):
    if hasattr(obj, name):
      return getattr(obj, name)
    try:  # a submodule not imported by its package
      return importlib.import_module(f"{obj.__name__}.{name}")
    except ImportError:
      return _MISSING
  if hasattr(obj, name):
    return getattr(obj, name)
  if inspect.isclass(obj):
    if name in _fields(obj):
      return _FIELD
    try:  # an attribute set in a method (self.name = ...)
      if re.search(rf"\bself\.{re.escape(name)}\s*=", inspect.getsource(obj)):
        return _FIELD
    except (OSError, TypeError):
      pass
  return _MISSING


_FIELD = object()
_MISSING = object()


def resolves(obj, rest: list[str]) -> bool:
  for name in rest:
    if obj is _FIELD:
      return True  # a field's own attributes are not checked
    obj = has_attr(obj, name)
    if obj is _MISSING:
      return False
  return True


def dotted_problem(name: str, cited: str = ""):
  """None when `name` resolves or is not a reference into the package, else why not."""
  why = _dotted_problem(name)
  return why and why.replace(f"`{name}`", f"`{cited or name}`")


def _dotted_problem(name: str):
  parts = name.split(".")
  if parts[0] == "fedjax_bench":
    parts = parts[1:]
    if not parts or resolves(fedjax_bench, parts):
      return None
    return f"`{name}`: fedjax_bench has no {'.'.join(parts)}"
  modules = package_modules()
  for k in range(len(parts) - 1, 0, -1):  # the longest prefix that is a module path
    prefix = ".".join(parts[:k])
    if prefix in modules and k > 1:
      return None if resolves(modules[prefix], parts[k:]) else \
          f"`{name}`: {prefix} has no {'.'.join(parts[k:])}"
  if parts[0] in by_leaf():
    if any(resolves(m, parts[1:]) for m in by_leaf()[parts[0]]):
      return None
    return f"`{name}`: module {parts[0]} has no {'.'.join(parts[1:])}"
  if parts[0] in defined_names():
    if any(resolves(o, parts[1:]) for o in defined_names()[parts[0]]):
      return None
    return f"`{name}`: {parts[0]} has no {'.'.join(parts[1:])}"
  return None


@functools.lru_cache(maxsize=None)
def files_named() -> dict:
  out = {}
  for top in ("fedjax_bench", "benchmarks", "tests", "examples"):
    for base, _, files in os.walk(os.path.join(ROOT, top)):
      for f in files:
        out.setdefault(f, []).append(os.path.join(base, f))
  return out


@functools.lru_cache(maxsize=None)
def defined_test_names() -> frozenset:
  names = set()
  for base, _, files in os.walk(os.path.join(ROOT, "tests")):
    for f in files:
      if f.endswith(".py"):
        with open(os.path.join(base, f), encoding="utf-8") as fh:
          names |= set(re.findall(r"^\s*def (test_\w+)", fh.read(), re.M))
  return frozenset(names)


def path_problem(path: str):
  """Why a cited path does not exist, or None."""
  path, _, test = path.partition("::")
  for base in (ROOT, PACKAGE):
    full = os.path.join(base, path)
    if os.path.exists(full):
      if test and not re.search(rf"def {re.escape(test)}\b", open(full, encoding="utf-8").read()):
        return f"`{path}::{test}`: no such test"
      return None
  if "/" not in path.rstrip("/") and path in files_named():
    return None
  if PLACEHOLDER.search(path) or path.startswith("results/runs/"):
    return None  # a placeholder, or a run's output directory (git ignores results/runs/)
  return f"`{path}`: no such file"


PATH = re.compile(r"^[\w.-]+(/[\w.-]*)*(::\w+)?$")
TOP_DIRS = {"fedjax_bench", "tests", "benchmarks", "results", "docs", "examples", "core",
            "data", "models", "sim", "algorithms", "claims"}
DOTTED = re.compile(r"^[A-Za-z_][\w/]*(\.[A-Za-z_]\w*)+$")
TEST = re.compile(r"^test(_[a-z0-9]+){3,}\*?$|^test_\w+\*$")  # not test_accuracy


def name_problems(doc: str, text: str) -> list[str]:
  problems = []
  for n, span in code_spans(text):
    span = span.strip()
    if " " in span and not re.match(r"^[\w./]+\(", span):
      continue  # a command or an expression: its flags are checked apart
    call = re.match(r"^([\w./]+)\(", span)
    token = call.group(1) if call else span
    token = token.rstrip(",;:")
    why = None
    if token.startswith(("..", "/", "~", "$", "http")):
      continue
    if TEST.match(token):
      t = token.rstrip("*")
      if not (t in defined_test_names() if not token.endswith("*")
              else any(x.startswith(t) for x in defined_test_names())):
        why = f"`{token}`: no such test under tests/"
    elif "/" in token or token.endswith(".py") or "::" in token:
      last = token.rstrip("/").rsplit("/", 1)[-1]
      ext = last.rsplit(".", 1)[-1] if "." in last else ""
      if "/" in token and token.split("/")[0] not in TOP_DIRS:
        continue  # another repository's path
      if ext and ext not in FILE_EXTENSIONS and ext != "py" and "::" not in token:
        why = dotted_problem(token.replace("/", "."), token)  # algorithms/asynchronous.Method
      elif PATH.match(token):
        why = path_problem(token)
    elif DOTTED.match(token):
      if token.rsplit(".", 1)[-1] not in FILE_EXTENSIONS:
        why = dotted_problem(token)
    if why:
      problems.append(f"{doc}:{n}: {why}")
  return problems


# --- flags --------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def known_flags() -> frozenset:
  from fedjax_bench import settings
  from fedjax_bench.config import flags
  names = set(settings.all_names()) | set(flags.RUN_ONLY) | set(flags.ALIASES) | ALWAYS_FLAGS
  for base, _, files in os.walk(os.path.join(ROOT, "benchmarks")):
    for f in files:
      if f.endswith(".py"):
        with open(os.path.join(base, f), encoding="utf-8") as fh:
          names |= set(re.findall(r"flags\.DEFINE_\w+\(\s*[\"'](\w+)[\"']", fh.read()))
  return frozenset(names)


COMMAND = re.compile(r"^(\w+=\S+\s+)*(python3?\s+(benchmarks/|-m\s+(fedjax_bench|benchmarks\b))|"
                     r"fedjax-bench\b)")


def flag_problem(flag: str):
  name = flag.split("=")[0]
  if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or name.startswith("xla_"):
    return None  # a placeholder (--FLAG) or an XLA flag
  known = known_flags()
  if name in known or (name.startswith("no") and name[2:] in known):
    return None
  return f"`--{flag}`: no such setting or script flag"


def flag_problems(doc: str, text: str) -> list[str]:
  problems = []
  for n, span in code_spans(text):
    if span.startswith("--"):
      cited = [span[2:].split()[0]]
    elif COMMAND.match(span):
      cited = re.findall(r"(?<!\S)--([\w=.,:|/-]+)", span)
    else:
      continue
    for flag in cited:
      why = flag_problem(flag)
      if why:
        problems.append(f"{doc}:{n}: {why}")
  return problems


# --- the tests ----------------------------------------------------------------------------

def _read(doc: str) -> str:
  with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
    return f.read()


@pytest.mark.parametrize("doc", doc_files())
def test_relative_links_resolve(doc):
  assert not link_problems(doc, _read(doc)), "\n".join(link_problems(doc, _read(doc)))


@pytest.mark.parametrize("doc", doc_files())
def test_cited_code_names_exist(doc):
  problems = name_problems(doc, _read(doc))
  assert not problems, "\n".join(problems)


@pytest.mark.parametrize("doc", doc_files())
def test_cited_flags_are_declared(doc):
  problems = flag_problems(doc, _read(doc))
  assert not problems, "\n".join(problems)


def test_the_checks_catch_names_that_do_not_exist():
  gone = ["rounds.static_int", "experiment.check_sweepable", "cli.parse_sweep",
          "experiment.HETERO_AGG_DEFAULTS", "experiment.ASYNC_LR", "core/rounds.static_int",
          "fedjax_bench/core/nothing.py", "core/nothing.py", "claims.store.no_such_key",
          "Task.no_such_method", "test_no_such_test_here", "tests/core/test_keys.py::test_nothing"]
  text = "\n".join(f"See `{name}` and `{name}(x, y)`." for name in gone)
  problems = name_problems("x.md", text)
  for name in gone:
    found = sum(f"`{name}" in p for p in problems)
    assert found == (1 if "::" in name else 2), (name, problems)  # a test id is not called
  assert flag_problems("x.md", "Give `--no_such_flag=3` or `python benchmarks/run.py "
                       "--algo=fedavg --no_such_flag_either`.") == [
      "x.md:1: `--no_such_flag=3`: no such setting or script flag",
      "x.md:1: `--no_such_flag_either`: no such setting or script flag"]
  assert link_problems("docs/x.md", "[a](nothing.md) [b](design.md#no-such-heading)") == [
      "docs/x.md:1: link to nothing.md: no such file",
      "docs/x.md:1: link to design.md#no-such-heading: no heading #no-such-heading"]


def test_the_checks_pass_names_that_exist_and_prose():
  text = """
Names: `rounds.static`, `claims.store.config_key`, `store.config_key`, `core/local.py`,
`fedjax_bench/core/local.py`, `local.train_cohort(task, world)`, `compile_cache.py`,
`algorithms/asynchronous.Method(init, ingest, aggregate)`, `Task.for_run`, `ServerState.aux`,
`presets.HETERO_AGG_MNIST`, `fedjax_bench.run(algo=...)`, `results/speed/`,
`tests/core/test_keys.py`, `algorithms/NAME.py`, `results/PAPER/REPORT.md`, `config.json`,
`jax.random`, `np.savez`, `tf.keras.optimizers.Adam`, `--client_lr`, `--noerror_feedback`,
`--FLAG=VALUE`, `--xla_cpu_use_thunk_runtime=false`, `python benchmarks/claims.py --verify`,
a sum of `x_i - x_t`, `e.g.`, `sgd` with lr 1.

```
`rounds.static_int` inside a code block is not a citation: [x](nowhere.md)
```
"""
  assert name_problems("x.md", text) == []
  assert flag_problems("x.md", text) == []
  assert link_problems("docs/x.md", text + "[a](design.md#cohorts) [b](https://x.org/y)") == []


def test_slugs_follow_github():
  assert slug("Devices and reproducibility") == "devices-and-reproducibility"
  assert slug("The synchronous round (`core/rounds.py`)") == "the-synchronous-round-coreroundspy"
  assert slug("Fed-EF: compression, error feedback") == "fed-ef-compression-error-feedback"


# --- self-contained: no citation of what a clone lacks --------------------------------------

OUTSIDE_CITATION = re.compile(
    r"\.\./shared/(?!tfds\b)"                 # the shared folder, but for the data directory
    r"|\bDESIGN\.md\b"                        # its design notes (docs/design.md is ours)
    r"|\b[Ss]pecs?[ _/]?00\d"                 # "spec 000", "Spec 002_area", "specs/001"
    r"|\b[Ss]pec\s*§|\b00\d\s*§"              # "spec §2.3", "(001 §6.1)"
    r"|\b[Tt]he (?:[\w-]+ )?spec(?:'s)?\b")   # "the spec's pseudocode", "the FedAWE spec"


def outside_citations(name: str, text: str) -> list[str]:
  return [f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
          for m in OUTSIDE_CITATION.finditer(text)]


def repository_files() -> list[str]:
  """Tracked and untracked, not ignored, text files (paths relative to the root)."""
  try:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                             "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
  except (OSError, subprocess.CalledProcessError):
    pytest.skip("not a git checkout")
  me = os.path.relpath(os.path.abspath(__file__), ROOT)
  return [n for n in listed.split("\0") if n and n != me and os.path.isfile(os.path.join(ROOT, n))
          and not re.match(r"results/[^/]+/runs/", n)]


def test_no_file_cites_the_notes_a_clone_lacks():
  problems = []
  for name in repository_files():
    with open(os.path.join(ROOT, name), "rb") as f:
      data = f.read()
    if b"\0" in data:
      continue  # binary (figures)
    try:
      problems += outside_citations(name, data.decode("utf-8"))
    except UnicodeDecodeError:
      continue
  assert not problems, ("cite the paper or docs/papers/ instead of notes outside the "
                        "repository:\n" + "\n".join(problems))


def test_the_citation_check_catches_the_forms_used_before():
  cited = ["(spec 000 §2.10)", "Spec 002_area §5.1", "the spec's pseudocode", "spec §9 Q1",
           "The Fed-EF spec's CPU-scale claims", "(001 §6.1-§6.2)", "see ../shared/specs/x.md",
           "../shared/DESIGN.md", "(§8.5, DESIGN.md)", "The spec's CPU-scale experiment"]
  for text in cited:
    assert outside_citations("x", text), text
  fine = ["TFDS_DATA_DIR=../shared/tfds", "docs/design.md", "PartitionSpec('runs')",
          "settings.Spec.convert", "the paper's §7, Appendix J", "`spec.image_shape`",
          "in_specs=spec", "claim spec-C", "docs/papers/fedawe.md"]
  for text in fine:
    assert not outside_citations("x", text), text


def test_the_readme_is_a_front_door():
  """At most 10 KiB, read in two minutes, with the sections a researcher looks for."""
  with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
    text = f.read()
  assert len(text.encode()) <= 10 * 1024, len(text.encode())
  headings = re.findall(r"^## (.+)$", text, re.M)
  for needed in ("Install", "First run", "Algorithms", "Performance", "Development",
                 "Citing", "Licence"):
    assert needed in headings, (needed, headings)
