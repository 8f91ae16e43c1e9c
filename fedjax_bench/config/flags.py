"""The command line's flags, generated from the settings declarations.

Every setting of the shared sections and of every registered algorithm's ``Hparams`` is
one absl flag of the same name, grouped in --helpfull by the section that declares it;
an algorithm setting's help says which algorithms read it. A flag's value reaches a run
only if the user gave it (`given_values`); everything else comes from the declarations,
through `config.resolve`, exactly as in the Python API.
"""

import sys
from typing import Sequence

import numpy as np
from absl import app as absl_app
from absl import flags

from fedjax_bench import algorithms, config, settings
from fedjax_bench.config import presets
from fedjax_bench.errors import UsageError

FLAGS = flags.FLAGS
_PREFIX = "fedjax_bench"
# Flags that are not settings of a run: what to run, not how.
RUN_ONLY = ("algo", "seeds", "sweep", "import")
ALIASES = {"toyfl_phi": "availability_phi"}
# `keys.root` keys a seed as 32 bits: seed 2**32 would be seed 0 again.
MAX_SEED = 2**32 - 1
MAX_SEED_COUNT = 10**6  # --seeds=N: the runs of one program


def add_algorithm(name: str) -> None:
  """Flags for an algorithm registered after this module was imported (a notebook's, a
  test's or an `--import`ed module's): --algo accepts it, and its settings get flags of
  their own (`algorithms.ON_REGISTER`)."""
  if name not in FLAGS["algo"].parser.enum_values:
    FLAGS["algo"].parser.enum_values.append(name)
  for setting, (spec, readers) in declarations().items():
    if setting not in FLAGS:
      _define(spec, readers)


def declarations() -> dict[str, tuple[settings.Spec, list[str]]]:
  """{name: (its declaration, the algorithms that read it, [] for the shared sections)}.
  An algorithm may give an inherited setting a default of its own; a setting declared
  twice must otherwise be declared alike, and never both shared and an algorithm's. A
  setting several algorithms declare is filed under (with the default of) the one named
  like the section that declares it (fedprox's prox_mu, not FedALIGN's), else the first."""
  shared = {}
  for cls in config.SECTIONS.values():
    shared.update(settings.specs(cls))
  out = {name: (spec, []) for name, spec in shared.items()}
  for algo, alg in algorithms.ALGORITHMS.items():
    for name, spec in settings.specs(alg.Hparams).items():
      if name in shared:
        raise ValueError(f"setting {name!r} is both a shared setting and {algo}'s")
      if name not in out:
        out[name] = (spec, [])
      elif not _alike(out[name][0], spec):
        raise ValueError(f"setting {name!r} is declared differently by {algo}")
      out[name][1].append(algo)
      if spec.title == algo:
        out[name] = (spec, out[name][1])
  return out


def _alike(a: settings.Spec, b: settings.Spec) -> bool:
  return ((a.kind, a.choices and set(a.choices), a.check, a.allow_inf, a.limits)
          == (b.kind, b.choices and set(b.choices), b.check, b.allow_inf, b.limits))


def _help(spec: settings.Spec, readers: list[str]) -> str:
  text = spec.help
  if readers and len(readers) < len(algorithms.ALGORITHMS):
    text += f" [read by: {', '.join(readers)}]"
  return (text + _other_defaults(spec, readers)).replace("%", "%%")


def _other_defaults(spec: settings.Spec, readers: list[str]) -> str:
  """' [default X for A, B; Y for C]' where algorithms declare defaults of their own or
  take their paper's (`presets.fixed`)."""
  others = {}
  for a in readers or algorithms.ALGORITHMS:
    own = settings.specs(algorithms.get(a).Hparams).get(spec.name, spec)
    default = presets.fixed(a).get(spec.name, own.default)
    if default != spec.default:
      others.setdefault(str(default), []).append(a)
  if not others:
    return ""
  return " [default " + "; ".join(f"{d} for {', '.join(sorted(a))}"
                                  for d, a in sorted(others.items())) + "]"


