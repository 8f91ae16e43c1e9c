"""The world an algorithm is built against: who is available, how much each client computes."""

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_bench.core import keys
from fedjax_bench.errors import UsageError
from fedjax_bench.sim.participation import Participation


class WorldView(NamedTuple):
  """One run's part of the world with --data_per_seed (leaves may be traced)."""
  client_steps: jax.Array  # [num_clients] int32
  participation: Any = None  # the arrays `World.rebuild` takes; None: the shared scheme
  rates: Any = None          # [num_clients] float32 asynchronous client rates, or None


class World(NamedTuple):
  participation: Participation
  client_steps: jax.Array  # [num_clients] int32 local steps each client runs
  max_steps: int           # static bound on client_steps (the scan length)
  # When messages arrive (sim/asynchrony.Clock), for asynchronous algorithms; None:
  # they build one from their async_* hyperparameters.
  clock: Optional[Any] = None
  # Asynchronous client rates lambda_i given by the world (a run's own, --data_per_seed);
  # None: algorithms draw them from their async_* hyperparameters.
  rates: Optional[Any] = None
  # (arrays, cap) -> Participation: the scheme rebuilt from a run's arrays
  # (`availability.prepare`), for runs with their own availability probabilities.
  rebuild: Optional[Callable] = None

  def for_run(self, view: WorldView) -> "World":
    """The world as one run sees it: its step budgets, availability and rates. Static
    bounds (max_steps, the cohort cap) are the base world's, the maxima over runs."""
    part = self.participation
    if view.participation is not None:
      part = self.rebuild(view.participation, part.cap)
    return self._replace(participation=part, client_steps=view.client_steps,
                         rates=self.rates if view.rates is None else view.rates)

  @property
  def num_clients(self) -> int:
    return self.participation.num_clients

  def init_state(self, key: jax.Array) -> Any:
    """The world's own state (a Markov chain's current states, say); () for most."""
    return self.participation.init(keys.for_purpose(key, "availability"))

  def observe(self, key: jax.Array, t: jax.Array, state: Any) -> tuple[jax.Array, Any]:
    """Round t's availability mask from the round key; every algorithm sees the same one."""
    return self.participation.step(keys.for_purpose(key, "participation"), t, state)

  def probs(self, t: jax.Array) -> jax.Array:
    """The true p_i^t, for oracle baselines; an error where the scheme has none."""
    if self.participation.probs is None:
      raise UsageError("this participation scheme has no known probabilities")
    return self.participation.probs(t)


def client_steps(counts: np.ndarray, *, local_steps: int, local_epochs: float,
                 batch_size: int, drop_last: bool = False) -> np.ndarray:
  """K steps for everyone, or E epochs of ceil(count/B) batches each (data-size driven;
  floor(count/B), at least 1, when ``drop_last`` leaves out each epoch's partial batch)."""
  counts = np.asarray(counts)
  if local_epochs > 0:
    batches = np.floor(counts / batch_size) if drop_last else np.ceil(counts / batch_size)
    per_epoch = np.maximum(batches, 1)
    return np.ceil(local_epochs * per_epoch).astype(np.int32)
  if local_steps <= 0:
    raise UsageError(f"--local_steps={local_steps} must be positive (or set --local_epochs)")
  return np.full(counts.shape, local_steps, np.int32)


def make(participation: Participation, steps: np.ndarray, clock=None) -> World:
  steps = np.asarray(steps, np.int32)
  if steps.shape != (participation.num_clients,):
    raise UsageError("client_steps must have one entry per client")
  if clock is not None and clock.num_clients != participation.num_clients:
    raise UsageError("the clock must have one rate per client")
  return World(participation, jnp.asarray(steps), max(int(steps.max()), 1), clock)
