"""A short FedAvg run of the char LSTM on the built Shakespeare, its curves saved (for the
1-vs-4-device test).

usage: shakespeare_probe.py OUT.npz HOST_DEVICES
"""

import sys

import numpy as np

from fedjax_bench import api

SETTINGS = dict(dataset="shakespeare", model="char_lstm", lstm_hidden=16, num_clients=12,
                participation="uniform", clients_per_round=6, local_steps=4, batch_size=8,
                client_lr=1.0, rounds=3, eval_every=1, test_examples=300,
                train_eval_examples=300)


def main(out, host_devices):
  r = api.run(seeds=[0, 1], progress=False, host_devices=int(host_devices), **SETTINGS)
  np.savez(out, **{k: np.asarray(v) for k, v in r.curves.items()})


if __name__ == "__main__":
  main(*sys.argv[1:3])
