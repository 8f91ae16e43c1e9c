"""--participation=proportional: m distinct clients a round, drawn one after another without
replacement, each draw in proportion to the clients' training sizes (the q-FFL and FedProx
papers' cohort, their code's ``np.random.choice(N, m, replace=False, p=n_k / n)``)."""

import itertools

import jax
import numpy as np
import pytest

from tests.conftest import one_line, toy_dataset
from fedjax_bench import api, experiment
from fedjax_bench import config as config_lib
from fedjax_bench.algorithms import privacy
from fedjax_bench.errors import UsageError
from fedjax_bench.sim import participation
from fedjax_bench.sim.settings import WorldSettings

DRAWS = 20_000
SMALL = dict(dataset="synthetic", num_clients=10, clients_per_round=4, rounds=4, eval_every=2,
             local_steps=3, batch_size=8, seeds=[0], progress=False, host_devices=1,
             participation="proportional")


def _masks(part, draws=DRAWS, seed=0):
  keys = jax.random.split(jax.random.PRNGKey(seed), draws)
  return np.asarray(jax.jit(jax.vmap(lambda k: part.sample(k, 0)))(keys))


def _successive_sampling(sizes, m):
  """{subset: probability} of m ordered draws without replacement, each in proportion to
  the sizes of the clients not yet drawn, by enumerating every ordered draw."""
  p = np.asarray(sizes, np.float64) / np.sum(sizes)
  out = {}
  for seq in itertools.permutations(range(len(p)), m):
    prob, left = 1.0, 1.0
    for k in seq:
      if left <= 0:
        prob = 0.0
        break
      prob *= p[k] / left
      left -= p[k]
    key = tuple(sorted(seq))
    out[key] = out.get(key, 0.0) + prob
  return out


def _inclusion(subsets, n):
  inc = np.zeros(n)
  for s, prob in subsets.items():
    inc[list(s)] += prob
  return inc


def _tolerance(p, draws=DRAWS):
  """5 binomial standard errors of a frequency of ``draws`` trials: a correct sampler fails
  one such check with probability below 6e-7 (normal approximation)."""
  return 5 * np.sqrt(p * (1 - p) / draws)


def test_every_round_draws_m_distinct_clients_with_data():
  sizes = np.array([0, 5, 0, 1, 3, 10, 0, 2, 7, 4])
  for m in (1, 3, 7):
    part = participation.proportional(sizes, m)
    assert part.cap == m and part.num_clients == 10 and part.probs is None
    masks = _masks(part, draws=2000)
    assert np.all(masks.sum(1) == m)  # a mask holds each client once: m distinct
    assert not masks[:, sizes == 0].any()
  # as many clients as have data: exactly those, every round
  masks = _masks(participation.proportional(sizes, 7), draws=200)
  assert np.all(masks == (sizes > 0))


def test_inclusion_and_subset_frequencies_match_successive_weighted_sampling():
  sizes, m = [1, 2, 3, 4], 2
  golden = _successive_sampling(sizes, m)
  inc = _inclusion(golden, 4)
  np.testing.assert_allclose(inc, [0.234524, 0.441270, 0.608333, 0.715873], atol=1e-6)
  assert abs(inc.sum() - m) < 1e-12
  # the check can tell this draw from the nearest wrong ones: a sampler with inclusion
  # m n_k / n (client 3: 0.8 against 0.716) or uniform m / n fails it on some client
  tol = _tolerance(inc)
  p = np.asarray(sizes) / np.sum(sizes)
  assert np.max(np.abs(inc - m * p) / tol) > 2 and np.min(np.abs(inc - m / 4) / tol) > 2
  masks = _masks(participation.proportional(sizes, m))
  freq = masks.mean(0)
  assert np.all(np.abs(freq - inc) < tol), (freq, inc, tol)
  # the joint law: each of the 6 pairs as often as successive sampling draws it
  for pair, prob in golden.items():
    got = np.mean(masks[:, list(pair)].all(1))
    assert abs(got - prob) < _tolerance(prob), (pair, got, prob)