def _define(spec: settings.Spec, readers: list[str]) -> None:
  module = f"{_PREFIX} ({spec.title})"
  text = _help(spec, readers)
  if spec.kind is bool:
    flags.DEFINE_bool(spec.name, spec.default, text, module_name=module)
  elif spec.kind is int:
    flags.DEFINE_integer(spec.name, spec.default, text, module_name=module)
  elif spec.kind is float:
    flags.DEFINE_float(spec.name, spec.default, text, module_name=module)
  elif spec.kind is tuple:
    flags.DEFINE_list(spec.name, [str(v) for v in spec.default], text, module_name=module)
  elif spec.choices is not None:
    flags.DEFINE_enum(spec.name, spec.default, [c for c in spec.choices if c is not None],
                      text, module_name=module)
  else:
    flags.DEFINE_string(spec.name, spec.default, text, module_name=module)
  flags.register_validator(spec.name, lambda v: _valid(spec, v))


def _valid(spec: settings.Spec, value) -> bool:
  """A flag's value passes the check a Python or a grid value passes: `Spec.convert`."""
  if value is not None:
    try:
      spec.convert(value)
    except UsageError as e:
      raise flags.ValidationError(str(e)) from None
  return True


def _define_all() -> None:
  run = f"{_PREFIX} (what to run)"
  flags.DEFINE_enum("algo", config.DEFAULT_ALGO, sorted(algorithms.ALGORITHMS), "Algorithm.",
                    module_name=run)
  flags.DEFINE_string("seeds", str(config.DEFAULT_SEEDS), "N runs seeds 0..N-1 together; a "
                      "comma list (5,7) names them.", module_name=run)
  flags.DEFINE_multi_string("sweep", [], "A hyperparameter grid run in one program, like "
                            "seeds: NAME:V1,V2,... (repeat the flag for a product grid), e.g. "
                            "--sweep=client_lr:0.01,0.03,0.1. Scalars that do not shape arrays "
                            "(learning rates, epsilon, mu, beta, ...).", module_name=run)
  flags.DEFINE_multi_string("import", [], "A module of your own to import before the flags "
                            "are read (a dotted name importable from the current directory, or "
                            "a .py file): the algorithms it registers "
                            "(fedjax_bench.algorithms.register) become --algo values with "
                            "flags of their own. Repeat for several.", module_name=run)
  for spec, readers in declarations().values():
    _define(spec, readers)
  for alias, name in ALIASES.items():
    flags.DEFINE_alias(alias, name, module_name=f"{_PREFIX} (aliases)")


class _HelpFlag(flags.BooleanFlag):
  """--help / --helpshort (this suite's flags) and --helpfull (then absl's own): the
  usage on stdout and exit status 0, the flags of what to run first."""

  def __init__(self, name: str, full: bool, short_name=None):
    super().__init__(name, False, "show full help (with absl's own flags)" if full else
                     "show this help (--helpfull: with absl's own flags)",
                     short_name=short_name, allow_override=True, allow_hide_cpp=True)
    self.full = full

  def parse(self, argument):
    if self._parse(argument):
      sys.stdout.write(usage(self.full))
      sys.exit(0)


def usage(full: bool = False) -> str:
  """The help text: the main module's docstring, then its flags, the flags of what to run
  and the settings by section (and, ``full``, every other module's flags)."""
  doc = getattr(sys.modules.get("__main__"), "__doc__", None) or f"{sys.argv[0]} [flags]"
  modules = sorted(FLAGS.flags_by_module_dict())
  first = [m for m in (sys.argv[0], f"{_PREFIX} (what to run)") if m in modules]
  ours = first + sorted((m for m in modules if m.startswith(_PREFIX) and m not in first),
                        key=lambda m: m.endswith("(aliases)"))
  if full:
    ours += [m for m in modules if m not in ours]
  text = "".join(FLAGS.module_help(m) + "\n" for m in ours)
  return (f"{doc.strip()}\n\nflags:\n{text}\n  --flagfile: a file of flags, one per line.\n"
          + ("" if full else "\nTry --helpfull for absl's own flags too.\n"))


