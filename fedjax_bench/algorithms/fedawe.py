"""FedAWE (Xiang et al., NeurIPS 2024), Algorithm 1.

Adaptive innovation echoing with implicit gossiping. Client i keeps its own model x_i
and c_i = t - tau_i(t), the rounds since it last took part (1 at the start).

  for i in A_t (in parallel):
      x_i^{t,s} = LocalSGD(x_i)                   from its OWN stored model
      x_i^{t+}  = x_i + eta_g * c_i * (x_i^{t,s} - x_i)        echo
  x_{t+1} = (1/|A_t|) sum_{i in A_t} x_i^{t+}
          = mean_A x_i + eta_g * clip( mean_A c_i (x_i^{t,s} - x_i) )   (the code's form)
  x_i = x_{t+1}, c_i = 1 for i in A_t;   c_i += 1 for the others, who keep their x_i
  (nobody available: nothing changes but the counters)

`fedawe_clip` > 0 clips the averaged echo to that global L2 norm (the authors' code
uses 0.5; 0 is Algorithm 1 as written). FedAWE is evaluated at the mean of ALL local
models, x_bar = (1/m) sum_i x_i, as the theory and the code do (`fedawe_eval`
"mean_local"; "server" scores x_{t+1}, which is biased toward frequent clients).

Extra state over FedAvg: c_i, one int per client. The simulation stores all m local
models ([m, d]); in a deployment each lives on its client.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from fedjax_bench.core import aggregate, cohort as cohort_lib, rounds
from fedjax_bench.core.types import FederatedAlgorithm, with_count
from fedjax_bench.errors import UsageError
from fedjax_bench.settings import NON_NEGATIVE, coerce, section, setting

EVALS = ("mean_local", "server")


@section("fedawe")
class Hparams(rounds.Synchronous):
  fedawe_clip: float = setting(0.5, "Clip the averaged echoed update to this L2 norm (0.5 as "
                               "the authors' code; 0: Algorithm 1 as written).",
                               check=NON_NEGATIVE, sweep=True)
  fedawe_eval: str = setting("mean_local", "Score the mean of all clients' models (the paper's "
                             "code and theory) or the server model.", choices=EVALS)


class Clients(NamedTuple):
  params: Any           # [m, ...] x_i
  since_last: jax.Array  # [m] int32 c_i = t - tau_i(t)


def build(task, world, hp: Hparams) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  if hp.server_opt != "sgd":
    raise UsageError("fedawe averages echoed models; it takes --server_lr (eta_g) but not "
                     f"--server_opt={hp.server_opt}; valid: sgd")
  sopt = hp.optimizer()
  m = world.num_clients
  eta_g = hp.server_lr
  clip = hp.fedawe_clip
  evaluate = hp.fedawe_eval

  def init(key):
    server = rounds.init_server(task, world, sopt, key)
    local = jax.tree.map(lambda a: jnp.broadcast_to(a, (m,) + a.shape), server.params)
    return server, Clients(local, jnp.ones(m, jnp.int32))

  def round_fn(server, clients: Clients, key):
    mask, c, world_state = rounds.observe(world, server, key)
    start = cohort_lib.gather(clients.params, c)
    deltas, losses = rounds.train(task, world, hp, start, c, key, server.round,
                                  per_client_start=True)
    echo = cohort_lib.gather(clients.since_last, c).astype(jnp.float32)
    num_active = jnp.maximum(jnp.sum(c.valid), 1)
    echo = jnp.where(c.valid, echo, 0.0)
    step = aggregate.scaled_sum(deltas, echo, num_active)
    # A jnp.where, not a Python if: a grid sweeps the clip as a traced value.
    clipped = aggregate.clip_by_global_norm(step, clip)
    step = jax.tree.map(lambda a, b: jnp.where(clip > 0, a, b), clipped, step)
    new = jax.tree.map(lambda a, s: a + eta_g * s, aggregate.weighted_mean(start, c.valid), step)
    anyone = jnp.any(c.valid)
    params = jax.tree.map(lambda n, o: jnp.where(anyone, n, o), new, server.params)
    broadcast = jax.tree.map(lambda a: jnp.broadcast_to(a, (c.ids.shape[0],) + a.shape), params)
    active = cohort_lib.members(clients.since_last, c)
    clients = Clients(cohort_lib.scatter(clients.params, c, broadcast),
                      jnp.where(active, 1, clients.since_last + 1))
    server = server._replace(params=params, round=server.round + 1, world=world_state)
    return server, clients, {**rounds.metrics(mask, c, losses),
                             **with_count({"mean_echo": jnp.sum(echo) / num_active},
                                          jnp.sum(c.valid))}

  def eval_params(server, clients: Clients):
    if evaluate == "server":
      return server.params
    return cohort_lib.population_mean(clients.params)

  return FederatedAlgorithm(init, round_fn, eval_params)
