"""User-level differential privacy of a federated run: the privacy spent, from the RDP
accountant of Google's `dp-accounting` package (not an accountant of our own).

A round is one Gaussian mechanism (noise standard deviation z x the clip on the sum of
the clipped updates) applied to the round's sampled users:
  * Poisson sampling (--participation=bernoulli, each user with probability q): a
    `PoissonSampledDpEvent`, add-or-remove-one neighbours;
  * m of N without replacement (--participation=uniform): a
    `SampledWithoutReplacementDpEvent`, replace-one neighbours (the accountant's relation
    for that sampling);
  * every user (--participation=full): the Gaussian mechanism itself.
`epsilon(...)` composes the round T times and returns ε at the given δ.
"""

import numpy as np

from fedjax_bench.errors import UsageError

SAMPLINGS = ("bernoulli", "uniform", "uniform_sparse", "full")


def round_event(participation: str, num_clients: int, noise_multiplier: float, *,
                prob: float = 0.0, clients_per_round: int = 0):
  """(the DpEvent of one round, the accountant's neighbouring relation)."""
  import dp_accounting as dpa
  gaussian = dpa.GaussianDpEvent(noise_multiplier)
  relation = dpa.NeighboringRelation
  if participation == "bernoulli":
    return dpa.PoissonSampledDpEvent(prob, gaussian), relation.ADD_OR_REMOVE_ONE
  if participation in ("uniform", "uniform_sparse"):
    return (dpa.SampledWithoutReplacementDpEvent(num_clients, clients_per_round, gaussian),
            relation.REPLACE_ONE)
  if participation == "full":
    return gaussian, relation.ADD_OR_REMOVE_ONE
  raise UsageError(f"differential privacy is accounted for --participation="
                   f"{'|'.join(SAMPLINGS)}, not {participation!r}")


def epsilon(event, relation, rounds, delta: float) -> np.ndarray:
  """ε at ``delta`` after each of ``rounds`` (an array of round counts) compositions of
  the round's ``event``; 0 after 0 rounds, inf without noise."""
  from absl import logging
  from dp_accounting import SelfComposedDpEvent
  from dp_accounting.rdp import RdpAccountant
  out = []
  # Without noise nothing is private: ε = inf (the accountant of sampling without
  # replacement divides by the noise).
  if getattr(event, "event", event).noise_multiplier == 0:
    return np.where(np.asarray(rounds, np.float64).reshape(-1) > 0, np.inf, 0.0)
  # The accountant warns of each fractional order its series cannot evaluate (and
  # leaves it out, as it should); the warnings say nothing to a user.
  level = logging.get_verbosity()
  logging.set_verbosity(logging.ERROR)
  try:
    for t in np.asarray(rounds).reshape(-1):
      if t <= 0:
        out.append(0.0)
        continue
      accountant = RdpAccountant(neighboring_relation=relation)
      accountant.compose(SelfComposedDpEvent(event, int(t)))
      out.append(float(accountant.get_epsilon(delta)))
  finally:
    logging.set_verbosity(level)
  return np.asarray(out, np.float64)
