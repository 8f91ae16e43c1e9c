"""DP-FedAvg (McMahan, Ramage, Talwar & Zhang, ICLR 2018), user-level differential privacy,
and DP-FedAvg with adaptive clipping (Andrew, Thakkar, McMahan & Ramaswamy, NeurIPS 2021).

`dp_fedavg`, each round (Algorithm 1 of McMahan et al. with the fixed-denominator estimator
f~_f, uniform weights):
  1. sample the users C_t (--participation: bernoulli is the paper's Poisson sampling
     with probability q; uniform takes m of N without replacement; full takes all);
  2. every k in C_t runs local SGD from theta_t; its update is clipped to L2 norm S:
       Delta_k = (theta_k - theta_t) min(1, S / ||theta_k - theta_t||);
  3. Delta = (sum_k Delta_k + N(0, (z S)^2 I)) / E|C_t|, E|C_t| = qN, m or N:
     the noise is added to the sum, and the denominator does not depend on who took part;
  4. theta_{t+1} = server_opt(theta_t, pseudo-gradient -Delta) (sgd at lr 1: theta_t + Delta),
     also in a round that sampled nobody (the noise is released all the same).
The privacy spent, ε at --dp_delta after each evaluated round, is the metric dp_epsilon,
from dp-accounting's RDP accountant (`algorithms/privacy.py`). The paper clips the model after
every local step (a projection onto the ball of radius S around theta_t); like TFF and
most later work, this clips the final update once, which bounds the same sensitivity.
With S = inf and z = 0 under --participation=uniform it is FedAvg, bit for bit.

`dp_fedavg_adaptive` (Andrew et al. 2021, Algorithm 1): the clip C^t follows the gamma-quantile
of the update norms (gamma = --dp_target_quantile, eta_C = --dp_clip_lr, sigma_b =
--dp_clip_count_stddev, C^0 = --dp_clip, z = --dp_noise_multiplier), with m = E|C_t|:
  0. z_Delta = (z^-2 - (2 sigma_b)^-2)^-1/2 (needs z < 2 sigma_b; z = 0: z_Delta = 0);
  1. as above;
  2. each k in C_t clips its update to C^t, as above with S = C^t, and reports
     b_k = 1 if ||theta_k - theta_t|| <= C^t, else 0;
  3. Delta = (sum_k Delta_k + N(0, (z_Delta C^t)^2 I)) / m;
     b = (sum_k (b_k - 1/2) + N(0, sigma_b^2)) / m + 1/2, the noisy unclipped fraction;
  4. theta_{t+1} as above; C^{t+1} = C^t exp(-eta_C (b - gamma)).
The count is centred (b_k - 1/2, sensitivity 1/2: the 2 sigma_b of step 0), as the authors'
TF Privacy `QuantileEstimatorQuery` does; when |C_t| = m (uniform or full participation) it
is Algorithm 1's b = (sum_k b_k + N(0, sigma_b^2)) / m itself, and under Poisson sampling it
keeps the count's sensitivity 1/2 that the accounting assumes. The update noise and the
count noise together are one Gaussian mechanism of noise multiplier z (z^-2 = z_Delta^-2 +
(2 sigma_b)^-2, the paper's privacy analysis), so ε is accounted as for `dp_fedavg` with z.
b is not clamped to [0, 1] (Algorithm 1 does not; TF Privacy does). The metrics dp_clip
and dp_unclipped_fraction are each round's C^t and b. With eta_C = 0 it is `dp_fedavg`
with S = C^0 and noise multiplier z_Delta, bit for bit (the update noise is the same draw).
"""

import math
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_bench.algorithms import privacy as privacy_lib
from fedjax_bench.core import aggregate, keys, rounds
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.errors import UsageError
from fedjax_bench.settings import (NON_NEGATIVE, POSITIVE, PROBABILITY, Check, coerce, section,
                                   setting)

DELTA = Check(lambda v: 0 < v < 1, "must be in (0, 1)")
AUTO = -1.0  # --dp_clip_count_stddev: the paper's expected cohort / 20


