"""The command line's flags, generated from the settings declarations.

Every setting of the shared sections and of every registered algorithm's ``Hparams`` is
one absl flag of the same name, grouped in --helpfull by the section that declares it;
an algorithm setting's help says which algorithms read it. A flag's value reaches a run
only if the user gave it (`given_values`); everything else comes from the declarations,
through `config.resolve`, exactly as in the Python API.
"""

from typing import Sequence

from absl import flags

from fedjax_bench import algorithms, config, settings
from fedjax_bench.errors import UsageError

FLAGS = flags.FLAGS
_PREFIX = "fedjax_bench"
# Flags that are not settings of a run: what to run, not how.
RUN_ONLY = ("algo", "seeds", "sweep")
ALIASES = {"toyfl_phi": "availability_phi"}


def declarations() -> dict[str, tuple[settings.Spec, list[str]]]:
  """{name: (its declaration, the algorithms that read it, [] for the shared sections)}.
  An algorithm may give an inherited setting a default of its own; a setting declared
  twice must otherwise be declared alike, and never both shared and an algorithm's."""
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
  return out


def _alike(a: settings.Spec, b: settings.Spec) -> bool:
  return (a.kind, a.choices and set(a.choices), a.check) == (b.kind, b.choices and
                                                             set(b.choices), b.check)


def _help(spec: settings.Spec, readers: list[str]) -> str:
  text = spec.help
  if readers and len(readers) < len(algorithms.ALGORITHMS):
    text += f" [read by: {', '.join(readers)}]"
  return (text + _other_defaults(spec, readers)).replace("%", "%%")


def _other_defaults(spec: settings.Spec, readers: list[str]) -> str:
  """' [default X for A, B]' where algorithms declare defaults of their own."""
  own = {a: settings.specs(algorithms.get(a).Hparams)[spec.name].default for a in readers}
  others = sorted(a for a, d in own.items() if d != spec.default)
  if not others:
    return ""
  alt = sorted({str(own[a]) for a in others})
  return f" [default {', '.join(alt)} for {', '.join(others)}]"


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
  if spec.check is not None:
    check = spec.check
    flags.register_validator(spec.name, lambda v: v is None or check.test(v),
                             f"--{spec.name} {check.rule}")


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
  for spec, readers in declarations().values():
    _define(spec, readers)
  for alias, name in ALIASES.items():
    flags.DEFINE_alias(alias, name, module_name=f"{_PREFIX} (aliases)")


if "algo" not in FLAGS:
  _define_all()


def add_algorithm(name: str) -> None:
  """Flags for an algorithm registered after this module was imported (a notebook's or a
  test's own): --algo accepts it, and its settings get flags of their own."""
  if name not in FLAGS["algo"].parser.enum_values:
    FLAGS["algo"].parser.enum_values.append(name)
  for setting, (spec, readers) in declarations().items():
    if setting not in FLAGS:
      _define(spec, readers)


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


def passed_on(allowed, *, also=("seeds",), hint: str = "") -> dict:
  """A benchmark script's run flags: {name: value} of those in ``allowed`` that the user
  gave. Any other run flag given (besides ``also``, which the script reads itself) is an
  error: the script would not pass it on, so it would change nothing."""
  unread = sorted(n for n in (*names(), *RUN_ONLY)
                  if n in FLAGS and FLAGS[n].present and n not in allowed and n not in also)
  if unread:
    passes = ", ".join(f"--{n}" for n in (*also, *allowed))
    raise UsageError(f"{', '.join('--' + n for n in unread)}: not read by this script; it "
                     f"passes on {passes}{hint}")
  return {n: FLAGS[n].value for n in allowed if FLAGS[n].present}


def parse_seeds(text) -> list[int]:
  """--seeds: a count (3: seeds 0, 1, 2), a comma list ("5,7"), or (from Python) a list."""
  if isinstance(text, (list, tuple)):
    seeds = [int(s) for s in text]
  elif isinstance(text, int) and not isinstance(text, bool):
    seeds = list(range(text))
  else:
    try:
      text = str(text)
      if "," in text:
        seeds = [int(s) for s in text.split(",") if s.strip()]
      else:
        seeds = list(range(int(text)))
    except ValueError:
      raise UsageError(f"--seeds={text!r} must be a count (3) or a list (5,7)") from None
  if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
    raise UsageError(f"--seeds={text!r} must name at least one distinct non-negative seed")
  return seeds


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
  """FLAGS.md: every flag by section, with its default, who reads it and its help (the
  committed file is checked against this by tests/test_settings.py)."""
  lines = ["# Flags", "",
           "Generated from the settings declarations by `python -m fedjax_bench.flags`; "
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
  return "\n".join(lines) + "\n"


if __name__ == "__main__":
  with open("FLAGS.md", "w") as f:
    f.write(markdown())
