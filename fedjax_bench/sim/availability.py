"""Client availability models of the FedAWE paper (Xiang et al., NeurIPS 2024: Section 7
and Appendix J.3).

Base probabilities are data-correlated, p_i = <nu_i, phi> (Appendix J.3). The factored
dynamics (stationary, staircase, sine, interleaved sine) give
p_i^t = clip_[0,1](max(p_i, p_min) f(t)) and a fresh Bernoulli draw per client per
round (Appendix J.3 and the authors' code). Markov and cyclic availability (from IBM/fedau, not in
the
FedAWE paper) carry a per-client state. Every model is a `Participation`.
"""

import numbers
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_bench.errors import UsageError
from fedjax_bench.sim import participation
from fedjax_bench.sim.participation import Participation

PHI_MODES = ("paper", "stress")
DYNAMICS = ("stationary", "staircase", "sine", "interleaved_sine", "markov", "cyclic")
_FACTORED = DYNAMICS[:4]

# Interleaved sine cuts a client iff p_i f(t) < delta0 in exact arithmetic (our reading,
# docs/papers/fedawe.md).
# Float64 rounding puts some exact ties a hair below delta0 (0.25 * (0.7 - 0.3)
# = 0.09999999999999999), so ties within this relative tolerance count as kept.
_CUT_RTOL = 1e-9


def _is_int(x) -> bool:
  return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def draw_phi(mode: str, num_classes: int, seed: int) -> np.ndarray:
  """Per-class availability weights phi [C].

  "paper": phi_c ~ U(0, Phi_c), Phi_c = 1 for the first half of the classes
  (c < C/2) and 0.5 for the rest, from a NumPy Generator seeded with `seed`.
  "stress": 0.9 for the first half and 0.1 for the rest (our CPU experiment, docs/papers/fedawe.md).
  """
  if mode not in PHI_MODES:
    raise UsageError(f"unknown phi mode {mode!r}; valid: {', '.join(PHI_MODES)}")
  if not _is_int(num_classes) or num_classes < 1:
    raise UsageError(f"num_classes={num_classes} must be a positive integer")
  first = np.arange(num_classes) < num_classes / 2
  if mode == "stress":
    return np.where(first, 0.9, 0.1)
  # Elementwise highs consume the stream in class order, like the code's two draws.
  return np.random.default_rng(seed).uniform(0.0, np.where(first, 1.0, 0.5))


def base_probs(label_histograms, phi) -> np.ndarray:
  """p_i = <nu_i, phi> with nu_i client i's normalised label histogram; 0 without data."""
  hist = np.asarray(label_histograms, np.float64)
  phi = np.asarray(phi, np.float64)
  if hist.ndim != 2 or phi.shape != (hist.shape[1],):
    raise UsageError(f"label histograms {hist.shape} must be [clients, classes] and phi "
                     f"{phi.shape} must be [classes]")
  if not np.all(np.isfinite(hist)) or np.any(hist < 0):
    raise UsageError("label histograms must be finite and non-negative")
  if not np.all((phi >= 0) & (phi <= 1)):
    raise UsageError("phi must lie in [0, 1]")
  totals = hist.sum(1)
  nu = hist / np.where(totals > 0, totals, 1.0)[:, None]
  return nu @ phi


def homogeneous(num_clients: int, p: float) -> np.ndarray:
  """A base of equal probabilities (the paper's Example 2 is sine over this, Section 4, Fig. 3)."""
  if not _is_int(num_clients) or num_clients < 1:
    raise UsageError(f"num_clients={num_clients} must be a positive integer")
  if not 0 <= p <= 1:
    raise UsageError(f"probability {p} must be in [0, 1]")
  return np.full(num_clients, float(p))


def _check_factor_args(dynamics, period, gamma, staircase_low):
  if dynamics not in DYNAMICS:
    raise UsageError(f"unknown availability dynamics {dynamics!r}; valid: {', '.join(DYNAMICS)}")
  if not _is_int(period) or period < 1:
    raise UsageError(f"availability period={period} must be an integer >= 1")
  if not 0 <= gamma <= 1:
    raise UsageError(f"availability gamma={gamma} must be in [0, 1]")
  if not 0 <= staircase_low <= 1:
    raise UsageError(f"staircase_low={staircase_low} must be in [0, 1]")


