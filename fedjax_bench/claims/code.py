"""Which library code a run executed, and whether it has changed since.

A run's record holds the hash of every library function that ran while the run was set
up and traced (`Trace`, a profile hook on the run's thread: jitted code is Python only
while it is traced, so this is the Python that shaped the compiled programs and the
data), and, for every loaded module, the hashes of its top level's bindings: each
imported name, constant, class body (without its methods and its `setting(...)`
declarations, whose values are in the configuration key) and top-level call such as
`register("fedavg", fedavg)`, one hash per name bound (a name bound twice is one hash of
both statements) and one per element of a literal tuple, list, set or dict; a module's
hash of its C++ kernels (`SOURCE_SHA256`) only where one of its functions ran, since the
C++ runs only through them. Hashes are of the syntax tree without docstrings, so
comments, docstrings and layout do not count.
A run is stale when a function it called changed, or one of its modules' bindings
changed or is gone; a new function, setting, import, constant, registration or element
leaves it fresh (so a new algorithm or dataset does not stale every paper's runs). Both
are looked up by content, not by module path: code moved to another module unchanged,
and an import from the library that now names the module it moved to, leave it fresh. Not
seen: a function that ran only at import (its effect on a setting's default reaches the
configuration key instead) and Python that XLA calls back into while running.
"""

import ast
import copy
import functools
import hashlib
import os
import sys
import threading

import fedjax_bench

PACKAGE_DIR = os.path.dirname(os.path.abspath(fedjax_bench.__file__))
_PACKAGE = "fedjax_bench"
# Modules that shape no number of a run: how results are presented and checked.
NOT_CODE = ("claims/", "cli.py", "output/tensorboard.py", "output/console.py",
            "engine/compile_cache.py", "__main__.py")
KIND = "bindings"  # a record's "code_kind"; a record of another kind is stale
# A module's hash of its C++ kernels (core/kernels): the C++ shapes a run only through a call
# of that module's functions, so this binding counts only for the runs that called one.
KERNEL_SOURCE = "SOURCE_SHA256"


def _rel(path: str):
  """The path relative to the package of a library file that counts, else None."""
  if not path.startswith(PACKAGE_DIR + os.sep) or not path.endswith(".py"):
    return None
  rel = os.path.relpath(path, PACKAGE_DIR).replace(os.sep, "/")
  return None if rel.startswith(NOT_CODE) else rel


class Trace:
  """Records (file, first line) of every library code object called in the block."""

  def __init__(self):
    self.called = set()

  def _hook(self, frame, event, arg):
    if event == "call":
      code = frame.f_code
      self.called.add((code.co_filename, code.co_firstlineno))

  def __enter__(self):
    sys.setprofile(self._hook)
    threading.setprofile(self._hook)
    return self

  def __exit__(self, *exc):
    sys.setprofile(None)
    threading.setprofile(None)


def _strip_docstring(body):
  if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
      and isinstance(body[0].value.value, str):
    return body[1:] or [ast.Pass()]
  return body


def _hash(node) -> str:
  return hashlib.sha256(ast.unparse(node).encode()).hexdigest()[:16]


def _is_setting(node) -> bool:
  """``name: type = setting(...)``, a settings field (its value is in the configuration)."""
  call = getattr(node, "value", None) if isinstance(node, ast.AnnAssign) else None
  if not isinstance(call, ast.Call):
    return False
  f = call.func
  return (f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)) == "setting"


def _top_level(body):
  """Statements of a class body that count."""
  return [n for n in _strip_docstring(body)
          if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _is_setting(n)]


def _names(target) -> list[str]:
  if isinstance(target, (ast.Tuple, ast.List)):
    return [n for t in target.elts for n in _names(t)]
  return [ast.unparse(target)]


def _in_package(stmt) -> bool:
  """Whether an import statement imports from the library itself."""
  if isinstance(stmt, ast.ImportFrom):
    return stmt.level > 0 or (stmt.module or "").split(".")[0] == _PACKAGE
  return all(alias.name.split(".")[0] == _PACKAGE for alias in stmt.names)


def _bindings(stmt, by_path: bool = False) -> list[tuple[str, ast.AST]]:
  """(name, node) pairs of one top-level statement: what it binds or registers. An import
  from the library itself counts by the name it imports, not the module it comes from,
  so moving code between modules stales no run (what the imported code does is in the
  hashes of what ran); ``by_path``: by its module too (the rule records were made under
  before, still accepted)."""
  if isinstance(stmt, (ast.Import, ast.ImportFrom)):
    out = []
    for alias in stmt.names:
      bound = alias.asname or alias.name.split(".")[0]
      if _in_package(stmt) and not by_path:
        imported = alias.name.split(".")[-1]
        out.append((bound, ast.Import(names=[ast.alias(name=imported, asname=bound)])))
        continue
      one = copy.copy(stmt)
      one.names = [alias]
      out.append((bound, one))
    return out
  if isinstance(stmt, ast.ClassDef):
    return [(stmt.name, _Normalized(bodies=False).visit(copy.deepcopy(stmt)))]
  if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    value = stmt.value
    if len(targets) == 1 and isinstance(targets[0], ast.Name):
      name = targets[0].id
      kind = ast.unparse(stmt.annotation) if isinstance(stmt, ast.AnnAssign) else ""
      if isinstance(value, (ast.Tuple, ast.List, ast.Set)):
        return [(f"{name}[]", ast.Constant(f"{type(value).__name__} {kind}"))] + [
            (f"{name}[{i}]", e) for i, e in enumerate(value.elts)]
      if isinstance(value, ast.Dict):
        return [(f"{name}[]", ast.Constant(f"Dict {kind}"))] + [
            (f"{name}[{ast.unparse(k) if k is not None else f'**{i}'}]", v)
            for i, (k, v) in enumerate(zip(value.keys, value.values))]
    return [(n, stmt) for t in targets for n in _names(t)]
  if isinstance(stmt, ast.AugAssign):
    return [(n, stmt) for n in _names(stmt.target)]
  if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
    call = stmt.value
    first = ast.unparse(call.args[0]) if call.args else ""
    return [(f"{ast.unparse(call.func)}({first})", stmt)]
  return [(type(stmt).__name__, stmt)]  # if, try, for, ...: all of a kind are one


