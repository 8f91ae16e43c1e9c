"""Per-run data (--data_per_seed): what each run of one vectorized program sees of the data
and of the world, passed through the engine like the swept hyperparameters."""

from typing import Any, NamedTuple

import jax
import numpy as np

from fedjax_bench.task.task import TaskView
from fedjax_bench.sim.world import WorldView


class RunData(NamedTuple):
  """Host arrays with the seed axis first ([num_seeds, ...]); the engine repeats them for
  every grid point and gives each run its own row."""
  seed: Any          # [S] int32: the seed of each row, checked against the run's seeds
  task: TaskView
  world: WorldView


def for_runs(data: RunData, num_points: int) -> RunData:
  """[S, ...] -> [G*S, ...] leaves: run r = g * S + s, the engine's order."""
  return jax.tree.map(lambda a: np.tile(np.asarray(a), (num_points,) + (1,) * (np.ndim(a) - 1)),
                      data)


