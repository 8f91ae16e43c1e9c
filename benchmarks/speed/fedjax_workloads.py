"""W1-W3 and the cohort sizes in FedJAX 0.0.17 (runs in its own environment:
benchmarks/speed/peers.py sets it up). FedJAX's FedAvg (`fedjax.algorithms.fed_avg`) with
its default per-client loop of jitted steps, haiku models equal to ours, MNIST-shaped
random data of the same shapes.

W1-W3 train the first clients of the data every round. The cohort workloads c1, c10,
c100, c1000 are W1 (logistic regression, batch 10) with m clients drawn uniformly without
replacement from a population of N each round, as FedJAX users do:
`fedjax.client_samplers.UniformGetClientSampler` over an `InMemoryFederatedData`, its
`sample()` inside the timed loop; w2_c10 (any of w1, w2, w3 and c1, c10, c100, c1000) is
that workload's model and batch at that cohort size (benchmarks/peers/compare.py's cells).

W7 is FedJAX's own Shakespeare model, `fedjax.models.shakespeare.create_lstm_model`
(embedding 8, two `hk.LSTM` layers of LSTM_HIDDEN = 64, benchmarks/speed/speed.py's width,
and a dense layer to its vocabulary of 86 + 4 = 90 ids), trained by
`fedjax.algorithms.fed_avg` on 10 clients every round, batch 10, 10 local steps, as
benchmarks/speed/speed.py's W7 trains our char LSTM. Each example is a sequence of 80 random ids
in 1..86 (its characters: no PAD, BOS, EOS or OOV) and its 80 targets; the clients' sizes
are those of our W7 (`shakespeare_sizes`, the draw of benchmarks/speed/workloads.py). The
inputs have our shapes, [10, 80] a batch, but the two models differ:
  * FedJAX's model outputs, and its loss averages, all 80 positions of a sequence
    (TFF's Shakespeare: a sequence's next characters); ours reads the last position
    only (LEAF's: the character after an 80-character window), so FedJAX's dense layer
    and softmax do 80x ours (at width 64 about 11% more matmul work a step in all);
  * FedJAX puts a tanh after each LSTM layer (`hk.DeepRNN([LSTM, tanh, LSTM, tanh])`);
    LEAF and we do not;
  * FedJAX unrolls the 80 time steps in the program (`hk.static_unroll`) and multiplies
    [x_t, h_{t-1}] by one kernel each step; ours scans over time and multiplies the whole
    input sequence by the input kernel before the scan;
  * its vocabulary is 90 ids, ours 82 (LEAF's 80 characters, PAD and OOV).
With `--interleave`, W7 runs one repeat per line of stdin, as the cohort workloads do
(benchmarks/speed/peers.py times ours in between). XLA:CPU (jax 0.4.30) compiles
FedJAX's unrolled step for many minutes (10 to 16 on the 2-core CPU under load, before
the first round), so W7's executables are kept in JAX's persistent compilation cache
(`--compile_cache`) and later runs load them; the first round is not timed either way.

  <venv>/bin/python fedjax_workloads.py --workloads=w1,w2,w3,c10 --repeats=3 --rounds=0

Prints one JSON line per workload.
"""

import argparse
import json
import os
import statistics
import sys
import time

import fedjax
import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

NUM_CLIENTS, EXAMPLES, LOCAL_STEPS, CLIENT_LR = 100, 600, 10, 0.1
# name -> (model, batch, rounds per repeat when --rounds=0, clients per round: the
# first clients of the data; benchmarks/speed/speed.py's W3 trains 10 at CPU scale)
WORKLOADS = {"w1": ("logreg", 10, 3, 100), "w2": ("mlp", 32, 2, 100), "w3": ("cnn", 32, 1, 10),
             "logreg32": ("logreg", 32, 3, 100)}
# name -> (clients per round m, population N, rounds per repeat when --rounds=0: about
# 10,000 client-steps, 0.6 s of FedJAX on a 2-core CPU). benchmarks/speed/peers.py's
# COHORTS holds the same sizes for our side.
COHORTS = {"c1": (1, 100, 1000), "c10": (10, 100, 100), "c100": (100, 100, 10),
           "c1000": (1000, 1000, 1)}
# name -> (model, batch, rounds per repeat when --rounds=0, clients: all of them train
# every round). A round of W7 took 11-13 s on the 2-core CPU under load.
SEQUENCES = {"w7": ("char_lstm", 10, 1, 10)}
LSTM_HIDDEN, SEQ_LEN, VOCAB = 64, 80, 86  # VOCAB: characters; create_lstm_model adds 4
# benchmarks/speed/workloads.py's Shakespeare-like client sizes (the same draw).
SHAKESPEARE_LOG_MEAN, SHAKESPEARE_LOG_STD = 6.48, 1.93
SHAKESPEARE_MIN, SHAKESPEARE_MAX = 10, 55_161


