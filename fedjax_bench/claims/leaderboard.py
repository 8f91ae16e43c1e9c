"""A leaderboard of methods tuned on equal terms, declared as tasks and generated from runs.

A `Task` is one setting, written once, and its methods; each `Method` declares a grid of
its own learning rates and main hyperparameter, the same number of points for every method
of the task. Each method is swept over its grid twice on the same code: on the tuning
seeds, where the point of the best seed-mean final metric is picked, and on the reported
seeds, which are read at that point only (no tuning on the seeds reported). Every method of
a task shares its reported seeds with the baseline (FedAvg): the same data, initial model
and cohorts per seed, so a difference is paired by seed and judged by the claims runner's
rules at margin 0 (`verdicts.Difference`): **better** when its whole 95% interval is above
0, **worse** when below, **not resolved** otherwise.

`board(...)` makes the `Paper` the claims runner runs, caches and checks
(`python benchmarks/claims.py leaderboard`); its renderer writes LEADERBOARD.md (the tables,
the declared but unrun tasks, the paper-scale variants) and RUNS.md.
"""

import dataclasses
import math
from typing import Mapping, Optional

import numpy as np

from fedjax_bench.claims import paper as paper_lib
from fedjax_bench.claims import verdicts
from fedjax_bench.claims.paper import Curve, Figure, Paper
from fedjax_bench.claims.store import Run
from fedjax_bench.claims.verdicts import Claim, Difference, Metric

WORDS = {verdicts.REPRODUCED: "better", verdicts.CONTRADICTED: "worse"}
NOT_RESOLVED = "not resolved"


@dataclasses.dataclass(frozen=True)
class Method:
  name: str                           # its runs' names: TASK-NAME and TASK-NAME-tune
  label: str
  settings: Mapping = dataclasses.field(default_factory=dict)  # beyond the task's
  grid: Mapping[str, tuple] = dataclasses.field(default_factory=dict)  # its swept axes
  metric: str = ""                    # the task's metric unless given (a personalized
                                      # method's own evaluation)
  note: str = ""