def factor_table(dynamics: str = "sine", period: int = 20, gamma: float = 0.3,
                 staircase_low: float = 0.4) -> np.ndarray:
  """f(t) for t = 0..period-1 in float64 (interleaved sine: the sine, before the cut)."""
  _check_factor_args(dynamics, period, gamma, staircase_low)
  if dynamics not in _FACTORED:
    raise UsageError(f"dynamics {dynamics!r} has no factor table; valid: {', '.join(_FACTORED)}")
  t = np.arange(period)
  if dynamics == "stationary":
    return np.ones(period)
  if dynamics == "staircase":
    return np.where(t < period / 2, 1.0, float(staircase_low))
  return gamma * np.sin(2 * np.pi * t / period) + (1 - gamma)


def make(dynamics: str, base, *, period: int = 20, gamma: float = 0.3, delta0: float = 0.1,
         staircase_low: float = 0.4, markov_a: float = 0.05, p_min: float = 0.0,
         cap: int = 0) -> Participation:
  """Availability of clients with base probabilities `base` [n] under `dynamics`.

  Every model starts from max(base, p_min). `period` is P of the factored
  dynamics and the cycle length of "cyclic"; `gamma` is the sine's amplitude,
  `delta0` the interleaved sine's cut-off, `markov_a` the Markov chain's
  inactive-to-active rate. `cap=0` picks the cohort bound from the busiest round.
  """
  arrays, cap, from_arrays = prepare(dynamics, base, period=period, gamma=gamma,
                                     delta0=delta0, staircase_low=staircase_low,
                                     markov_a=markov_a, p_min=p_min, cap=cap)
  return from_arrays(arrays, cap)


def prepare(dynamics: str, base, *, period: int = 20, gamma: float = 0.3, delta0: float = 0.1,
            staircase_low: float = 0.4, markov_a: float = 0.05, p_min: float = 0.0,
            cap: int = 0) -> tuple[dict, int, Callable[[dict, int], Participation]]:
  """`make` in two halves: the host work on `base` (float64, per client), giving a dict of
  [n] arrays and the static cap, and ``from_arrays(arrays, cap) -> Participation``, which
  may take those arrays traced. Runs with their own base probabilities (--data_per_seed)
  stack their dicts and rebuild the scheme inside the vmapped program (`make_per_run`)."""
  _check_factor_args(dynamics, period, gamma, staircase_low)
  if not 0 <= delta0 <= 1:
    raise UsageError(f"delta0={delta0} must be in [0, 1]")
  if not 0 < markov_a <= 1:
    raise UsageError(f"markov_a={markov_a} must be in (0, 1]")
  if not 0 <= p_min <= 1:
    raise UsageError(f"p_min={p_min} must be in [0, 1]")
  if not _is_int(cap) or cap < 0:
    raise UsageError(f"cap={cap} must be an integer >= 0 (0: automatic)")
  p = np.asarray(base, np.float64)
  if p.ndim != 1 or p.size == 0 or not np.all((p >= 0) & (p <= 1)):
    raise UsageError("base availability probabilities must be a non-empty vector in [0, 1]")
  p = np.maximum(p, p_min)
  if dynamics == "markov":
    arrays, auto_cap, from_arrays = _markov(p, markov_a)
  elif dynamics == "cyclic":
    arrays, auto_cap, from_arrays = _cyclic(p, period)
  else:
    arrays, auto_cap, from_arrays = _factored(
        p, factor_table(dynamics, period, gamma, staircase_low),
        delta0 if dynamics == "interleaved_sine" else None)
  return arrays, min(cap, p.size) if cap else auto_cap, from_arrays


def make_per_run(dynamics: str, bases, **kwargs) -> tuple[dict, int, Callable]:
  """`prepare` for several runs' base probabilities ``bases`` [runs, n]: their arrays
  stacked (run axis first, as float32/int32 host arrays), the largest cap, and
  ``from_arrays(one run's arrays, cap) -> Participation``."""
  prepared = [prepare(dynamics, b, **kwargs) for b in np.asarray(bases, np.float64)]
  stacked = {k: np.stack([np.asarray(jnp.asarray(a[k])) for a, _, _ in prepared])
             for k in prepared[0][0]}
  return stacked, max(c for _, c, _ in prepared), prepared[0][2]


def _cap(peak: np.ndarray) -> int:
  """Cohort bound from each client's probability in the busiest round; exact if all are 0 or 1."""
  if np.all((peak == 0) | (peak == 1)):
    return max(1, int(peak.sum()))
  return participation.cap_for(peak)


