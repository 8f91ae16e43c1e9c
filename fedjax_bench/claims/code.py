"""Which library code a run executed, and whether it has changed since.

A run's record holds the hash of every library function that ran while the run was set
up and traced (`Trace`, a profile hook on the run's thread: jitted code is Python only
while it is traced, so this is the Python that shaped the compiled programs and the
data), and the hash of every loaded module's top level: its imports, constants and class
bodies, without the functions and methods (a function counts when a run calls it) and
without the `setting(...)` declarations of settings classes (every setting a run reads is
in its configuration key). Hashes are of the syntax tree without docstrings, so comments,
docstrings and layout do not count. A change to a function the run never called, a new
function or a new setting leaves the run fresh; a change to one it called, or to any
module's imports, constants or class attributes, makes it stale. Not seen: a function that
ran only at import (its effect on a setting's default reaches the configuration key
instead) and Python that XLA calls back into while running.
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
# Modules that shape no number of a run: how results are presented and checked.
NOT_CODE = ("claims/", "cli.py", "tensorboard.py", "compile_cache.py", "__main__.py")
KIND = "functions"  # a record's "code_kind"; a record without it is stale


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
  """Statements of a module or class body that count at top level."""
  return [n for n in _strip_docstring(body)
          if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _is_setting(n)]


class _Normalized(ast.NodeTransformer):
  """Docstrings dropped; with ``bodies=False`` only what counts at top level is kept."""

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

  visit_ClassDef = visit_Module = _block


@functools.lru_cache(maxsize=None)
def _parsed(path: str, mtime: float):
  """(top-level hash, [(first line, last line, qualname, hash)] of the outermost defs and
  of the methods of top-level classes) of a source file."""
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
  top = _hash(_Normalized(bodies=False).visit(tree))
  return top, defs


def _source(path: str):
  return _parsed(path, os.path.getmtime(path))


def digest(trace: Trace) -> dict:
  """{module: top-level hash} of every loaded library module and {module:qualname: hash}
  of every library function ``trace`` saw called (the outermost def holding the call)."""
  out = {}
  for module in list(sys.modules.values()):
    path = getattr(module, "__file__", None) or ""
    rel = _rel(path)
    if rel is not None:
      out[rel] = _source(path)[0]
  for path, line in trace.called:
    rel = _rel(path)
    if rel is None:
      continue
    for first, last, name, h in _source(path)[1]:
      if first <= line <= last:
        out[f"{rel}:{name}"] = h
        break
  return dict(sorted(out.items()))


def changed(code: dict) -> list[str]:
  """The entries of ``code`` (a `digest`) whose source differs now, or is gone."""
  out = []
  for key, h in code.items():
    rel, _, name = key.partition(":")
    path = os.path.join(PACKAGE_DIR, rel)
    if not os.path.exists(path):
      out.append(key)
      continue
    top, defs = _source(path)
    now = top if not name else next((d[3] for d in defs if d[2] == name), None)
    if now != h:
      out.append(key)
  return out