@dataclasses.dataclass(frozen=True)
class Task:
  name: str
  title: str
  settings: Mapping                   # every method's settings, written once
  methods: tuple[Method, ...]         # the first is the baseline the others are paired with
  target: float                       # of the metric (a fraction): rounds to reach it
  metric: str = "test_accuracy"
  window: int = 0                     # rounds: the final metric averages the evaluations in them
  seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
  tuning_seeds: tuple[int, ...] = (100, 101, 102)
  grid_points: int = 4                # every method's grid has exactly this many
  paper_scale: Mapping = dataclasses.field(default_factory=dict)  # overrides for a GPU
                                      # (None: drop the task's setting)
  pending: str = ""                   # why its runs are not made here (declared only)
  not_run: Mapping[str, str] = dataclasses.field(default_factory=dict)  # method name: why
                                      # it is not run at this scale (listed under the table;
                                      # the paper-scale variant runs it)
  summary: str = ""                   # what the task is for, one line

  def __post_init__(self):
    if set(self.seeds) & set(self.tuning_seeds):
      raise ValueError(f"{self.name}: the reported seeds are tuned on")
    for m in self.methods:
      size = math.prod(len(v) for v in m.grid.values())
      if size != self.grid_points:
        raise ValueError(f"{self.name}: {m.name}'s grid has {size} points, the task "
                         f"{self.grid_points}: every method is tuned over as many")
      shared = set(m.settings) & set(m.grid)
      if shared:
        raise ValueError(f"{self.name}: {m.name} both sets and sweeps {sorted(shared)}")
    unknown = set(self.not_run) - {m.name for m in self.methods}
    if unknown:
      raise ValueError(f"{self.name}: not_run names methods it does not have: "
                       f"{sorted(unknown)}")
    if self.methods[0].name in self.not_run:
      raise ValueError(f"{self.name}: the baseline {self.methods[0].name} must be run")

  @property
  def run_methods(self) -> tuple[Method, ...]:
    """The methods run at this scale: all but `not_run`'s."""
    return tuple(m for m in self.methods if m.name not in self.not_run)

  @property
  def baseline(self) -> Method:
    return self.methods[0]

  def run_name(self, m: Method, tuning: bool = False) -> str:
    return f"{self.name}-{m.name}" + ("-tune" if tuning else "")

  def runs(self, scale: Optional[Mapping] = None) -> tuple[Run, ...]:
    """The runs of the methods run here, or with ``scale`` (the paper-scale variant's
    overrides) those of every method."""
    out = []
    for m in (self.methods if scale else self.run_methods):
      settings = {k: v for k, v in {**self.settings, **(scale or {}), **m.settings}.items()
                  if v is not None}  # a scale's None drops the task's setting
      out.append(Run(self.run_name(m, True), settings, self.tuning_seeds, dict(m.grid)))
      out.append(Run(self.run_name(m), settings, self.seeds, dict(m.grid)))
    return tuple(out)

  def metric_of(self, m: Method) -> str:
    return m.metric or self.metric

  def final(self, m: Method, **kw) -> Metric:
    """The reported final metric in points, at the point picked on the tuning seeds."""
    what = self.metric_of(m)
    tune = Metric(self.run_name(m, True), what, window=self.window, scale=-100.0,
                  label=f"{m.label}, tuning seeds")
    return Metric(self.run_name(m), what, window=self.window, scale=100.0, label=m.label,
                  tune=tune, **kw)

  def rounds_to_target(self, m: Method) -> Metric:
    return dataclasses.replace(self.final(m), reach=100.0 * self.target, window=0)

  def claim_id(self, m: Method) -> str:
    return f"{self.name}-{m.name}"

  def claims(self) -> tuple[Claim, ...]:
    b = self.baseline
    return tuple(
        Claim(self.claim_id(m), f"{m.label} against {b.label}", "—",
              Difference(self.final(m), self.final(b)), section=self.title)
        for m in self.run_methods[1:])

  def figure(self) -> Figure:
    return Figure(f"{self.name}.png", self.title,
                  tuple(Curve(self.run_name(m), m.label, self.metric_of(m), 100.0,
                              tune=self.final(m).tune) for m in self.run_methods),
                  ylabel=f"{self.metric} (%)", band=True)


def board(name: str, title: str, tasks: tuple[Task, ...], intro: str = "",
          notes: str = "") -> Paper:
  """The leaderboard as the claims runner's `Paper`: the runs and comparisons of the
  tasks that are not pending, its files written by `render`; a pending task's runs are
  the paper's `pending` group of the task's name."""
  names = [t.name for t in tasks]
  if len(set(names)) != len(names):
    raise ValueError("a task declared twice")
  run = [t for t in tasks if not t.pending]
  return Paper(name=name, title=title, source="", intro=intro, notes=notes,
               runs=tuple(r for t in run for r in t.runs()),
               claims=tuple(c for t in run for c in t.claims()),
               figures=tuple(t.figure() for t in run),
               renderer=lambda paper, records: render(paper, records, tasks),
               pending={t.name: t.runs() for t in tasks if t.pending})


def _fmt(x: float, signed: bool = False, digits: int = 1) -> str:
  if not np.isfinite(x):
    return "n/a" if np.isnan(x) else ("+∞" if x > 0 else "−∞")
  return (f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}").replace("-", "−")


def _interval(values: np.ndarray, signed: bool = False) -> str:
  stat, lo, hi, kind = verdicts.estimate(values, False)
  if not np.isfinite(stat):
    return "n/a (a seed diverged)"
  return f"{_fmt(stat, signed)} [{_fmt(lo, signed)}, {_fmt(hi, signed)}]"


def _tuned(task: Task, m: Method, records: dict) -> str:
  """The swept values at the picked point, and which axes it sits at the end of."""
  metric = task.final(m)
  pick, ok = metric.picked_points(records)
  if not ok.all():
    return "no point finite"
  point = records[task.run_name(m)]["grid"][int(pick[0])]
  ends = [k for k, v in m.grid.items() if len(v) > 2 and point[k] in (v[0], v[-1])]
  out = ", ".join(f"{k} {point[k]:g}" for k in m.grid)
  return out + (f" (grid end: {', '.join(ends)})" if ends else "")


