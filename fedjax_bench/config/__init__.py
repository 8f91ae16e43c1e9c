"""A run's whole configuration: the algorithm, its typed hyperparameters and the shared
sections, resolved from the settings a user gives (by name, as on the command line).

    cfg = config.resolve({"algo": "fedawe", "dataset": "toyfl", "fedawe_clip": 0.0})
    cfg.hparams.fedawe_clip, cfg.data.num_clients, cfg.flat()["client_lr"]

`resolve` fills every setting the user did not give from its declaration, then the
papers' settings (`presets`), and refuses: a name no section declares (naming the
closest), a value of the wrong type or range, and a setting that has no effect on the
chosen algorithm with the other settings as given.
"""

import dataclasses
from typing import Any, Mapping

from fedjax_bench import algorithms, settings
from fedjax_bench.config import presets
from fedjax_bench.data.settings import SEED_LIMITS, DataSettings
from fedjax_bench.errors import UsageError
from fedjax_bench.models.settings import ModelSettings
from fedjax_bench.config.run_settings import EvalSettings, RunSettings
from fedjax_bench.sim.settings import WorldSettings

# The shared sections, by the Config field that holds each.
SECTIONS = {"data": DataSettings, "model": ModelSettings, "world": WorldSettings,
            "eval": EvalSettings, "run": RunSettings}
DEFAULT_ALGO = "fedavg"
DEFAULT_SEEDS = 3  # runs 0..2 together: the curves get a band


@dataclasses.dataclass(frozen=True)
class Config:
  algo: str = DEFAULT_ALGO
  data: DataSettings = DataSettings()
  model: ModelSettings = ModelSettings()
  world: WorldSettings = WorldSettings()
  eval: EvalSettings = EvalSettings()
  run: RunSettings = RunSettings()
  hparams: Any = None  # the algorithm's Hparams (None: its defaults)
  # The names the user gave (the rest are defaults); not part of what the run computes.
  given: frozenset = frozenset()
  # ((name, value), ...) that a paper's setting (`presets`) set because the user did
  # not give them: announced by the command line, recorded in config.json.
  preset: tuple = ()
  # Made by `resolve` (papers' defaults applied, checked); a Config built by hand is
  # completed by `complete` before it runs.
  resolved: bool = False

  def __post_init__(self):
    if self.hparams is None:
      object.__setattr__(self, "hparams", algorithms.get(self.algo).Hparams())

  @property
  def kind(self) -> str:
    return algorithms.get(self.algo).kind

  def flat(self) -> dict:
    """{name: value} of every setting the run reads, the algorithm first."""
    out = {"algo": self.algo}
    for field in SECTIONS:
      out.update(settings.as_dict(getattr(self, field)))
    out.update(settings.as_dict(self.hparams))
    return out


def classes(algo: str) -> list[type]:
  """The settings classes a run of ``algo`` reads: the shared sections and its Hparams."""
  return [*SECTIONS.values(), algorithms.get(algo).Hparams]


def specs(algo: str) -> dict[str, settings.Spec]:
  out = {}
  for cls in classes(algo):
    out.update(settings.specs(cls))
  return out


def resolve(values: Mapping[str, Any] | None = None, *, seeds=(0,), **kwargs) -> Config:
  """The Config of the settings in ``values`` / ``kwargs`` (by name; "algo" among them),
  every other one at its default. ``seeds``: the run's seeds (an asynchronous run on its
  paper's problem with --data_per_seed sizes its event budget for the slowest seed)."""
  values = {**(values or {}), **kwargs}
  algo = values.pop("algo", DEFAULT_ALGO)
  algorithm = algorithms.get(algo)
  own = specs(algo)
  unknown = [n for n in values if n not in own]
  if unknown:
    everywhere = settings.all_names()
    for name in unknown:
      if name not in everywhere:
        raise UsageError(f"unknown setting {name!r}; {settings.closest(name, own)}")
    _no_effect(unknown, algo)
  flat = {"algo": algo, **{n: s.default for n, s in own.items()}}
  flat.update({n: own[n].convert(v) for n, v in values.items()})
  given = frozenset(values)
  declared = dict(flat)
  flat = presets.with_defaults(flat, given, seeds=seeds)
  preset = tuple((n, v) for n, v in flat.items() if n not in given and v != declared.get(n))
  cfg = _build(flat, given, preset)
  _check(cfg, algorithm)
  top = max(seeds, default=0)
  if cfg.data.data_per_seed and cfg.data.partition_seed + top > SEED_LIMITS[1]:
    raise UsageError(f"--data_per_seed: seed {top} draws its data from --partition_seed + "
                     f"{top} = {cfg.data.partition_seed + top}, beyond {SEED_LIMITS[1]}")
  return cfg


