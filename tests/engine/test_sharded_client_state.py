"""Client states sharded over the mesh's "clients" axis: 1 device equals 4, a resumed
sharded run equals an uninterrupted one, each device holds ceil(N / d) rows, and the
memory check counts one device's rows."""

from pathlib import Path

import jax
import numpy as np
import pytest

from tests.conftest import device_probe, toy_setup
from fedjax_bench.algorithms import mifa
from fedjax_bench.core import device_memory

PROBE = Path(__file__).parents[1] / "scripts" / "client_state_probe.py"
ALGOS = ("mifa,fedvarp,fedawe,fedau,f3ast,fedef_sgd,area,fedbuff,mifa_async,scaffold,feddyn,"
         "ditto,apfl,pfedme")
RESUMED = "mifa,fedawe,fedef_sgd,area"  # sharded evenly, padded, both kinds of round


@pytest.fixture(scope="module")
def probes(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("client_state")
  return (device_probe(PROBE, tmp / "one.npz", 1, ALGOS),
          device_probe(PROBE, tmp / "four.npz", 4, ALGOS, RESUMED, timeout=600))


@pytest.mark.parametrize("name", ALGOS.split(","))
def test_one_device_equals_four_with_sharded_client_state(probes, name):
  # Float rounding only: psums of per-device partial sums (FedAWE's mean of all local
  # models, FedAU's mean weight, the cohort's sums dealt over devices) add in another order.
  # rtol as test_engine's 1-vs-4 tests; atol at 1e-6 of the array's largest magnitude, since
  # an element that cancels to near zero keeps the rounding of its terms (0.6 float32 eps of
  # the largest value, measured on fedau's parameters).
  one, four = probes
  assert int(one["devices"]) == 1 and int(four["devices"]) == 4
  keys = [k for k in one.files if k.startswith(f"{name}/") and "shard_rows" not in k]
  assert any("/c_" in k for k in keys) and any("/m_" in k for k in keys)
  for k in keys:
    scale = float(np.nanmax(np.abs(one[k]), initial=0.0))
    np.testing.assert_allclose(one[k], four[k], rtol=1e-6, atol=1e-6 * scale, err_msg=k)


@pytest.mark.parametrize("name", RESUMED.split(","))
def test_resumed_sharded_run_equals_the_uninterrupted_one(probes, name):
  _, four = probes
  keys = [k for k in four.files if k.startswith(f"{name}/") and "resumed_" not in k
          and "shard_rows" not in k]
  for k in keys:
    np.testing.assert_array_equal(four[k], four[k.replace("/", "/resumed_", 1)], err_msg=k)


def test_each_device_holds_its_share_of_the_clients(probes):
  one, four = probes
  assert int(one["mifa/shard_rows"]) == 12
  assert int(four["mifa/shard_rows"]) == 3  # 12 clients over 4 devices


def test_memory_estimate_counts_one_devices_rows_of_the_client_state():
  task, world = toy_setup(num_clients=10, cohort=3)
  build = lambda hp: mifa.build(task, world, hp)
  hp = mifa.Hparams(client_lr=0.1, batch_size=4)
  row = sum(a.size * 4 for a in jax.tree.leaves(task.init_params(jax.random.PRNGKey(0))))
  one = device_memory.estimate(build, task, hp, world, num_runs=1, num_devices=1)
  four = device_memory.estimate(build, task, hp, world, num_runs=1, num_devices=4)
  runs = device_memory.estimate(build, task, hp, world, num_runs=4, num_devices=4)
  assert one["client_state_per_run"] == 10 * row
  assert four["client_state_per_run"] == 3 * row   # ceil(10 / 4) rows on each device
  assert runs["client_state_per_run"] == 10 * row  # 4 runs take the 4 devices
  assert one["state_per_run"] - four["state_per_run"] == 7 * row