def _factored(p: np.ndarray, table: np.ndarray, delta0):
  period = table.size
  f32 = jnp.asarray(table, jnp.float32)
  peak = np.clip(p * table.max(), 0, 1)
  arrays = {"p": jnp.asarray(p, jnp.float32)}
  if delta0 is not None:
    # A client's cut phases are those with the smallest f, so the cut is decided
    # on the host in float64 and kept on device as integers: phase t is kept iff
    # its rank in f's order is at least the client's number of cut phases.
    sorted_f = np.sort(table)
    threshold = np.full(p.size, np.inf)
    np.divide(delta0 * (1 - _CUT_RTOL), p, out=threshold, where=p > 0)
    num_cut = np.searchsorted(sorted_f, threshold, side="left")
    rank = np.empty(period, np.int64)
    rank[np.argsort(table, kind="stable")] = np.arange(period)
    arrays["num_cut"] = jnp.asarray(num_cut, jnp.int32)
    rank_j = jnp.asarray(rank, jnp.int32)
    peak = np.where(num_cut < period, peak, 0.0)

  def from_arrays(arrays, cap):
    p32 = arrays["p"]
    n = p32.shape[0]

    def probs(t):
      phase = jnp.asarray(t) % period
      pt = jnp.clip(p32 * f32[phase], 0.0, 1.0)
      if delta0 is not None:
        pt = jnp.where(rank_j[phase] >= arrays["num_cut"], pt, 0.0)
      return pt

    def sample(key, t):
      return jax.random.uniform(key, (n,)) < probs(t)

    return participation.stateless(n, cap, sample, probs)

  return arrays, _cap(peak), from_arrays


def markov_rates(p: np.ndarray, a: float) -> tuple[np.ndarray, np.ndarray]:
  """IBM/fedau's two-state chain with stationary p: (inactive->active, active->inactive).

  b = a (1/p - 1); where b > 1 both are divided by b. p = 0 gives (0, 1).
  """
  p = np.asarray(p, np.float64)
  to_inactive = np.where(p > 0, a * (1 / np.where(p > 0, p, 1.0) - 1), np.inf)
  to_active = a / np.maximum(to_inactive, 1.0)  # a / inf = 0 for p = 0
  return to_active, np.minimum(to_inactive, 1.0)


def _markov(p: np.ndarray, a: float):
  to_active, to_inactive = markov_rates(p, a)
  arrays = {"up": jnp.asarray(to_active, jnp.float32),
            "down": jnp.asarray(to_inactive, jnp.float32), "p": jnp.asarray(p, jnp.float32)}

  def from_arrays(arrays, cap):
    up, down, p32 = arrays["up"], arrays["down"], arrays["p"]
    n = p32.shape[0]

    def init(key):
      return jax.random.uniform(key, (n,)) < p32  # the stationary distribution

    def step(key, t, active):
      del t
      u = jax.random.uniform(key, (n,))
      active = jnp.where(active, u >= down, u < up)  # transition, then report
      return active, active

    return Participation(n, cap, step, init, lambda t: p32)

  return arrays, _cap(p), from_arrays


def cyclic_lengths(p: np.ndarray, period: int) -> tuple[np.ndarray, np.ndarray]:
  """IBM/fedau's cycle: (active, inactive) rounds, max(1, round(P p)) and max(1, P - active).

  `np.round` rounds halves to even, as fedau does (P p = 2.5 gives 2).
  """
  active = np.maximum(1, np.round(period * np.asarray(p, np.float64))).astype(np.int64)
  return active, np.maximum(1, period - active)


def _cyclic(p: np.ndarray, period: int):
  active, inactive = cyclic_lengths(p, period)
  length = active + inactive
  fraction = active / length
  arrays = {"active": jnp.asarray(active, jnp.int32), "length": jnp.asarray(length, jnp.int32),
            "fraction": jnp.asarray(fraction, jnp.float32)}

  def from_arrays(arrays, cap):
    active_j, length_j, fraction_j = arrays["active"], arrays["length"], arrays["fraction"]
    n = active_j.shape[0]

    def init(key):
      # The phase is uniform over the whole cycle, so the marginal is active/length in
      # every round (fedau starts everyone inactive, which synchronises the clients).
      return jax.random.randint(key, (n,), 0, length_j, jnp.int32)

    def step(key, t, phase):
      del key
      return (jnp.asarray(t, jnp.int32) + phase) % length_j < active_j, phase

    return Participation(n, cap, step, init, lambda t: fraction_j)

  return arrays, participation.cap_for(fraction), from_arrays
