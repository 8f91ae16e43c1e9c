"""A researcher's first lines with fedjax_bench, from Python (no command line involved).

    python examples/first_run.py

FedAvg on LEAF Synthetic(1, 1), three seeds in one program, then a grid of client
learning rates for FedAvgM, also one program. Every keyword is a command-line flag name;
`result.metrics` holds every evaluation (a DataFrame when pandas is installed).
"""

import fedjax_bench

common = dict(dataset="synthetic", num_clients=30, rounds=40, eval_every=10, seeds=3,
              progress=False)
result = fedjax_bench.run(algo="fedavg", **common)
acc = result.summary["final"]["test_accuracy"]
print(f"fedavg: test accuracy {acc['mean']:.3f} ± {acc['std']:.3f} over seeds {result.seeds}")

grid = fedjax_bench.run(algo="fedavg", server_opt="momentum", server_lr=0.5,
                        sweep={"client_lr": [0.03, 0.1]}, **common)
for point in grid.summary["final"]["test_accuracy"]:
  print(f"fedavgm, client_lr={point['hparams']['client_lr']}: {point['mean']:.3f}")
