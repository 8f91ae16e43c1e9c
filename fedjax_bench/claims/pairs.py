"""Runs that a claim compares differ only in what the claim is about.

A paper's preset (`config.presets`) fills in every setting a run does not give, chosen by
the run's algorithm and dataset: a claim that compares an algorithm a preset applies to with
one it does not would also compare the preset's settings (FedSoftMax on MNIST takes the
loss-aware aggregation paper's 2 local epochs and learning-rate decay; FedAvg does not).
`unequal_presets` names each setting that a preset's shared values give one run of a claim
and that another run of the claim, of another algorithm, reads at another value. A preset's
per-algorithm values (a paper's stepsize for each method) and its rules (the asynchronous
event budget for a time horizon) are the paper's own per-method choices, not flagged.
"""

import itertools

from fedjax_bench.claims import store
from fedjax_bench.claims.store import Run
from fedjax_bench.config import presets


def _taken(run: Run, cfg) -> dict:
  """{setting: (value, preset title)} that a preset's shared values set in ``cfg``."""
  out = {}
  preset_values = dict(cfg.preset)
  for p in presets.matching(cfg.algo, cfg.data.dataset):
    for name in p.values:
      if name in preset_values and name not in run.sweep:
        out[name] = (preset_values[name], p.title)
  return out


def unequal_presets(paper, resolved=None) -> list[str]:
  """One line per (claim, setting) where the claim's runs of two algorithms differ in a
  value that a preset set for one of them; empty when every comparison is of equals.
  ``resolved``: {run name: its config} the caller has already resolved."""
  runs = {r.name: r for r in paper.runs}
  resolved = dict(resolved or {})

  def cfg(name):
    if name not in resolved:
      resolved[name] = store.prepare(runs[name])[0]
    return resolved[name]

  out = []
  for c in paper.claims:
    names = sorted(set(c.test.runs())) if c.test is not None else []
    for x, y in itertools.permutations(names, 2):
      cx, cy = cfg(x), cfg(y)
      if cx.algo == cy.algo:
        continue
      other = cy.flat()
      for name, (value, title) in _taken(runs[x], cx).items():
        if name in other and name not in runs[y].sweep and other[name] != value:
          out.append(f"claim {c.id}: run {x} takes --{name}={value} from {title}, run {y} "
                     f"(--algo={cy.algo}) has {other[name]}: give --{name} to both")
  return out