@section("dp_fedavg")
class Hparams(rounds.Synchronous):
  dp_clip: float = setting(1.0, "S: each client's update is clipped to this L2 norm (inf: no "
                           "clipping; dp_fedavg_adaptive: the initial clip C^0).",
                           check=POSITIVE, sweep=True, allow_inf=True)
  dp_noise_multiplier: float = setting(1.0, "z: the Gaussian noise on the sum of the clipped "
                                       "updates has standard deviation z S (0: none; "
                                       "dp_fedavg_adaptive: the noise multiplier of the "
                                       "updates and the count together).",
                                       check=NON_NEGATIVE, sweep=True)
  dp_delta: float = setting(1e-5, "delta of the (epsilon, delta) reported as dp_epsilon "
                            "(below 1/num_clients).", check=DELTA)


@section("dp_fedavg_adaptive")
class AdaptiveHparams(Hparams):
  # Its own default: z < 2 sigma_b = 1 for the default cohort of 10 (sigma_b = 10 / 20).
  dp_noise_multiplier: float = setting(0.5, "z: the noise multiplier of the updates and the "
                                       "count together (0: none).", check=NON_NEGATIVE,
                                       sweep=True)
  dp_target_quantile: float = setting(0.5, "gamma: the clip tracks this quantile of the "
                                      "update norms (the fraction of updates left "
                                      "unclipped).", check=PROBABILITY, sweep=True)
  dp_clip_lr: float = setting(0.2, "eta_C: the clip's geometric step, C <- C exp(-eta_C (b - "
                              "gamma)) with b the noisy unclipped fraction (0: a fixed "
                              "clip).", check=NON_NEGATIVE, sweep=True)
  dp_clip_count_stddev: float = setting(
      AUTO, "sigma_b: the standard deviation of the Gaussian noise on the count of unclipped "
      "updates; must exceed z/2 (-1: the expected cohort / 20, the paper's choice).",
      check=Check(lambda v: v == AUTO or v >= 0, "must be >= 0, or -1 (the expected cohort "
                  "/ 20)"), sweep=True)


def expected_cohort(world) -> float:
  """E|C_t|: the sum of the participation's per-client probabilities (in float64, rounded
  to 6 decimals: m of N gives m itself, as FedAvg's count of a full cohort)."""
  with jax.ensure_compile_time_eval():  # build runs while the engine traces
    probs = np.asarray(world.participation.probs(jnp.zeros((), jnp.int32)), np.float64)
  return round(float(np.sum(probs)), 6)


def _check_participation(world, algo: str) -> None:
  if world.participation.probs is None:
    raise UsageError(f"{algo} needs a participation scheme with known probabilities "
                     "(--participation=bernoulli, uniform or full)")


def _noised(total, std, key):
  """``total`` + N(0, std^2 I): one normal draw per leaf from the round's "dp_noise" key
  split per leaf (in the parameters' flattening order)."""
  leaves, treedef = jax.tree.flatten(total)
  noise_keys = jax.random.split(keys.for_purpose(key, "dp_noise"), len(leaves))
  return jax.tree.unflatten(treedef, [
      a + (std * jax.random.normal(k, a.shape)).astype(a.dtype)
      for a, k in zip(leaves, noise_keys)])


def build(task, world, hp: Hparams) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  sopt = hp.optimizer()
  _check_participation(world, "dp_fedavg")
  clip, z = hp.dp_clip, hp.dp_noise_multiplier
  if isinstance(clip, float) and math.isinf(clip) and not (isinstance(z, float) and z == 0):
    raise UsageError("--dp_clip=inf bounds nothing: noise needs a finite clip, or set "
                     "--dp_noise_multiplier=0")
  denominator = expected_cohort(world)

  def clipped(i, delta):
    del i
    return aggregate.clip_by_global_norm(delta, clip)

  def round_fn(server, clients, key):
    mask, c, world_state = rounds.observe(world, server, key)
    total, losses = rounds.train(task, world, hp, server.params, c, key, server.round,
                                 sum_weights=c.valid.astype(jnp.float32), transform=clipped)
    std = jnp.where(z > 0, z * clip, 0.0)
    delta = aggregate.divided(_noised(total, std, key), denominator)
    server = rounds.apply_update(sopt, server, delta, world_state, skip=jnp.asarray(False))
    return server, clients, rounds.metrics(mask, c, losses)

  return FederatedAlgorithm(lambda key: (rounds.init_server(task, world, sopt, key), ()),
                            round_fn)


def count_stddev(value, expected: float):
  """sigma_b: ``value``, or at -1 the expected cohort / 20 (Andrew et al. 2021's choice)."""
  if isinstance(value, (int, float)):
    return expected / 20 if value == AUTO else float(value)
  return jnp.where(value == AUTO, expected / 20, value)