def _build(flat: dict, given: frozenset, preset: tuple = ()) -> Config:
  algo = flat["algo"]
  parts = {field: _section(cls, flat) for field, cls in SECTIONS.items()}
  return Config(algo=algo, hparams=_section(algorithms.get(algo).Hparams, flat), given=given,
                preset=preset, resolved=True, **parts)


def _section(cls, flat: dict):
  return cls(**{n: flat[n] for n in settings.specs(cls)})


def complete(cfg: Config, seeds=(0,)) -> Config:
  """A Config built by hand (``Config(algo=..., data=DataSettings(...), hparams=...)``) as
  `resolve` makes it: the settings that differ from their declarations count as given,
  the papers' defaults fill the rest, and everything is checked."""
  if cfg.resolved:
    return cfg
  declared = specs(cfg.algo)
  values = {n: v for n, v in cfg.flat().items()
            if n != "algo" and (n in cfg.given or v != declared[n].default)}
  return resolve(values, algo=cfg.algo, seeds=seeds)


def replace(cfg: Config, **values) -> Config:
  """``cfg`` with some settings replaced by name (checked; no defaults re-derived)."""
  flat = cfg.flat()
  own = specs(cfg.algo)
  for name, value in values.items():
    if name not in own:
      raise UsageError(f"unknown setting {name!r} for --algo={cfg.algo}; "
                       f"{settings.closest(name, own)}")
    flat[name] = own[name].convert(value)
  preset = tuple((n, v) for n, v in cfg.preset if n not in values)
  return _build(flat, cfg.given | frozenset(values), preset)


def _check(cfg: Config, algorithm) -> None:
  unused = [n for obj in (cfg.hparams, *(getattr(cfg, f) for f in SECTIONS))
            for n in settings.unused(obj, cfg.given)]
  if unused:
    _no_effect(unused, cfg.algo)
  world = cfg.world
  if (algorithm.kind == algorithms.SYNCHRONOUS and world.availability == "off"
      and world.participation in ("uniform", "uniform_sparse", "proportional")
      and world.clients_per_round > cfg.data.num_clients):
    raise UsageError(f"--clients_per_round={world.clients_per_round} must not exceed "
                     f"--num_clients={cfg.data.num_clients}")
  if (algorithm.kind == algorithms.SYNCHRONOUS and world.availability == "off"
      and world.participation == "proportional" and cfg.data.data_per_seed):
    raise UsageError("--participation=proportional draws by seed 0's client sizes; with "
                     "--data_per_seed each seed has its own, so give one of them")


def _no_effect(names, algo: str) -> None:
  names = sorted(set(names))
  listed = ", ".join(f"--{n}" for n in names)
  one = len(names) == 1
  raise UsageError(f"{listed} {'has' if one else 'have'} no effect on --algo={algo} with these "
                   f"flags; drop {'it' if one else 'them'}")


def check_sweep(cfg: Config, names) -> None:
  """A grid may vary only the algorithm's settings declared sweepable (they shape no array
  and no Python control flow) that take effect; ``names`` {name: values} has each value
  checked as the setting's flag would be."""
  own = settings.specs(type(cfg.hparams))
  for name in names:
    if name not in own:
      raise UsageError(f"--sweep: {name!r} is not a hyperparameter of --algo={cfg.algo}; "
                       f"valid: {', '.join(sweepable(cfg))}")
    if not own[name].sweep:
      raise UsageError(f"--sweep: {name} shapes arrays or control flow and cannot be swept in "
                       f"one program; sweep scalars such as {', '.join(sweepable(cfg)[:4])}, "
                       "or run one value per invocation")
    if name in cfg.given:
      raise UsageError(f"--{name} is given and swept by --sweep; give one")
    for value in names[name] if isinstance(names, Mapping) else ():
      try:
        own[name].convert(value)  # the check of a flag's or a keyword's value
      except UsageError as e:
        raise UsageError(f"--sweep={name}: {e}") from None
  unused = settings.unused(cfg.hparams, names)
  if unused:
    _no_effect(unused, cfg.algo)


def sweepable(cfg: Config) -> list[str]:
  return [n for n, s in settings.specs(type(cfg.hparams)).items() if s.sweep]
