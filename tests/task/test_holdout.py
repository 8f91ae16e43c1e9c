"""Per-client test data (--holdout_fraction): the split, and the accuracy over clients that
evaluation reports, against NumPy."""

import jax
import numpy as np
import pytest

from tests.conftest import toy_dataset, toy_setup
from fedjax_bench import api
from fedjax_bench.task.build import client_test_table
from fedjax_bench.data import holdout
from fedjax_bench.errors import UsageError


def test_held_out_counts_round_keep_one_and_never_take_all():
  np.testing.assert_array_equal(holdout.held_out_counts(np.array([0, 1, 2, 5, 10, 11]), 0.2),
                                [0, 0, 1, 1, 2, 2])
  np.testing.assert_array_equal(holdout.held_out_counts(np.array([3, 4]), 0.9), [2, 3])


def test_split_partitions_each_clients_examples_and_is_seeded():
  ds = toy_dataset(num_clients=5, sizes=[1, 2, 9, 10, 30])
  a, b, c = (holdout.split(ds, 0.3, s) for s in (4, 4, 5))
  held = holdout.held_out_counts(ds.train.counts, 0.3)
  np.testing.assert_array_equal(a.client_test.counts, held)
  np.testing.assert_array_equal(a.train.counts, ds.train.counts - held)
  for i in range(5):
    whole = {tuple(r) for r in ds.train.client(i)[0]}
    train, test = ({tuple(r) for r in d.client(i)[0]} for d in (a.train, a.client_test))
    assert train | test == whole and not train & test
  np.testing.assert_array_equal(a.client_test.x, b.client_test.x)  # same seed, same split
  assert not np.array_equal(a.client_test.x, c.client_test.x)
  with pytest.raises(ValueError, match=r"in \(0, 1\)"):
    holdout.split(ds, 1.0, 0)


def _numpy_accuracies(task, ds, params_of):
  """Each client's accuracy on its held-out rows, by hand: softmax regression argmax."""
  accs = []
  for i in range(ds.client_test.num_clients):
    x, y = ds.client_test.client(i)
    if len(y) == 0:
      continue
    p = params_of(i)
    w, b = np.asarray(p["DenseOI_0"]["kernel"]), np.asarray(p["DenseOI_0"]["bias"])
    accs.append(np.mean(np.argmax(x @ w.T + b, 1) == y))
  return np.asarray(accs)


@pytest.mark.parametrize("per_client", [False, True])
def test_accuracy_over_clients_matches_numpy(per_client):
  sizes = [4, 9, 12, 7, 15, 20, 6, 11, 3, 8, 10, 13]
  ds = holdout.split(toy_dataset(num_clients=12, sizes=sizes), 0.4, 1)
  task, _ = toy_setup(num_clients=12, sizes=sizes)
  task = task.__class__(**{**task.__dict__, "client_test": client_test_table(ds.client_test)})
  base = task.init_params(jax.random.PRNGKey(3))
  rows = jax.tree.map(lambda a: np.stack([np.asarray(a) + 0.3 * np.random.default_rng(i)
                                          .normal(size=a.shape) for i in range(12)]), base)
  params = rows if per_client else base
  got = task.evaluate_clients(params, "x", per_client=per_client)
  acc = _numpy_accuracies(task, ds, (lambda i: jax.tree.map(lambda a: a[i], rows))
                          if per_client else (lambda i: base))
  k = int(np.ceil(0.1 * len(acc)))
  np.testing.assert_allclose(float(got["x_accuracy"]), acc.mean(), rtol=1e-6)
  np.testing.assert_allclose(float(got["x_accuracy_std"]), acc.std(), rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(float(got["x_accuracy_worst10"]), np.sort(acc)[:k].mean(), rtol=1e-6)
  np.testing.assert_allclose(float(got["x_accuracy_best10"]), np.sort(acc)[-k:].mean(), rtol=1e-6)


def test_a_run_reports_client_test_accuracy_and_refuses_data_per_seed():
  common = dict(dataset="synthetic", num_clients=10, rounds=2, eval_every=1, progress=False,
                holdout_fraction=0.25, host_devices=1)
  r = api.run(algo="fedavg", seeds=[0], **common)
  assert {"client_test_accuracy", "client_test_accuracy_std", "client_test_accuracy_worst10",
          "client_test_accuracy_best10"} <= set(r.curves)
  with pytest.raises(UsageError, match="--holdout_fraction does not work with --data_per_seed"):
    api.run(algo="fedavg", seeds=[0, 1], data_per_seed=True, **common)
