"""Ditto (Li, Hu, Beirami & Smith, ICML 2021), Algorithm 1: a personal model per client
beside the global one.

Each round:
  1. the server samples S_t (the world's participation) and sends w^t;
  2. each k in S_t
       - runs local SGD from w^t on F_k, as FedAvg does, to w_k (the global model's update);
       - runs the same number of SGD steps on its personal model from v_k on
           h_k(v) = F_k(v) + lambda/2 ||v - w^t||^2,
         and keeps the result as its new v_k;
  3. w^{t+1} = w^t + the (weighted) mean of w_k - w^t: FedAvg's step, bit for bit.
Every v_k starts at w^0; a client not sampled keeps its v_k. Evaluation scores each
client's v_k on its own test data (personal_test_accuracy; needs --holdout_fraction or a
dataset with per-client test data) beside the global model's client_test_accuracy.
The personal steps draw their minibatches from their own key purpose ("personal_train"),
so the global model's draws are FedAvg's.
"""

import jax
import jax.numpy as jnp

from fedjax_bench.algorithms import fedavg
from fedjax_bench.core import aggregate, cohort as cohort_lib, keys, local_terms, rounds
from fedjax_bench.core.types import FederatedAlgorithm, with_count
from fedjax_bench.errors import UsageError
from fedjax_bench.settings import NON_NEGATIVE, coerce, section, setting


@section("ditto")
class Hparams(fedavg.Hparams):
  ditto_lambda: float = setting(1.0, "lambda: the pull of each personal model toward the "
                                "global one (0: local training alone; large: the global "
                                "model).", check=NON_NEGATIVE, sweep=True)


def build(task, world, hp: Hparams) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  if task.client_test is None:
    raise UsageError("ditto is scored on each client's own test data: give "
                     "--holdout_fraction (e.g. 0.2)")
  sopt = hp.optimizer()
  n = world.num_clients

  def init(key):  # every personal model v_k = w^0
    server = rounds.init_server(task, world, sopt, key)
    personal = jax.tree.map(lambda a: jnp.broadcast_to(a, (n,) + a.shape), server.params)
    return server, personal

  def round_fn(server, personal, key):
    mask, c, world_state = rounds.observe(world, server, key)
    weights = fedavg.client_weights(task, c.ids, c.valid, hp.weighting)
    total, losses = rounds.train(task, world, hp, server.params, c, key, server.round,
                                 sum_weights=weights)
    v = cohort_lib.gather(personal, c)
    h = local_terms.proximal(task.loss, server.params, hp.ditto_lambda)
    dv, personal_losses = rounds.train(task, world, hp, v, c,
                                       keys.for_purpose(key, "personal_train"), server.round,
                                       per_client_start=True, loss_fn=h)
    personal = cohort_lib.scatter(personal, c, jax.tree.map(jnp.add, v, dv))
    delta = aggregate.mean_of_sum(total, weights)
    server = rounds.apply_update(sopt, server, delta, world_state, skip=~jnp.any(c.valid))
    valid = c.valid.astype(jnp.float32)
    personal_loss = jnp.sum(personal_losses * valid) / jnp.maximum(jnp.sum(valid), 1.0)
    return server, personal, {**rounds.metrics(mask, c, losses),
                              **with_count({"personal_loss": personal_loss}, jnp.sum(valid))}

  return FederatedAlgorithm(init, round_fn, personal_params=lambda server, personal: personal)