if "algo" not in FLAGS:
  _define_all()
  algorithms.ON_REGISTER.append(add_algorithm)
  absl_app.define_help_flags()  # absl's help flags first: ours replace them
  for flag in (_HelpFlag("help", False, "?"), _HelpFlag("helpshort", False),
               _HelpFlag("helpfull", True)):
    flags.DEFINE_flag(flag, module_name="absl.app")


def names() -> list[str]:
  """Every flag of a run's settings (not algo/seeds/sweep)."""
  return list(declarations())


def given_values() -> dict:
  """{name: value} of the settings flags the user gave, and --algo (always)."""
  out = {"algo": FLAGS.algo}
  for name in names():
    if FLAGS[name].present:
      out[name] = FLAGS[name].value
  return out


def parse_seeds(text) -> list[int]:
  """--seeds: a count (3: seeds 0, 1, 2), a comma list ("5,7"), or (from Python) a list.
  A seed is an integer in [0, MAX_SEED]."""
  try:
    if isinstance(text, str) and "," not in text or not isinstance(text, str) and \
        np.ndim(text) == 0:
      count = _integer(text)
      seeds = list(range(count)) if count <= MAX_SEED_COUNT else None
    else:
      items = text.split(",") if isinstance(text, str) else list(np.asarray(text, object))
      seeds = [_integer(s) for s in items if not isinstance(s, str) or s.strip()]
  except (TypeError, ValueError, OverflowError):
    seeds = None
  if not seeds or len(set(seeds)) != len(seeds) or not all(0 <= s <= MAX_SEED for s in seeds):
    raise UsageError(f"--seeds={text!r} must be a count (3: seeds 0, 1, 2; at most "
                     f"{MAX_SEED_COUNT}) or a list (5,7) of distinct integers in [0, {MAX_SEED}]")
  return seeds


def _integer(value) -> int:
  """``value`` as an int; ValueError if it is no integer (0.5, "1.7", True, nan)."""
  if isinstance(value, str):
    return int(value.strip())
  value = value.item() if hasattr(value, "item") else value  # a NumPy scalar
  if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
    raise ValueError(value)
  return int(value)


def parse_sweep(specs: Sequence[str]) -> dict[str, list[float]]:
  """['client_lr:0.01,0.1', 'server_lr:1,0.5'] -> {name: values} (axes in order)."""
  axes = {}
  for spec in specs:
    name, sep, values = spec.partition(":")
    if not sep or not values:
      raise UsageError(f"--sweep={spec!r} must look like NAME:V1,V2,...")
    if name in axes:
      raise UsageError(f"--sweep names {name!r} twice")
    try:
      vals = [float(v) for v in values.split(",") if v.strip()]
    except ValueError:
      raise UsageError(f"--sweep={spec!r}: values must be numbers") from None
    axes[name] = vals
  return axes


def grid(axes: dict[str, Sequence[float]]) -> list[dict]:
  """The product grid of sweep axes, one {name: value} per point ([] without axes)."""
  points = [{}]
  for name, vals in axes.items():
    vals = [float(v) for v in vals]
    if not vals or len(set(vals)) != len(vals):
      raise UsageError(f"--sweep={name}:{','.join(map(str, vals))} needs distinct values")
    points = [{**point, name: v} for point in points for v in vals]
  return points if axes else []


