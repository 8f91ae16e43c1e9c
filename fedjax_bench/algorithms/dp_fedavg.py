"""DP-FedAvg (McMahan, Ramage, Talwar & Zhang, ICLR 2018), user-level differential privacy.

Each round (Algorithm 1 with the fixed-denominator estimator f~_f, uniform weights):
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
"""

import math

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_bench.algorithms import privacy as privacy_lib
from fedjax_bench.core import aggregate, keys, rounds
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.errors import UsageError
from fedjax_bench.settings import NON_NEGATIVE, POSITIVE, Check, coerce, section, setting

DELTA = Check(lambda v: 0 < v < 1, "must be in (0, 1)")


@section("dp_fedavg")
class Hparams(rounds.Synchronous):
  dp_clip: float = setting(1.0, "S: each client's update is clipped to this L2 norm (inf: no "
                           "clipping).", check=POSITIVE, sweep=True, allow_inf=True)
  dp_noise_multiplier: float = setting(1.0, "z: the Gaussian noise on the sum of the clipped "
                                       "updates has standard deviation z S (0: none).",
                                       check=NON_NEGATIVE, sweep=True)
  dp_delta: float = setting(1e-5, "delta of the (epsilon, delta) reported as dp_epsilon "
                            "(below 1/num_clients).", check=DELTA)


def expected_cohort(world) -> float:
  """E|C_t|: the sum of the participation's per-client probabilities (in float64, rounded
  to 6 decimals: m of N gives m itself, as FedAvg's count of a full cohort)."""
  with jax.ensure_compile_time_eval():  # build runs while the engine traces
    probs = np.asarray(world.participation.probs(jnp.zeros((), jnp.int32)), np.float64)
  return round(float(np.sum(probs)), 6)


def build(task, world, hp: Hparams) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  sopt = hp.optimizer()
  if world.participation.probs is None:
    raise UsageError("dp_fedavg needs a participation scheme with known probabilities "
                     "(--participation=bernoulli, uniform or full)")
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
    leaves, treedef = jax.tree.flatten(total)
    noise_keys = jax.random.split(keys.for_purpose(key, "dp_noise"), len(leaves))
    noised = jax.tree.unflatten(treedef, [
        a + (std * jax.random.normal(k, a.shape)).astype(a.dtype)
        for a, k in zip(leaves, noise_keys)])
    delta = aggregate.divided(noised, denominator)
    server = rounds.apply_update(sopt, server, delta, world_state, skip=jnp.asarray(False))
    return server, clients, rounds.metrics(mask, c, losses)

  return FederatedAlgorithm(lambda key: (rounds.init_server(task, world, sopt, key), ()),
                            round_fn)


def privacy(hp: Hparams, world_settings, num_clients: int, rounds_done):
  """[E] ε at dp_delta after each of ``rounds_done``, for the run's sampling."""
  hp = coerce(Hparams, hp)
  if world_settings.availability != "off":
    raise UsageError("dp_fedavg's privacy is accounted for --participation sampling, not "
                     f"--availability={world_settings.availability}")
  event, relation = privacy_lib.round_event(
      world_settings.participation, num_clients, float(hp.dp_noise_multiplier),
      prob=world_settings.participation_prob, clients_per_round=world_settings.clients_per_round)
  return privacy_lib.epsilon(event, relation, rounds_done, hp.dp_delta)
