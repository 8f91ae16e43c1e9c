"""Typed settings: every setting of a run is declared once, in the layer that reads it.

A *section* is a frozen dataclass whose fields are `setting(...)`s: default, one-line help,
allowed values, a check, whether a grid may sweep it (it shapes no array and no Python
control flow) and, for a setting that only matters in some configurations, `used_if`.
Algorithms declare their hyperparameters the same way (``Hparams`` in their module),
composing the shared sections they read by inheritance. The command line
(`fedjax_bench.config.flags`), the Python API (`fedjax_bench.api`) and the scripts all read
these declarations; nothing else holds a default.
"""

import dataclasses
import difflib
import math
from typing import Any, Callable, Mapping

from fedjax_bench.errors import UsageError


@dataclasses.dataclass(frozen=True)
class Check:
  test: Callable[[Any], bool]
  rule: str  # completes "--name=value ..."


POSITIVE = Check(lambda v: v > 0, "must be positive")
NON_NEGATIVE = Check(lambda v: v >= 0, "must be >= 0")
UNIT_INTERVAL = Check(lambda v: 0 < v <= 1, "must be in (0, 1]")
PROBABILITY = Check(lambda v: 0 <= v <= 1, "must be in [0, 1]")
DECAY = Check(lambda v: 0 <= v < 1, "must be in [0, 1)")  # a moving average's beta
# An integer setting's range unless it declares its own: JAX's default integer (round
# counters, sizes and indices are int32 arrays on the device).
INT32 = (-2**31, 2**31 - 1)


def can_be_directory(path) -> bool:
  """Whether ``path`` is, or can be made, a directory: no file is it or a folder above it."""
  import pathlib
  path = pathlib.Path(path)
  for p in (path, *path.parents):
    if p.exists():
      return p.is_dir()
  return True


DIRECTORY = Check(can_be_directory, "must name a directory, not a file")


def at_least(bound) -> Check:
  return Check(lambda v: v >= bound, f"must be >= {bound}")


def between(low, high) -> Check:
  return Check(lambda v: low <= v <= high, f"must be in [{low}, {high}]")


def setting(default, help: str, *, choices=None, sweep: bool = False, check: Check = None,
            used_if: Callable[[Any], bool] = None, kind: type = None,
            allow_inf: bool = False, limits: tuple = None, aliases: dict = None):
  """One setting. ``kind`` is needed only when the default is None (then str).
  ``aliases``: {other name: the name it stands for}, taken as the value it names (so that a
  configuration records one name per value).
  ``used_if(section) -> bool``: whether the value takes effect, given the other values of
  the object it sits in (a value given while it does not is refused as having no effect).
  A float is refused when NaN, and when infinite unless ``allow_inf``; an integer outside
  ``limits`` (inclusive; default `INT32`)."""
  kind = kind or (str if default is None else type(default))
  return dataclasses.field(default=default, metadata={
      "help": help, "choices": tuple(choices) if choices is not None else None,
      "sweep": sweep, "check": check, "used_if": used_if, "kind": kind,
      "allow_inf": allow_inf, "limits": limits, "aliases": aliases})


def section(title: str):
  """Class decorator: a frozen dataclass of settings, shown under ``title`` in --helpfull."""
  def wrap(cls):
    cls = dataclasses.dataclass(frozen=True)(cls)
    cls.TITLE = title
    _SECTIONS.append(cls)
    return cls
  return wrap


