"""FedAvg with the char LSTM on the built Shakespeare: it learns more than the most frequent
character, and 1 device gives the numbers of 4."""

from pathlib import Path

import numpy as np

from tests.conftest import device_probe
from fedjax_bench import api
from fedjax_bench.data import shakespeare
from fedjax_bench.data.settings import DataSettings

PROBE = Path(__file__).parents[1] / "scripts" / "shakespeare_probe.py"
# Declared before it was run: at least 8 points of accuracy above always answering the most
# frequent character of the test set (a space, about 20%).
MARGIN = 0.08


def test_a_short_fedavg_run_learns_more_than_the_most_frequent_character():
  r = api.run(dataset="shakespeare", model="char_lstm", lstm_hidden=32,
              participation="uniform", clients_per_round=10, local_steps=20, batch_size=10,
              client_lr=2.0, rounds=30, eval_every=30, train_eval_examples=500, seeds=[0],
              num_clients=50, test_examples=2000, progress=False, host_devices=1)
  d = shakespeare.load(num_clients=50, partition="natural", partition_seed=0, data_dir=None,
                       cache_dir=None, settings=DataSettings(test_examples=2000))
  most_frequent = np.bincount(d.test_y).max() / len(d.test_y)
  assert 0.15 < most_frequent < 0.25
  accuracy = float(np.asarray(r.curves["test_accuracy"])[-1].mean())
  assert accuracy >= most_frequent + MARGIN, (accuracy, most_frequent)


def test_one_device_gives_the_numbers_of_four(tmp_path):
  one = device_probe(PROBE, tmp_path / "d1.npz", 1, "1")  # layouts of 1 and of 4 devices
  four = device_probe(PROBE, tmp_path / "d4.npz", 4, "4")
  for k in ("test_accuracy", "test_loss", "train_loss"):
    np.testing.assert_allclose(four[k], one[k], rtol=1e-5, atol=1e-6, err_msg=k)
  assert not np.allclose(one["train_loss"][0], one["train_loss"][-1])  # it trained
