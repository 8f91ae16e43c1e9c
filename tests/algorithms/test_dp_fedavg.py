"""DP-FedAvg (McMahan et al. 2018): a per-client loop transcription of a round (clipping,
noise on the sum, the fixed denominator) under Poisson sampling, its reduction to FedAvg,
and dp_epsilon against dp-accounting called here on its own."""

import jax
import numpy as np
import pytest

from tests.conftest import loop_local_update, run_rounds, toy_setup
from fedjax_bench import api
from fedjax_bench.algorithms import dp_fedavg, fedavg
from fedjax_bench.core import keys
from fedjax_bench.errors import UsageError
from fedjax_bench.sim import participation


def _loop_round(task, world, hp, params, key, t, q):
  """One round written plainly: Python loops over the sampled users and their local
  steps; each update clipped to S by its norm over all leaves; N(0, (zS)^2) on the sum,
  one normal draw per leaf from the round's "dp_noise" key split per leaf (in the
  parameters' flattening order); the sum over qN."""
  mask = np.asarray(world.participation.sample(keys.for_purpose(key, "participation"), t))
  train_key = keys.for_purpose(key, "local_train")
  grad = jax.jit(jax.grad(task.loss))
  total = jax.tree.map(lambda a: np.zeros(a.shape, np.float64), params)
  for i in np.flatnonzero(mask):
    d = loop_local_update(grad, task, world, hp, params, train_key, i)
    norm = np.sqrt(sum(np.sum(np.square(a)) for a in jax.tree.leaves(d)))
    scale = min(1.0, hp["dp_clip"] / norm)
    total = jax.tree.map(lambda s_, a: s_ + scale * a, total, d)
  leaves, treedef = jax.tree.flatten(total)
  noise_keys = jax.random.split(keys.for_purpose(key, "dp_noise"), len(leaves))
  std = hp["dp_noise_multiplier"] * hp["dp_clip"]
  noised = [a + std * np.asarray(jax.random.normal(k, a.shape), np.float64)
            for a, k in zip(leaves, noise_keys)]
  n = world.num_clients
  return jax.tree.map(lambda a, s_: np.asarray(a) + s_ / (q * n), params,
                      jax.tree.unflatten(treedef, noised)), int(mask.sum())


def test_rounds_equal_the_per_client_loop_with_clipping_and_noise():
  q = 0.5
  task, world = toy_setup(num_clients=8, local_steps=3, batch_size=4,
                          part=participation.bernoulli(np.full(8, q), cap=8))
  hp = dict(client_lr=0.3, batch_size=4, local_steps=3, dp_clip=0.05,
            dp_noise_multiplier=0.7)
  alg = dp_fedavg.build(task, world, hp)
  server, clients = alg.init(jax.random.PRNGKey(0))
  round_fn = jax.jit(alg.round)
  params, sizes = server.params, []
  for t in range(3):
    key = jax.random.PRNGKey(20 + t)
    expected, size = _loop_round(task, world, hp, params, key, t, q)
    server, clients, m = round_fn(server, clients, key)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                 server.params, expected)
    assert float(m["num_active"]) == size
    params = server.params
    sizes.append(size)
  assert min(sizes) > 0 and max(sizes) < 8  # Poisson sampling, not everyone


def test_without_clipping_and_noise_it_is_fedavg_bit_for_bit():
  task, world = toy_setup(num_clients=8, cohort=3, local_steps=4, batch_size=4)
  hp = dict(client_lr=0.3, batch_size=4, local_steps=4)
  dp = dp_fedavg.build(task, world, {**hp, "dp_clip": float("inf"), "dp_noise_multiplier": 0.0})
  runs = [run_rounds(a, first_key=5)[0].params for a in (dp, fedavg.build(task, world, hp))]
  jax.tree.map(np.testing.assert_array_equal, *runs)


def test_clipping_bounds_each_update():
  task, world = toy_setup(num_clients=6, cohort=6, local_steps=3, batch_size=4,
                          part=participation.full(6))
  hp = dict(client_lr=0.5, batch_size=4, local_steps=3, dp_noise_multiplier=0.0)
  start = run_rounds(fedavg.build(task, world, hp), rounds=0)[0].params
  moved = run_rounds(dp_fedavg.build(task, world, {**hp, "dp_clip": 1e-3}), rounds=1)[0].params
  step = np.sqrt(sum(np.sum(np.square(np.asarray(a) - np.asarray(b)))
                     for a, b in zip(jax.tree.leaves(moved), jax.tree.leaves(start))))
  assert 0 < step <= 1e-3 * (1 + 1e-5)  # the mean of six updates of norm <= S


@pytest.mark.parametrize("participation_flags,event", [
    (dict(participation="bernoulli", participation_prob=0.2), "poisson"),
    (dict(participation="uniform", clients_per_round=3), "without_replacement"),
])
def test_dp_epsilon_is_what_dp_accounting_gives(participation_flags, event):
  import dp_accounting as dpa
  from dp_accounting.rdp import RdpAccountant
  z, delta, n = 1.1, 1e-4, 12
  r = api.run(algo="dp_fedavg", dataset="synthetic", num_clients=n, rounds=6, eval_every=3,
              seeds=[0, 1], progress=False, dp_noise_multiplier=z, dp_delta=delta, host_devices=1,
              **participation_flags)
  got = np.asarray(r.curves["dp_epsilon"])
  gaussian = dpa.GaussianDpEvent(z)
  if event == "poisson":
    one, relation = dpa.PoissonSampledDpEvent(0.2, gaussian), dpa.NeighboringRelation.ADD_OR_REMOVE_ONE
  else:
    one, relation = (dpa.SampledWithoutReplacementDpEvent(n, 3, gaussian),
                     dpa.NeighboringRelation.REPLACE_ONE)
  want = [0.0]
  for t in (3, 6):
    acc = RdpAccountant(neighboring_relation=relation)
    acc.compose(one, t)
    want.append(acc.get_epsilon(delta))
  np.testing.assert_allclose(got.reshape(3, -1), np.repeat(np.array(want)[:, None], 2, 1),
                             rtol=1e-12)
  assert 0 < want[1] < want[2] < np.inf


def test_bad_settings_fail_in_one_line():
  task, world = toy_setup(num_clients=4, cohort=2)
  with pytest.raises(UsageError, match="--dp_clip=inf bounds nothing"):
    dp_fedavg.build(task, world, dict(dp_clip=float("inf"), dp_noise_multiplier=1.0))
  with pytest.raises(UsageError, match="accounted for --participation sampling, not "
                                       "--availability=sine"):
    api.run(algo="dp_fedavg", dataset="synthetic", num_clients=8, rounds=1, progress=False,
            availability="sine", host_devices=1)