def forward(name):
  def fn(batch):
    x = batch["x"]
    if name == "cnn":
      for features in (32, 64):
        x = jax.nn.relu(hk.Conv2D(features, 5, padding="SAME")(x))
        x = hk.max_pool(x, 2, 2, padding="VALID")
      x = hk.Flatten()(x)
      x = jax.nn.relu(hk.Linear(512)(x))
      return hk.Linear(10)(x)
    x = hk.Flatten()(x)
    if name == "mlp":
      for width in (200, 200):
        x = jax.nn.relu(hk.Linear(width)(x))
    return hk.Linear(10)(x)
  return hk.transform(fn)


def model(name):
  if name == "char_lstm":
    # create_lstm_model masks its evaluation logits with jnp.NINF, which the pinned jax
    # 0.4.30 no longer has (AttributeError); training does not read the mask.
    if not hasattr(jnp, "NINF"):
      jnp.NINF = -np.inf
    return fedjax.models.shakespeare.create_lstm_model(
        vocab_size=VOCAB, embed_size=8, lstm_hidden_size=LSTM_HIDDEN, lstm_num_layers=2)
  return fedjax.create_model_from_haiku(
      transformed_forward_pass=forward(name),
      sample_batch={"x": np.zeros((1, 28, 28, 1), np.float32)},
      train_loss=lambda batch, preds: fedjax.metrics.unreduced_cross_entropy_loss(
          batch["y"], preds),
      eval_metrics={"accuracy": fedjax.metrics.Accuracy()})


def clients(seed, num_clients=NUM_CLIENTS):
  rng = np.random.default_rng(seed)
  out = []
  for i in range(num_clients):
    x = rng.integers(0, 256, (EXAMPLES, 28, 28, 1), dtype=np.uint8).astype(np.float32) / 255
    y = rng.integers(0, 10, EXAMPLES).astype(np.int32)
    out.append((f"{i}".encode(), fedjax.ClientDataset({"x": x, "y": y}),
                jax.random.PRNGKey(i)))
  return out


def shakespeare_sizes(seed, num_clients):
  """benchmarks/speed/workloads.py's `shakespeare_sizes`, the same NumPy calls."""
  rng = np.random.default_rng([seed, 7])
  sizes = np.exp(rng.normal(SHAKESPEARE_LOG_MEAN, SHAKESPEARE_LOG_STD, num_clients))
  return np.clip(np.round(sizes), SHAKESPEARE_MIN, SHAKESPEARE_MAX).astype(np.int64)


def sequence_clients(seed, num_clients):
  """W7's clients: sequences of SEQ_LEN random character ids (1..VOCAB) and as many
  targets, int32 as FedJAX's Shakespeare preprocessing gives them."""
  rng = np.random.default_rng(seed)
  out = []
  for i, n in enumerate(shakespeare_sizes(seed, num_clients)):
    x = rng.integers(1, VOCAB + 1, (n, SEQ_LEN)).astype(np.int32)
    y = rng.integers(1, VOCAB + 1, (n, SEQ_LEN)).astype(np.int32)
    out.append((f"{i}".encode(), fedjax.ClientDataset({"x": x, "y": y}),
                jax.random.PRNGKey(i)))
  return out


def fedavg(model_name, batch):
  """FedJAX's FedAvg (client SGD at CLIENT_LR, server SGD at 1, LOCAL_STEPS shuffled
  steps): (algorithm, initial params, initial state)."""
  m = model(model_name)
  algorithm = fedjax.algorithms.fed_avg.federated_averaging(
      fedjax.model_grad(m), fedjax.optimizers.sgd(CLIENT_LR), fedjax.optimizers.sgd(1.0),
      fedjax.ShuffleRepeatBatchHParams(batch_size=batch, num_epochs=None,
                                       num_steps=LOCAL_STEPS, seed=0))
  params = m.init(jax.random.PRNGKey(0))
  return algorithm, params, algorithm.init(params)


def ready(state):
  jax.tree_util.tree_map(lambda a: a.block_until_ready(), state.params)


def timed(algorithm, state, next_clients, rounds, repeats, name, interleave=False):
  """Times FedAvg rounds: the first (compiling) round, then ``repeats`` repeats of
  ``rounds`` rounds, each round on ``next_clients()``. With ``interleave``: after the first
  round, prints {"ready": name}, then runs one repeat per line of stdin (printing its
  seconds) until stdin closes, so the caller can time its own in between. Returns
  (first round's seconds, each repeat's seconds)."""
  t0 = time.perf_counter()
  state, _ = algorithm.apply(state, next_clients())
  ready(state)
  first = time.perf_counter() - t0
  seconds = []

  def repeat():
    nonlocal state
    t0 = time.perf_counter()
    for _ in range(rounds):
      state, _ = algorithm.apply(state, next_clients())
    ready(state)
    seconds.append(time.perf_counter() - t0)

  if interleave:
    print(json.dumps({"ready": name}), flush=True)
    for _ in sys.stdin:
      repeat()
      print(json.dumps({"seconds": seconds[-1]}), flush=True)
  else:
    for _ in range(repeats):
      repeat()
  return first, seconds