def _cost(task: Task, m: Method, records: dict) -> tuple[int, float]:
  """(runs, CPU seconds) of a method: its tuning and reported runs."""
  recs = [records[task.run_name(m, t)] for t in (True, False)]
  return len(recs), sum(r.get("cpu_seconds", r["seconds"]) for r in recs)


def _rows(task: Task, records: dict):
  """[(method, final values, difference outcome or None, rounds values)], best first."""
  b = task.baseline
  rows = []
  for m in task.run_methods:
    final = task.final(m).values(records)
    outcome = None if m is b else Difference(task.final(m), task.final(b)).outcome(records)
    rows.append((m, final, outcome, task.rounds_to_target(m).values(records)))
  mean = lambda v: float(np.mean(v)) if np.isfinite(v).all() else -np.inf
  return sorted(rows, key=lambda r: -mean(r[1]))


def _rounds(values: np.ndarray, last: float) -> str:
  med = float(np.median(values))
  never = int(np.sum(values >= last))
  text = f"{med:.0f} [{values.min():.0f}, {values.max():.0f}]"
  return text + (f", {never} never" if never else "")


def _task_table(task: Task, records: dict) -> list[str]:
  b = task.baseline
  rows = _rows(task, records)
  after = verdicts._after(np.asarray(records[task.run_name(b)]["rounds"]))
  metric = f"{task.metric} (%)" + (f", mean of the last {task.window} rounds" if task.window
                                   else ", final")
  lines = [f"## {task.title}", "", task.summary, "" if task.summary else None,
           f"{len(task.run_methods)} methods, each swept over {task.grid_points} grid points on "
           f"tuning seeds {_seeds(task.tuning_seeds)} and reported on seeds "
           f"{_seeds(task.seeds)} at the point of its best seed-mean {task.metric} there. "
           f"{len(task.run_methods) - 1} comparisons with {b.label}, each at 95% on its own: "
           f"{_tally(rows)}.", "",
           f"| method | {metric}, 95% CI | rounds to {task.target:.0%}: median [range] | "
           f"− {b.label}, paired (95% CI) | vs {b.label} | tuned at | runs, CPU s | "
           "recompute: `--verify leaderboard` |",
           "|---|---|---|---|---|---|---|---|"]
  for m, final, outcome, rounds in rows:
    diff = "—" if outcome is None else f"{outcome.ours} {outcome.interval}"
    word = "—" if outcome is None else f"**{WORDS.get(outcome.verdict, NOT_RESOLVED)}**"
    n, cpu = _cost(task, m, records)
    label = m.label + (f" ({task.metric_of(m)})" if m.metric else "")
    again = "with any row" if outcome is None else f"`--claim={task.claim_id(m)}`"
    lines.append(f"| {label} | {_interval(final)} | {_rounds(rounds, after)} | {diff} | "
                 f"{word} | {_tuned(task, m, records)} | {n}, {cpu:.0f} | {again} |")
  lines += ["", f"Recompute a row: `python benchmarks/claims.py --verify leaderboard "
                f"--claim=ID` reruns the method's and {b.label}'s runs aside (tuning and "
                "reported), recomputes every number of the row from them and fails if its "
                f"verdict changes; `python benchmarks/claims.py leaderboard --claim=ID` makes "
                f"them where missing, and each run's command is in [RUNS.md](RUNS.md). A seed "
                f"that never reaches {task.target:.0%} counts {after:.0f} rounds.", ""]
  notes = [f"{m.label}: {m.note}" for m in task.run_methods if m.note]
  if notes:
    lines += ["Notes: " + " ".join(notes), ""]
  lines += _not_run(task)
  lines += [f"![{task.title}]({task.name}.png)", ""]
  return [x for x in lines if x is not None]