def update_noise_multiplier(z, sigma_b):
  """z_Delta = (z^-2 - (2 sigma_b)^-2)^-1/2 (Andrew et al. 2021, Algorithm 1), float32: the
  updates' noise multiplier that leaves the round, updates and count together, a Gaussian
  mechanism of noise multiplier z; 0 at z = 0, NaN unless z < 2 sigma_b."""
  with jax.ensure_compile_time_eval():  # concrete settings: one value, traced or not
    z = jnp.asarray(z, jnp.float32)
    sigma_b = jnp.asarray(sigma_b, jnp.float32)
    safe = jnp.where(z > 0, z, 1.0)
    return jnp.where(z > 0, (safe ** -2 - (2 * sigma_b) ** -2) ** -0.5, 0.0)


def build_adaptive(task, world, hp: AdaptiveHparams) -> FederatedAlgorithm:
  hp = coerce(AdaptiveHparams, hp)
  sopt = hp.optimizer()
  _check_participation(world, "dp_fedavg_adaptive")
  c0, z = hp.dp_clip, hp.dp_noise_multiplier
  gamma, lr = hp.dp_target_quantile, hp.dp_clip_lr
  if isinstance(c0, float) and math.isinf(c0):
    raise UsageError("--dp_clip=inf: dp_fedavg_adaptive's initial clip C^0 must be finite "
                     "(the clip adapts from it)")
  m = expected_cohort(world)
  sigma_b = count_stddev(hp.dp_clip_count_stddev, m)
  if isinstance(z, float) and isinstance(sigma_b, float) and z > 0 and not z < 2 * sigma_b:
    raise UsageError(f"--dp_noise_multiplier={z:g} needs --dp_clip_count_stddev above z/2 = "
                     f"{z / 2:g} (sigma_b is {sigma_b:g}; the count's noise takes (2 sigma_b)^-2 "
                     "of z^-2): lower z or raise --dp_clip_count_stddev")
  z_delta = update_noise_multiplier(z, sigma_b)

  def init(key):
    return rounds.init_server(task, world, sopt, key, aux=jnp.asarray(c0, jnp.float32)), ()

  def round_fn(server, clients, key):
    clip = server.aux  # C^t
    mask, c, world_state = rounds.observe(world, server, key)
    total, losses, norms = rounds.train(
        task, world, hp, server.params, c, key, server.round,
        sum_weights=c.valid.astype(jnp.float32),
        transform=lambda i, d: aggregate.clip_by_global_norm(d, clip),
        keep=lambda i, d: optax.tree.norm(d))
    delta = aggregate.divided(_noised(total, z_delta * clip, key), m)
    centred = jnp.sum(jnp.where(c.valid, (norms <= clip).astype(jnp.float32) - 0.5, 0.0))
    noise = sigma_b * jax.random.normal(keys.for_purpose(key, "dp_count_noise"), ())
    unclipped = (centred + noise) / m + 0.5
    new_clip = clip * jnp.exp(-lr * (unclipped - gamma))
    server = rounds.apply_update(sopt, server, delta, world_state, skip=jnp.asarray(False),
                                 aux=new_clip)
    return server, clients, {**rounds.metrics(mask, c, losses), "dp_clip": clip,
                             "dp_unclipped_fraction": unclipped}

  return FederatedAlgorithm(init, round_fn)


def privacy(hp: Hparams, world_settings, num_clients: int, rounds_done):
  """[E] ε at dp_delta after each of ``rounds_done``, for the run's sampling: the Gaussian
  mechanism of noise multiplier z, sampled (with adaptive clipping, z covers the update
  noise and the count noise together, as Andrew et al. 2021 account it)."""
  hp = coerce(Hparams, hp)
  if world_settings.availability != "off":
    raise UsageError("DP-FedAvg's privacy is accounted for --participation sampling, not "
                     f"--availability={world_settings.availability}")
  event, relation = privacy_lib.round_event(
      world_settings.participation, num_clients, float(hp.dp_noise_multiplier),
      prob=world_settings.participation_prob, clients_per_round=world_settings.clients_per_round)
  return privacy_lib.epsilon(event, relation, rounds_done, hp.dp_delta)


# The registered `dp_fedavg_adaptive`: its settings, its build and the same accounting.
adaptive = types.SimpleNamespace(Hparams=AdaptiveHparams, build=build_adaptive, privacy=privacy)