def timing_row(clients, rounds, first, seconds, params) -> dict:
  """The fields every workload's row shares: rates over the repeats' median."""
  rates = [rounds * clients * LOCAL_STEPS / s for s in seconds]
  return {"clients_per_round": clients, "rounds_per_repeat": rounds, "repeats": len(seconds),
          "seconds": seconds, "client_steps_per_second": statistics.median(rates),
          "rounds_per_second": rounds / statistics.median(seconds),
          "first_round_seconds": first,
          "params": int(sum(np.size(a) for a in jax.tree_util.tree_leaves(params))),
          "fedjax": getattr(fedjax, "__version__", "0.0.17"), "jax": jax.__version__}


def run(name, rounds, repeats, data):
  model_name, batch, default_rounds, clients = WORKLOADS[name]
  data = data[:clients]
  rounds = rounds or default_rounds
  algorithm, params, state = fedavg(model_name, batch)
  first, seconds = timed(algorithm, state, lambda: data, rounds, repeats, name)
  return {"workload": name, "model": model_name, "batch_size": batch,
          **timing_row(clients, rounds, first, seconds, params)}


def cohort(name):
  """(workload, cohort) of a cohort workload's name: "c10" is W1's, "w2_c10" W2's; None
  for any other name."""
  workload, _, size = name.rpartition("_")
  workload = workload or "w1"
  if size in COHORTS and workload in WORKLOADS:
    return workload, size
  return None


def run_cohort(name, rounds, repeats, seed, interleave=False):
  """A workload's model and steps, m of N clients drawn by FedJAX's uniform sampler each
  round."""
  workload, size = cohort(name)
  m, n, default_rounds = COHORTS[size]
  rounds = rounds or default_rounds
  fd = fedjax.InMemoryFederatedData(
      {cid: {"x": ds.all_examples()["x"], "y": ds.all_examples()["y"]}
       for cid, ds, _ in clients(seed, n)})
  sampler = fedjax.client_samplers.UniformGetClientSampler(fd, m, seed)
  model_name, batch = WORKLOADS[workload][:2]
  algorithm, params, state = fedavg(model_name, batch)
  first, seconds = timed(algorithm, state, sampler.sample, rounds, repeats, name, interleave)
  return {"workload": name, "model": model_name, "batch_size": batch, "population": n,
          "sampler": "UniformGetClientSampler",
          **timing_row(m, rounds, first, seconds, params)}


def run_sequence(name, rounds, repeats, seed, interleave=False):
  """W7: FedJAX's Shakespeare LSTM, its clients all trained every round."""
  model_name, batch, default_rounds, num_clients = SEQUENCES[name]
  rounds = rounds or default_rounds
  data = sequence_clients(seed, num_clients)
  algorithm, params, state = fedavg(model_name, batch)
  first, seconds = timed(algorithm, state, lambda: data, rounds, repeats, name, interleave)
  return {"workload": name, "model": "shakespeare.create_lstm_model", "batch_size": batch,
          "lstm_hidden": LSTM_HIDDEN, "seq_len": SEQ_LEN, "vocab": VOCAB + 4,
          "client_sizes": [len(ds) for _, ds, _ in data],
          **timing_row(num_clients, rounds, first, seconds, params)}


def main():
  p = argparse.ArgumentParser()
  p.add_argument("--workloads", default="w1,w2,w3")
  p.add_argument("--rounds", type=int, default=0)
  p.add_argument("--repeats", type=int, default=3)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--compile_cache", default=os.path.expanduser(
      "~/.cache/fedjax_bench/fedjax_xla"), help="w7: JAX's persistent compilation cache "
      "(FedJAX's unrolled LSTM compiles for minutes); empty: none")
  p.add_argument("--interleave", action="store_true",
                 help="cohort workloads and w7 (one): a repeat per line of stdin")
  a = p.parse_args()
  names = a.workloads.split(",")
  if a.compile_cache and any(w in SEQUENCES for w in names):
    jax.config.update("jax_compilation_cache_dir", a.compile_cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
  jnp.zeros(1).block_until_ready()
  data = clients(a.seed) if any(w in WORKLOADS for w in names) else None
  for w in names:
    if w in SEQUENCES:
      row = run_sequence(w, a.rounds, a.repeats, a.seed, a.interleave)
    else:
      row = (run_cohort(w, a.rounds, a.repeats, a.seed, a.interleave) if cohort(w)
             else run(w, a.rounds, a.repeats, data))
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
  main()
