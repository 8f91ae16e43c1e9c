"""FedALIGN's round as the authors' released script (fl-priority/main.py) computes it, where
it departs from the paper (--compat=authors_code, docs/papers/fedalign.md): uniform weights,
Δ̄_P applied several times, free clients starting from w1 (All) or w2 (FedALIGN), g at w1
against s at w2 on one minibatch, the warm-up ending a round early, and no proximal
gradient. For fedalign, fedavg_priority and fedavg_all_clients (not local_model).

  Δ̄_P = the uniform mean of the sampled priority clients' updates from w;  w1 = w + Δ̄_P
  fedavg_priority, and every method while r + 1 < --warmup_rounds:  w ← w + 3 Δ̄_P
  fedavg_all_clients:  every sampled free client trains from w1;  w ← w1 + 2 Ā
  fedalign:            w2 = w1 + Δ̄_P; a sampled free client is admitted if |s_k(w2) − g(w1)|
                       < ε_r and trains from w2;  w ← w2 + Ā
where Ā is the uniform mean of the updates of the priority and the admitted clients.
"""

from typing import Callable

import jax
import jax.numpy as jnp
import optax

from fedjax_bench.algorithms import prioritized
from fedjax_bench.core import aggregate, cohort, rounds
from fedjax_bench.core.rounds import ServerState
from fedjax_bench.sim.world import World
from fedjax_bench.task.task import Task


def build_round(task: Task, world: World, hp, method: str, pfl: prioritized.Protocol,
                scores: Callable, epsilon: Callable, record: bool) -> Callable:
  """The round. ``scores(params, key) -> (g, s [N])`` and ``epsilon(hp, r)`` are FedALIGN's
  (`fedalign.py`)."""
  is_p = task.priority
  sgd = optax.sgd(1.0)
  mean = lambda deltas, w: aggregate.weighted_mean(deltas, w)

  def round_fn(server: ServerState, clients, key):
    w, r = server.params, server.round
    part, _ = prioritized.sample(pfl, key)
    c_p = cohort.from_mask(is_p & part, pfl.k_p)
    d_p, losses = rounds.train(task, world, hp, w, c_p, key, r)
    dbar = mean(d_p, c_p.valid.astype(jnp.float32))
    add = lambda x, delta, times=1.0: jax.tree.map(lambda a, b: a + times * b, x, delta)
    w1, new = add(w, dbar), add(w, dbar, 3.0)
    warm = r + 1 >= hp.warmup_rounds
    admitted = jnp.zeros(task.num_clients, bool)
    diag = {}
    if method in ("fedavg_all_clients", "fedalign"):
      if method == "fedavg_all_clients":
        admitted, start = ~is_p & part, w1
      else:
        start = add(w1, dbar)
        g, _ = scores(w1, key)
        _, s = scores(start, key)
        admitted = ~is_p & part & (jnp.abs(s - g) < epsilon(hp, r))
        diag = {"global_score": g, "epsilon": epsilon(hp, r)}
      c_f = cohort.from_mask(admitted, pfl.k_f)
      d_f, _ = rounds.train(task, world, hp, start, c_f, key, r)
      total = jnp.sum(c_p.valid) + jnp.sum(c_f.valid)
      a = jax.tree.map(lambda x, y: x + y,
                       aggregate.weighted_sum(d_p, c_p.valid.astype(jnp.float32)),
                       aggregate.weighted_sum(d_f, c_f.valid.astype(jnp.float32)))
      a = jax.tree.map(lambda x: x / jnp.maximum(total, 1).astype(x.dtype), a)
      mixed = add(start, a, 2.0 if method == "fedavg_all_clients" else 1.0)
      new = jax.tree.map(lambda x, y: jnp.where(warm, x, y), mixed, new)
      admitted = admitted & warm
    delta = jax.tree.map(jnp.subtract, new, w)
    updates, opt_state = sgd.update(jax.tree.map(jnp.negative, delta), server.opt_state, w)
    server = ServerState(optax.apply_updates(w, updates), opt_state, r + 1, server.world,
                         server.aux)
    return server, clients, {**rounds.metrics(is_p & part, c_p, losses), **diag,
                             **prioritized.inclusion_metrics(task, pfl, admitted, record)}

  return round_fn
