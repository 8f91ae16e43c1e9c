"""The package's imports run one way: a module imports only from its own layer or the
layers below it (docs/design.md). Parsed from the sources, no import is executed."""

import ast
from pathlib import Path

from conftest import REPO

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