def test_a_client_with_no_data_drops_out_of_the_law():
  """sizes [0, 1, 2, 5], m = 2: the golden law of [1, 2, 5] on clients 1..3."""
  sizes, m = [0, 1, 2, 5], 2
  inc = _inclusion(_successive_sampling(sizes, m), 4)
  assert inc[0] == 0
  freq = _masks(participation.proportional(sizes, m), seed=1).mean(0)
  assert freq[0] == 0
  assert np.all(np.abs(freq - inc) < _tolerance(inc) + 1e-12), (freq, inc)


def test_everyone_at_m_equal_n_and_uniform_inclusion_at_equal_sizes():
  assert _masks(participation.proportional([3, 1, 4, 1, 5], 5), draws=50).all()
  n, m = 10, 3
  masks = _masks(participation.proportional(np.full(n, 7), m), seed=2)
  assert np.all(masks.sum(1) == m)
  rate = m / n
  assert np.all(np.abs(masks.mean(0) - rate) < _tolerance(rate))


def test_refusals_are_one_line_usage_errors():
  with pytest.raises(UsageError) as e:
    participation.make("proportional", 4, clients_per_round=2)
  assert "sizes" in one_line(e)
  with pytest.raises(UsageError) as e:
    participation.make("proportional", 4, clients_per_round=2, sizes=[1, 2, 3])
  assert "sizes" in one_line(e)
  with pytest.raises(UsageError) as e:
    participation.proportional([0, 0, 3, 0], 2)
  assert "exceeds the 1 clients with training examples" in one_line(e)
  for m in (0, 5):
    with pytest.raises(UsageError) as e:
      participation.proportional([1, 2, 3, 4], m)
    assert "clients_per_round" in one_line(e)
  for bad in ([], [1, -1, 2], [[1, 2]], [1, np.nan]):
    with pytest.raises(UsageError) as e:
      participation.proportional(bad, 1)
    one_line(e)
  assert participation.make("proportional", 3, clients_per_round=2,
                            sizes=np.array([1, 2, 3])).cap == 2
  with pytest.raises(UsageError) as e:
    config_lib.resolve(algo="fedavg", participation="proportional", num_clients=5,
                       clients_per_round=6)
  assert "--clients_per_round=6 must not exceed --num_clients=5" in one_line(e)
  with pytest.raises(UsageError) as e:
    config_lib.resolve(algo="fedavg", participation="proportional", data_per_seed=True)
  assert "--data_per_seed" in one_line(e)


def test_oracles_and_privacy_accounting_refuse_proportional():
  """No closed-form inclusion probabilities: probs is None, and what needs them says so."""
  with pytest.raises(UsageError) as e:
    api.run(algo="fedavg_known", **SMALL)
  assert "no known probabilities" in one_line(e)
  with pytest.raises(UsageError) as e:
    api.run(algo="dp_fedavg", **SMALL)
  assert "known probabilities" in one_line(e)
  with pytest.raises(UsageError) as e:
    privacy.round_event("proportional", 10, 1.0, clients_per_round=4)
  assert "not 'proportional'" in one_line(e)


def test_the_experiment_draws_by_the_clients_training_sizes():
  sizes = [0, 3, 9, 0, 1, 6]
  world = WorldSettings(participation="proportional", clients_per_round=4)
  part = experiment.make_participation(world, toy_dataset(sizes=sizes), 0)
  masks = _masks(part, draws=200)
  assert np.all(masks == (np.asarray(sizes) > 0))  # the 4 clients with data, every round
  world = WorldSettings(participation="proportional", clients_per_round=5)
  with pytest.raises(UsageError, match="exceeds the 4 clients with training examples"):
    experiment.make_participation(world, toy_dataset(sizes=sizes), 0)


def test_qfedavg_runs_end_to_end_with_proportional_cohorts():
  result = api.run(algo="qfedavg", **SMALL)
  assert result.summary["config"]["flags"]["participation"] == "proportional"
  for name in ("train_loss", "test_accuracy"):
    curve = np.asarray(result.curves[name])
    assert curve.size and np.all(np.isfinite(curve)), name