def markdown() -> str:
  """docs/FLAGS.md: every flag by section, with its default, who reads it and its help (the
  committed file is checked against this by tests/config/test_settings.py)."""
  lines = ["# Flags", "",
           "Generated from the settings declarations by `python -m fedjax_bench.config.flags`; "
           "`--helpfull` prints the same. Every flag is also a keyword of "
           "`fedjax_bench.run(...)`.", "",
           "| flag | default | what to run |", "|---|---|---|",
           f"| `--algo` | `{config.DEFAULT_ALGO}` | {', '.join(sorted(algorithms.ALGORITHMS))} |",
           f"| `--seeds` | `{config.DEFAULT_SEEDS}` | N runs seeds 0..N-1 together; `5,7` names "
           "them |",
           "| `--sweep` | none | `NAME:V1,V2,...`, repeatable: a product grid in the same program "
           "as the seeds (settings declared sweepable) |"]
  by_title = {}
  for name, (spec, readers) in declarations().items():
    by_title.setdefault(spec.title, []).append((name, spec, readers))
  for title, rows in by_title.items():
    lines += ["", f"## {title}", "", "| flag | default | read by | meaning |", "|---|---|---|---|"]
    for name, spec, readers in rows:
      default = ",".join(map(str, spec.default)) if spec.kind is tuple else spec.default
      who = "all" if not readers or len(readers) == len(algorithms.ALGORITHMS) else \
          ", ".join(readers)
      text = (spec.help + _other_defaults(spec, readers)).replace("|", "\\|")
      choices = (f" Choices: {', '.join(str(c) for c in spec.choices if c is not None)}."
                 if spec.choices else "")
      fixed = [a for a in readers if not settings.specs(algorithms.get(a).Hparams)[name].sweep]
      sweep = ((" Sweepable" + (f" (not by {', '.join(fixed)})" if fixed else "") + ".")
               if spec.sweep else "")
      lines.append(f"| `--{name}` | `{default}` | {who} | {text}{choices}{sweep} |")
  return "\n".join(lines + _presets_markdown()) + "\n"


def _presets_markdown() -> list[str]:
  """The presets (`presets.PRESETS`): whom each applies to, what it sets and derives."""
  lines = ["", "## Paper presets", "",
           "A run whose algorithm and dataset match a preset takes its values for every flag "
           "not given, then its rules, preset after preset in this order "
           "([running.md](running.md#paper-settings-presets)). A preset from no paper is a rule "
           "of ours.", "",
           "| preset | what it is | applies to | sets | then |", "|---|---|---|---|---|"]
  for p in presets.PRESETS.values():
    who = [f"the {p.kind} algorithms"] if p.kind else []
    who += [f"`{a}`" for a in p.algos]
    where = (" on " + ", ".join(f"`{d}`" for d in p.datasets)) if p.datasets else \
        " on every dataset"
    sets = [f"`--{n}={v}`" for n, v in p.values.items()]
    for name in dict.fromkeys(n for values in p.per_algo.values() for n in values):
      sets.append(f"`--{name}` " + ", ".join(f"{values[name]} for {a}"
                                               for a, values in p.per_algo.items()
                                               if name in values))
    rules = " ".join(" ".join(rule.__doc__.split()) for rule in p.rules)
    lines.append(f"| `{p.name}` | {p.label() if p.citation else 'ours: ' + p.title} | "
                 f"{', '.join(who)}{where} | "
                 f"{' '.join(sets)} | {rules} |")
  return lines



def import_modules(argv: Sequence[str]) -> None:
  """Imports the modules named by ``--import`` in ``argv`` (before absl reads the flags, so
  that what they register has flags): a dotted name, importable from the current
  directory, or a path to a .py file. A module that fails to import is one line."""
  import importlib
  import importlib.util
  import os
  names = []
  for i, arg in enumerate(argv):
    if arg.startswith("--import="):
      names.append(arg.split("=", 1)[1])
    elif arg == "--import" and i + 1 < len(argv):
      names.append(argv[i + 1])
  for name in names:
    try:
      if name.endswith(".py"):
        spec = importlib.util.spec_from_file_location(
            os.path.splitext(os.path.basename(name))[0], name)
        if spec is None or not os.path.isfile(name):
          raise ImportError(f"no file {name}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
      else:
        if os.getcwd() not in sys.path:
          sys.path.append(os.getcwd())
        importlib.import_module(name)
    except UsageError:
      raise
    except Exception as e:  # noqa: BLE001 (any failure of the user's module is one line)
      raise UsageError(f"--import={name}: {type(e).__name__}: {e}") from None


if __name__ == "__main__":
  with open("docs/FLAGS.md", "w") as f:
    f.write(markdown())
