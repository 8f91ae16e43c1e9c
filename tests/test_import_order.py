"""The package's imports run one way: a module imports only from its own layer or the
layers below it (docs/design.md). Parsed from the sources, no import is executed."""

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "fedjax_bench"
# Lowest first. A top-level unit of the package (a subpackage or a module) by its name.
LAYERS = [
    ("errors", "settings"),                              # the declaration mechanism
    ("core",),                                           # what a round is made of
    ("sim",),                                            # the simulated world
    ("data",),
    ("models",),
    ("task",),                                           # data + model + evaluation
    ("algorithms",),
    ("config",),                                         # settings, flags, presets
    ("output",),                                         # files, plots, terminal lines
    ("engine", "experiment"),                           # execution
    ("api",),
    ("cli", "__main__", "claims", "__init__"),
]
RANK = {unit: i for i, units in enumerate(LAYERS) for unit in units}
# Upward imports that are known and allowed (none: add none).
KNOWN = set()


def _unit(path: Path) -> str:
  rel = path.relative_to(PACKAGE)
  return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imported_units(tree) -> set:
  out = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      names = [node.module] if node.module != "fedjax_bench" else [
          f"fedjax_bench.{a.name}" for a in node.names]
    elif isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    else:
      continue
    out |= {n.split(".")[1] for n in names if n.startswith("fedjax_bench.")}
  return out


def upward_imports() -> set:
  found = set()
  for path in sorted(PACKAGE.rglob("*.py")):
    unit = _unit(path)
    for target in _imported_units(ast.parse(path.read_text())):
      if RANK[target] > RANK[unit]:
        found.add((str(path.relative_to(PACKAGE)), target))
  return found


def test_every_unit_of_the_package_has_a_layer():
  units = {_unit(p) for p in PACKAGE.rglob("*.py")}
  assert units <= set(RANK), sorted(units - set(RANK))


def test_imports_run_down_the_layers():
  assert upward_imports() == KNOWN


def test_the_check_sees_an_upward_import(tmp_path):
  tree = ast.parse("from fedjax_bench import engine\nfrom fedjax_bench.core import keys\n")
  assert _imported_units(tree) == {"engine", "core"}


ALGORITHMS = PACKAGE / "algorithms"
# The one algorithm module others may import: FedAvg, whose Hparams (--weighting) and
# client_weights FedProx, SCAFFOLD, FedDyn, Ditto and FedALIGN extend.
BASE_ALGORITHMS = {"fedavg"}


def registered_modules() -> set:
  """The modules of algorithms/ that algorithms/__init__.py registers an algorithm of
  (`register("fedsgd", fedef.fedsgd)` names fedef). The others (asynchronous.py, the
  mechanisms of one paper kept beside its algorithms) register none."""
  out = set()
  for node in ast.walk(ast.parse((ALGORITHMS / "__init__.py").read_text())):
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "register":
      target = node.args[1]
      while isinstance(target, ast.Attribute):
        target = target.value
      out.add(target.id)
  return out


def _algorithm_modules_imported(tree) -> set:
  """The modules of algorithms/ a module imports (a name the package itself binds, such as
  `register`, is not a module and is left out)."""
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom):
      module = node.module or ""
      if node.level == 1:  # from . import x, from .x import y
        names |= {module.split(".")[0]} if module else {a.name for a in node.names}
      elif module == "fedjax_bench.algorithms":
        names |= {a.name for a in node.names}
      elif module.startswith("fedjax_bench.algorithms."):
        names.add(module.split(".")[2])
    elif isinstance(node, ast.Import):
      names |= {a.name.split(".")[2] for a in node.names
                if a.name.startswith("fedjax_bench.algorithms.")}
  return names & {p.stem for p in ALGORITHMS.glob("*.py")} - {"__init__"}


def algorithm_to_algorithm_imports() -> set:
  """(importer, imported) where a module of algorithms/ imports an algorithm module: what
  several algorithms share belongs in core/ or in a module that registers none."""
  algorithms = registered_modules() - BASE_ALGORITHMS
  found = set()
  for path in sorted(ALGORITHMS.glob("*.py")):
    if path.stem == "__init__":
      continue
    for target in _algorithm_modules_imported(ast.parse(path.read_text())):
      if target in algorithms and target != path.stem:
        found.add((path.stem, target))
  return found


def test_no_algorithm_imports_another():
  assert algorithm_to_algorithm_imports() == set()


def test_the_check_sees_an_algorithm_importing_another():
  assert {"fedavg", "fedef", "mifa", "area"} <= registered_modules()
  assert not {"asynchronous", "compression"} & registered_modules()
  tree = ast.parse("from fedjax_bench.algorithms.mifa import init_with_memory\n"
                   "from fedjax_bench.algorithms import asynchronous, fedprox, register\n"
                   "def f():\n  import fedjax_bench.algorithms.fedawe\n")
  assert _algorithm_modules_imported(tree) == {"mifa", "asynchronous", "fedprox", "fedawe"}