def _not_run(task: Task) -> list[str]:
  """The task's declared methods that are not run at this scale, grouped by the reason."""
  reasons = {}
  for m in task.methods:
    if m.name in task.not_run:
      reasons.setdefault(task.not_run[m.name], []).append(m.label)
  return [line for why, labels in reasons.items()
          for line in (f"Declared, not run at this scale: {', '.join(labels)}: {why}", "")]


def summary_line(task: Task, records: dict) -> str:
  """The task's result in one line: its best method and how the others fared against the
  baseline."""
  rows = _rows(task, records)
  best, final = rows[0][0], rows[0][1]
  return (f"{task.title}: best {best.label}, {_interval(final)}; against "
          f"{task.baseline.label} {_tally(rows)}.")


def _tally(rows) -> str:
  """"b better, w worse, n not resolved": the rows' comparisons with the baseline."""
  words = [WORDS.get(o.verdict, NOT_RESOLVED) for _, _, o, _ in rows if o is not None]
  return (f"{words.count('better')} better, {words.count('worse')} worse, "
          f"{words.count(NOT_RESOLVED)} not resolved")


def _seeds(seeds) -> str:
  s = sorted(seeds)
  return f"{s[0]}-{s[-1]}" if s == list(range(s[0], s[-1] + 1)) else ",".join(map(str, s))


def _declared(task: Task, paper: str) -> list[str]:
  methods = ", ".join(f"{m.label} ({' × '.join(f'{k} {v}' for k, v in m.grid.items())})"
                      for m in task.methods)
  first = task.runs()[1]
  return [f"### {task.title}", "", (task.summary + " ") if task.summary else "",
          f"Without a table: {task.pending}", "",
          f"Methods and their grids: {methods}.", "", *_not_run(task),
          f"Its runs: `python benchmarks/claims.py {paper} --pending={task.name}` makes "
          f"those missing or stale; one of them, for instance: `{first.command()}`", ""]


def _scale(task: Task) -> str:
  flags = " ".join(f"--{k}={v}" for k, v in task.paper_scale.items() if v is not None)
  dropped = [f"--{k}" for k, v in task.paper_scale.items() if v is None]
  return f"| {task.title} | `{flags}`" + (f", without {', '.join(dropped)}" if dropped
                                           else "") + " |"


def render(paper: Paper, records: dict, tasks: tuple[Task, ...]) -> dict[str, str]:
  """LEADERBOARD.md and RUNS.md from the records of the tasks that are not pending."""
  run = [t for t in tasks if not t.pending]
  pending = [t for t in tasks if t.pending]
  recs = [records[r.name] for t in run for r in t.runs()]
  cpu = sum(r.get("cpu_seconds", r["seconds"]) for r in recs)
  wall = sum(r["seconds"] for r in recs)
  lines = [f"# {paper.title}", "", paper.intro.strip(), "",
           f"Cost of the tables below: {len(recs)} runs, {wall / 3600:.1f} hours of wall "
           f"clock and {cpu / 3600:.1f} CPU-hours on the 2-core machine of "
           "[RUNS.md](RUNS.md).", "", "In one line each (README.md repeats these lines):",
           "", *(f"- {summary_line(t, records)}" for t in run), ""]
  for t in run:
    lines += _task_table(t, records)
  if pending:
    lines += ["## Declared, without a table", "",
              "These tasks are declared with their methods and grids; their tables are not "
              "made yet, each for the reason given.", ""]
    for t in pending:
      lines += _declared(t, paper.name)
  scaled = [t for t in tasks if t.paper_scale]
  if scaled:
    lines += ["## Paper scale", "",
              "Each task at the scale of the papers it comes from, for a GPU (not run here): "
              "the task's settings with these replaced.", "",
              "| task | settings replaced |", "|---|---|", *(_scale(t) for t in scaled), ""]
  if paper.notes:
    lines += ["## Notes", "", paper.notes.strip(), ""]
  lines += [paper_lib._provenance(paper, "this file"), ""]
  return {"LEADERBOARD.md": "\n".join(lines), "RUNS.md": paper_lib.runs_file(paper, records)}


def _anchor(title: str) -> str:
  keep = "".join(c for c in title.lower() if c.isalnum() or c in " -")
  return keep.replace(" ", "-")
