"""Participation masks, cohort slabs, and cost that follows the active clients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import toy_setup
from fedjax_bench.algorithms import fedavg
from fedjax_bench.core import cohort
from fedjax_bench.errors import UsageError
from fedjax_bench.sim import participation


def _masks(part, draws=2000):
  keys = jax.random.split(jax.random.PRNGKey(0), draws)
  return np.asarray(jax.jit(jax.vmap(lambda k: part.sample(k, 0)))(keys))


def test_uniform_picks_exactly_m_clients_uniformly():
  masks = _masks(participation.uniform(20, 5))
  assert np.all(masks.sum(1) == 5)
  freq = masks.mean(0)
  assert np.all(np.abs(freq - 0.25) < 4 * np.sqrt(0.25 * 0.75 / 2000))


def test_full_and_bernoulli_with_per_client_probabilities():
  assert _masks(participation.full(7), draws=3).all()
  probs = np.linspace(0.05, 0.95, 10)
  part = participation.bernoulli(probs)
  freq = _masks(part, draws=4000).mean(0)
  assert np.all(np.abs(freq - probs) < 4 * np.sqrt(probs * (1 - probs) / 4000))
  assert part.cap == 10
  big = participation.bernoulli(np.full(10_000, 0.01))
  assert 100 < big.cap < 200  # mean 100 plus 7 standard deviations


def test_bad_participation_is_a_usage_error():
  with pytest.raises(UsageError, match="clients_per_round"):
    participation.uniform(5, 6)
  with pytest.raises(UsageError, match="valid: uniform, full, bernoulli"):
    participation.make("sometimes", 5)


def test_cohort_slab_roundtrip_does_not_clobber_client_zero():
  mask = jnp.array([True, False, False, True, False])
  c = cohort.from_mask(mask, cap=3)
  assert c.ids.tolist()[:2] == [0, 3] and c.valid.tolist() == [True, True, False]
  population = jnp.arange(5.0)
  rows = cohort.gather(population, c) + 100.0  # padding row gathers client 0 too
  out = cohort.scatter(population, c, rows)
  assert out.tolist() == [100.0, 1.0, 2.0, 103.0, 4.0]


def _round_flops(num_clients, active):
  task, world = toy_setup(num_clients=num_clients, cohort=active, sizes=[8] * num_clients,
                          model="mlp", dim=100, hidden=100, batch_size=8)
  # width 0 (vmap): XLA counts a loop body once, so flops would hide the cohort size.
  alg = fedavg.build(task, world, dict(client_lr=0.1, batch_size=8, client_width=0))
  server, clients = alg.init(jax.random.PRNGKey(0))
  compiled = jax.jit(alg.round).lower(server, clients, jax.random.PRNGKey(0)).compile()
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return cost["flops"]


def test_round_cost_follows_the_cohort_not_the_population():
  small, large = _round_flops(10, 10), _round_flops(1000, 10)
  # Sampling 10 of 1000 touches a [1000] mask; the training is the same 10 clients.
  assert large < 1.5 * small, (small, large)
  assert _round_flops(1000, 100) > 5 * small  # and flops do grow with the cohort