@dataclasses.dataclass(frozen=True)
class Spec:
  name: str
  kind: type
  default: Any
  help: str
  choices: tuple | None
  sweep: bool
  check: Check | None
  used_if: Callable | None
  title: str  # the section that declares it
  allow_inf: bool = False
  limits: tuple | None = None
  aliases: dict | None = None

  def convert(self, value):
    """``value`` as this setting's type, checked; UsageError naming the problem. A NumPy
    or concrete JAX scalar is converted to its Python value first; a tracer or an array
    of one or more dimensions (a grid's values in the engine) passes unchanged."""
    if hasattr(value, "shape") and hasattr(value, "dtype") and self.kind is not tuple:
      if getattr(value, "ndim", None) != 0 or _is_tracer(value):
        return value
      # str: the shortest text of a float32 (np.float32(0.1) is 0.1, not 0.100000001...)
      value = float(str(value)) if value.dtype.kind == "f" else value.item()
    name = f"--{self.name}={value!r}"
    if self.kind is bool:
      if not isinstance(value, (bool, int)) or value not in (0, 1):
        raise UsageError(f"{name} must be true or false")
      value = bool(value)
    elif self.kind is int:
      if (isinstance(value, bool) or not isinstance(value, (int, float))
          or (isinstance(value, float) and not math.isfinite(value)) or value != int(value)):
        raise UsageError(f"{name} must be an integer")
      value = int(value)
      low, high = self.limits or INT32
      if not low <= value <= high:
        bound = f"at most {high}" if value > high else f"at least {low}"
        raise UsageError(f"{name} is out of range; must be {bound}")
    elif self.kind is float:
      if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{name} must be a number")
      try:
        value = float(value)
      except OverflowError:  # an int beyond float's range
        raise UsageError(f"{name} is out of range of a float") from None
      if math.isnan(value) or (math.isinf(value) and not self.allow_inf):
        raise UsageError(f"{name} must be a finite number")
    elif self.kind is tuple:
      if isinstance(value, str):
        value = [v for v in value.split(",") if v.strip()]
      try:
        value = tuple(int(v) for v in value)
      except (TypeError, ValueError):
        raise UsageError(f"{name} must be a list of integers") from None
    elif value is not None and not isinstance(value, str):
      raise UsageError(f"{name} must be a string")
    elif self.aliases and value in self.aliases:
      value = self.aliases[value]
    if self.choices is not None and value not in self.choices:
      raise UsageError(f"{name} is not valid; valid: {', '.join(map(str, self.choices))}")
    if self.check is not None and value is not None and not self.check.test(value):
      raise UsageError(f"--{self.name} {self.check.rule} (got {value!r})")
    return value


def specs(cls) -> dict[str, Spec]:
  """Every setting of a section or Hparams class, by name, in declaration order."""
  out = {}
  for f in dataclasses.fields(cls):
    m = f.metadata
    if "help" not in m:
      continue
    owner = next(c for c in reversed(cls.__mro__) if f.name in getattr(c, "__annotations__", {})
                 and dataclasses.is_dataclass(c))
    out[f.name] = Spec(f.name, m["kind"], f.default, m["help"], m["choices"], m["sweep"],
                       m["check"], m["used_if"], getattr(owner, "TITLE", owner.__name__),
                       m.get("allow_inf", False), m.get("limits"), m.get("aliases"))
  return out


def _is_tracer(value) -> bool:
  import sys
  jax = sys.modules.get("jax")  # nothing is traced before jax is imported
  return jax is not None and isinstance(value, jax.core.Tracer)


def closest(name: str, valid) -> str:
  """'closest: ...' for a misspelled name, or 'valid: ...' when no name is close."""
  near = difflib.get_close_matches(name, list(valid), n=3, cutoff=0.6)
  if near:
    return f"closest: {', '.join(near)}"
  return f"valid: {', '.join(sorted(valid))}"


def make(cls, values: Mapping[str, Any] | None = None, *, known=(), **kwargs):
  """An instance of ``cls`` from settings by name (the defaults for the rest), each value
  converted and checked. A name that is no setting of ``cls`` is an error naming the
  closest valid ones, unless it is in ``known`` (the names of other sections: ignored)."""
  values = {**(values or {}), **kwargs}
  own = specs(cls)
  for name in values:
    if name not in own and name not in known:
      raise UsageError(f"unknown setting {name!r}; {closest(name, set(own) | set(known))}")
  return cls(**{k: own[k].convert(v) for k, v in values.items() if k in own})


def coerce(cls, hp):
  """``hp`` as a ``cls`` (an algorithm's Hparams): an instance passes; a mapping of settings
  by name is filled with the declared defaults, its values converted and checked. Names
  of other sections are ignored; a name no section declares is an error."""
  if isinstance(hp, cls):
    return hp
  if is_settings(hp):
    return make(cls, {k: v for k, v in as_dict(hp).items() if k in specs(cls)})
  return make(cls, hp, known=all_names())


def all_names() -> set:
  """Every declared setting's name (imports every declaring module first)."""
  import importlib
  importlib.import_module("fedjax_bench.config")
  return {name for cls in _SECTIONS for name in specs(cls)}


_SECTIONS = []


def replace(obj, values: Mapping[str, Any]):
  """``obj`` with some settings replaced by (possibly traced) values, unconverted: a grid
  point's values in the engine."""
  return dataclasses.replace(obj, **values) if values else obj


def as_dict(obj) -> dict:
  """{name: value} of a settings object (tuples stay tuples)."""
  return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def is_settings(obj) -> bool:
  return dataclasses.is_dataclass(obj) and not isinstance(obj, type) and hasattr(obj, "TITLE")


def unused(obj, names) -> list[str]:
  """The names among ``names`` whose `used_if` says they take no effect in ``obj``."""
  own = specs(type(obj))
  return [n for n in names if n in own and own[n].used_if is not None
          and not own[n].used_if(obj)]
