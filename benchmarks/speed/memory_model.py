"""The memory model of every algorithm, measured from state shapes.

  python -m benchmarks.speed.memory_model [--output=results/speed/memory_model.md]

For each algorithm, the persistent state of one run (server + clients, `jax.eval_shape` of
`init`, nothing allocated) is measured at two population sizes n and two model sizes d
(Synthetic(1, 1) data, logistic regression with 60 or 120 features) and fitted exactly by
S(n, d) = a + b·n + c·d + e·n·d. The table gives b (bytes per client), e (bytes per client
per parameter) and c (server bytes per parameter). A run also holds the data and the round's
working set; `core/device_memory.estimate` adds those, and the command line checks the total
against the device before it starts.
"""

from absl import app
from absl import flags
import jax
import numpy as np

from fedjax_bench import algorithms, config, data, experiment
from fedjax_bench.output import results
from fedjax_bench.core import device_memory

FLAGS = flags.FLAGS
flags.DEFINE_string("output", "results/speed/memory_model.md", "The markdown table.")


def run_config(algo: str, n: int) -> config.Config:
  values = dict(algo=algo, dataset="synthetic", num_clients=n, participation="full",
                rounds=10, model="logreg")
  if algo != "local_model":  # its test set is its own client's (the prioritized default)
    values["test_mix"] = "official"
  if algo.startswith("fedef"):  # error feedback keeps state only with a compressor
    values["compressor"] = "topk"
  if algo in ("ditto", "apfl", "pfedme", "perfedavg_fo", "perfedavg_hf", "ifca"):  # personalized:
    # scored on each client's own test data
    values["holdout_fraction"] = 0.2
  if algo in ("fedper", "fedrep", "fedbn"):  # a part of the model per client: a head (the
    # output layer of an MLP of 32), the batch norm of that MLP
    values.update(holdout_fraction=0.2, model="mlp_bn" if algo == "fedbn" else "mlp",
                  mlp_hidden=(32,))
  return config.resolve(values)


def state_bytes(algo: str, n: int, dim: int) -> int:
  cfg = run_config(algo, n)
  dataset = data.leaf_synthetic(n, 1.0, 1.0, 0, dim=dim, max_examples_per_client=60)
  exp = experiment.setup(cfg, dataset=dataset)
  server, clients = jax.eval_shape(exp.build(exp.hparams).init, jax.random.PRNGKey(0))
  return device_memory.tree_bytes((server, clients)), device_memory.tree_bytes(server.params) // 4


def fit(algo: str) -> dict:
  rows, rhs = [], []
  for n in (20, 40):
    for dim in (60, 120):
      s, d = state_bytes(algo, n, dim)
      rows.append([1, n, d, n * d])
      rhs.append(s)
  a, b, c, e = np.linalg.solve(np.asarray(rows, float), np.asarray(rhs, float))
  return {"algo": algo, "const": a, "per_client": b, "per_param": c, "per_client_param": e}


def main(argv):
  del argv
  rows = [fit(a) for a in sorted(algorithms.ALGORITHMS)]
  lines = ["# Memory model: persistent state of one run", "",
           "S(n, d) = a + b·n + c·d + e·n·d bytes for n clients and d parameters, fitted "
           "exactly from `jax.eval_shape` of each algorithm's `init` "
           "(`python -m benchmarks.speed.memory_model`). Multiply by the runs a device holds "
           "(seeds × grid points / devices); add the data and the round's working set "
           "(`core/device_memory.py`).",
           "", "| algorithm | bytes per client per parameter (e) | bytes per client (b) | "
           "server bytes per parameter (c) |", "|---|---:|---:|---:|"]
  for r in rows:
    lines.append(f"| `{r['algo']}` | {r['per_client_param']:.0f} | {r['per_client']:.0f} | "
                 f"{r['per_param']:.0f} |")
  text = "\n".join(lines) + "\n"
  results.atomic_write_text(FLAGS.output, text)
  print(text)


if __name__ == "__main__":
  app.run(main)