def _binding_hashes(tree, by_path: bool = False) -> dict[str, str]:
  """{name: hash (8 hex digits)} of the module's top-level bindings."""
  merged = {}
  for stmt in _strip_docstring(tree.body):
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) or _is_setting(stmt):
      continue
    for name, node in _bindings(stmt, by_path):
      merged.setdefault(name, []).append(ast.unparse(_Normalized(bodies=True).visit(
          copy.deepcopy(node))))
  return {name: hashlib.sha256("\n".join([name, *src]).encode()).hexdigest()[:8]
          for name, src in merged.items()}


def _joined(hashes: dict[str, str]) -> str:
  """Binding hashes, sorted, space-separated: a module's entry in a record."""
  return " ".join(sorted(set(hashes.values())))


class _Normalized(ast.NodeTransformer):
  """Docstrings dropped; with ``bodies=False`` a class keeps only what counts."""

  def __init__(self, bodies: bool):
    self.bodies = bodies

  def _function(self, node):
    node.body = _strip_docstring(node.body)
    return self.generic_visit(node)

  visit_FunctionDef = visit_AsyncFunctionDef = _function

  def _block(self, node):
    node.body = (_strip_docstring(node.body) if self.bodies
                 else _top_level(node.body) or [ast.Pass()])
    return self.generic_visit(node)

  visit_ClassDef = _block


@functools.lru_cache(maxsize=None)
def _parsed(path: str, mtime: float):
  """(top-level binding hashes, [(first line, last line, qualname, hash)] of the outermost
  defs and of the methods of top-level classes, the binding hashes under the rule that
  counted library imports by their module path, the hash of its KERNEL_SOURCE binding or
  None) of a source file."""
  del mtime  # part of the cache key only
  with open(path, encoding="utf-8") as f:
    source = f.read()
  tree = ast.parse(source)
  defs = []

  def add(node, prefix=""):
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    body = _Normalized(bodies=True).visit(copy.deepcopy(node))
    defs.append((first, node.end_lineno, prefix + node.name, _hash(body)))

  for node in tree.body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      add(node)
    elif isinstance(node, ast.ClassDef):
      for sub in node.body:
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
          add(sub, node.name + ".")
  hashes = _binding_hashes(tree)
  return (_joined(hashes), defs, _joined(_binding_hashes(tree, by_path=True)),
          hashes.get(KERNEL_SOURCE))


def _source(path: str):
  return _parsed(path, os.path.getmtime(path))


def digest(trace: Trace) -> dict:
  """{module: its top-level binding hashes} of every loaded library module and
  {module:qualname: hash} of every library function ``trace`` saw called (the outermost
  def holding the call). A module's KERNEL_SOURCE binding is left out where none of its
  functions was called."""
  out, ran = {}, set()
  for path, line in trace.called:
    rel = _rel(path)
    if rel is None:
      continue
    for first, last, name, h in _source(path)[1]:
      if first <= line <= last:
        out[f"{rel}:{name}"] = h
        ran.add(rel)
        break
  for module in list(sys.modules.values()):
    path = getattr(module, "__file__", None) or ""
    rel = _rel(path)
    if rel is not None:
      bindings, _, _, kernel = _source(path)
      if kernel is not None and rel not in ran:
        bindings = " ".join(h for h in bindings.split() if h != kernel)
      out[rel] = bindings
  return dict(sorted(out.items()))


def _library_files() -> list[str]:
  out = []
  for directory, _, files in os.walk(PACKAGE_DIR):
    out += [os.path.join(directory, f) for f in sorted(files)
            if _rel(os.path.join(directory, f)) is not None]
  return out


@functools.lru_cache(maxsize=2)
def _library_index(files: tuple) -> tuple[frozenset, frozenset]:
  """(every def's hash, every top-level binding's hash) of the library files ((path,
  mtime) pairs: an edited file is another key)."""
  sources = [_parsed(path, mtime) for path, mtime in files]
  defs = frozenset(d[3] for source in sources for d in source[1])
  bindings = frozenset(h for source in sources for h in (source[0] + " " + source[2]).split())
  return defs, bindings


def changed(code: dict) -> list[str]:
  """The entries of ``code`` (a `digest`) whose source is nowhere in the library now. The
  lookup is by content: a function or a top-level binding that moved to another module,
  unchanged, is still there (a function by its hash; a module's bindings each in some
  module's top level), so moving code stales no run."""
  defs, bindings = _library_index(tuple((p, os.path.getmtime(p)) for p in _library_files()))
  out = []
  for key, h in code.items():
    rel, _, name = key.partition(":")
    path = os.path.join(PACKAGE_DIR, rel)
    if name:
      here = _source(path)[1] if os.path.exists(path) else []
      if next((d[3] for d in here if d[2] == name), None) != h and h not in defs:
        out.append(key)
    elif not set(h.split()) <= bindings:  # a binding changed or is gone
      out.append(key)
  return out
