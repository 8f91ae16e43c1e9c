"""FedAvg in PyTorch, timed: a per-client loop (``--side=loop``) or Flower's simulation
engine (``--side=flower``), on the data `compare.py` wrote (our generated data, the same
arrays). Runs in the peer's own virtual environment (`compare.py` sets it up); prints one
JSON line per result, as `benchmarks/speed/fedjax_workloads.py` does for FedJAX.

  <venv>/bin/python torch_workloads.py --side=loop --model=cnn --batch=32 --data=DIR \\
      --clients_per_round=10 --rounds=1 --repeats=3 [--interleave]

Each round draws ``--clients_per_round`` m of the population's N clients uniformly without
replacement (all of them when m = N) and trains each with `torch_peer.local_train`.

* loop: FL-bench's server loop. For each client of the cohort: copy the global weights into
  the client model, train, collect a copy of its weights; then the global weights become
  the cohort's mean. torch.set_num_threads(the cores this process may use).
* flower: ``flwr.simulation.start_simulation`` (Flower's Ray-based simulation engine) with
  ``flwr.server.strategy.FedAvg`` (``fraction_fit`` = m / N, no evaluation) and
  `torch_peer.FlowerClientFn`'s NumPyClient; each client gets ``num_cpus=1`` (Ray runs
  one client per core at a time, each on one PyTorch thread), Ray starts with the cores
  this process may use and no dashboard, telemetry off. FedAvg weights the clients by the
  examples they trained on: the same for all, so the mean is uniform as on the other sides.

The first round (Flower: also Ray's and the actors' start) is timed apart and not counted.
With ``--interleave``, after it one line {"ready": ...} is printed, then each line read from
stdin runs one repeat of ``--rounds`` rounds and prints {"seconds": ...}; the result row
comes when stdin closes (Flower: after ``--repeats`` repeats, since its rounds are set when
it starts).
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import architectures  # noqa: E402
import torch_peer  # noqa: E402


def parse():
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--side", choices=("loop", "flower"), required=True)
  p.add_argument("--workload", default="", help="its name, echoed in the row")
  p.add_argument("--model", choices=("logreg", "mlp", "cnn", "char_lstm"), required=True)
  p.add_argument("--hidden", type=int, default=64, help="char_lstm: the LSTM width")
  p.add_argument("--batch", type=int, required=True)
  p.add_argument("--steps", type=int, default=10, help="local SGD steps")
  p.add_argument("--lr", type=float, default=0.1)
  p.add_argument("--data", required=True, help="the folder compare.py wrote")
  p.add_argument("--clients_per_round", type=int, required=True)
  p.add_argument("--rounds", type=int, default=1, help="rounds per repeat")
  p.add_argument("--repeats", type=int, default=3)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--device", default="cpu", help="cpu or cuda: where the models train "
                 "(the loop moves its data there; Flower's clients train there)")
  p.add_argument("--interleave", action="store_true")
  a = p.parse_args()
  if a.rounds < 1 or a.repeats < 1 or a.clients_per_round < 1:
    p.error("--rounds, --repeats and --clients_per_round must be at least 1")
  return a


def row(a, population: int, first: float, seconds: list, **extra) -> dict:
  steps = a.rounds * a.clients_per_round * a.steps
  rates = [steps / s for s in seconds]
  return {"workload": a.workload, "side": a.side, "model": a.model, "batch_size": a.batch,
          "clients_per_round": a.clients_per_round, "population": population,
          "rounds_per_repeat": a.rounds, "repeats": len(seconds), "seconds": seconds,
          "client_steps_per_second": statistics.median(rates) if rates else None,
          "first_round_seconds": first,
          "params": architectures.num_params(a.model, a.hidden),
          "torch": torch.__version__, **extra}


def repeats(a, run_repeat, name: str) -> list:
  """Runs the repeats (one a stdin line with --interleave); returns their seconds."""
  seconds = []

  def once():
    t0 = time.perf_counter()
    run_repeat()
    seconds.append(time.perf_counter() - t0)

  if a.interleave:
    torch_peer.report({"ready": name})
    for _ in sys.stdin:
      once()
      torch_peer.report({"seconds": seconds[-1]})
  else:
    for _ in range(a.repeats):
      once()
  return seconds


def main_loop(a):
  torch.set_num_threads(torch_peer.threads())
  torch.manual_seed(a.seed)
  device = torch.device(a.device)
  data = torch_peer.ClientData(a.data, device=device)
  n, m = data.num_clients, a.clients_per_round
  if m > n:
    raise SystemExit(f"error: --clients_per_round={m} but the data has {n} clients")
  global_model = torch_peer.build_model(a.model, a.hidden).to(device)
  client_model = torch_peer.build_model(a.model, a.hidden).to(device)
  rng = np.random.default_rng(a.seed)
  gen = torch.Generator().manual_seed(a.seed)

  def one_round():
    cohort = rng.choice(n, m, replace=False) if m < n else range(n)
    global_weights = torch_peer.get_weights(global_model)
    collected = []
    for i in cohort:
      torch_peer.set_weights(client_model, global_weights)
      x, y = data.client(int(i))
      torch_peer.local_train(client_model, data, x, y, a.steps, a.batch, a.lr, gen)
      collected.append(torch_peer.get_weights(client_model))
    torch_peer.set_weights(global_model,
                           [torch.stack(ws).mean(0) for ws in zip(*collected)])

  def run_repeat():
    for _ in range(a.rounds):
      one_round()
    torch_peer.synchronize(device)

  t0 = time.perf_counter()
  one_round()
  torch_peer.synchronize(device)
  first = time.perf_counter() - t0
  seconds = repeats(a, run_repeat, a.workload)
  torch_peer.report(row(a, n, first, seconds, threads=torch.get_num_threads(),
                        device=a.device))


def main_flower(a):
  os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
  import flwr as fl  # noqa: PLC0415

  data = torch_peer.ClientData(a.data, mmap=True)
  n, m = data.num_clients, a.clients_per_round
  if m > n:
    raise SystemExit(f"error: --clients_per_round={m} but the data has {n} clients")
  torch.manual_seed(a.seed)
  init = [w.numpy() for w in torch_peer.get_weights(torch_peer.build_model(a.model, a.hidden))]
  cores = torch_peer.threads()
  state = {"seconds": [], "first": None, "error": None, "t0": None, "stopped": False}

  class TimedFedAvg(fl.server.strategy.FedAvg):
    """FedAvg that times its rounds: round 1 apart, then repeats of ``--rounds``."""

    def configure_fit(self, server_round, parameters, client_manager):
      if server_round == 1:
        state["t0"] = time.perf_counter()
      elif (server_round - 2) % a.rounds == 0:  # a repeat starts
        if a.interleave and not state["stopped"] and not sys.stdin.readline():
          state["stopped"] = True
        if state["stopped"] or state["error"]:
          return []
        state["t0"] = time.perf_counter()
      return super().configure_fit(server_round, parameters, client_manager)

    def aggregate_fit(self, server_round, results, failures):
      if failures and state["error"] is None:
        state["error"] = f"{len(failures)} client(s) failed in round {server_round}: " \
                         f"{failures[0]!r}"
      out = super().aggregate_fit(server_round, results, failures)
      elapsed = time.perf_counter() - state["t0"]
      if server_round == 1:
        state["first"] = elapsed
        if a.interleave:
          torch_peer.report({"ready": a.workload})
      elif (server_round - 1) % a.rounds == 0:
        state["seconds"].append(elapsed)
        if a.interleave:
          torch_peer.report({"seconds": elapsed})
      return out

  strategy = TimedFedAvg(
      fraction_fit=m / n, min_fit_clients=m, min_available_clients=n, fraction_evaluate=0.0,
      min_evaluate_clients=0, initial_parameters=fl.common.ndarrays_to_parameters(init))
  client_fn = torch_peer.FlowerClientFn(data_path=a.data, model=a.model, hidden=a.hidden,
                                        steps=a.steps, batch=a.batch, lr=a.lr, seed=a.seed,
                                        device=a.device)
  env_vars = {"PYTHONPATH": HERE, "FLWR_TELEMETRY_ENABLED": "0"}
  fl.simulation.start_simulation(
      client_fn=client_fn, num_clients=n,
      config=fl.server.ServerConfig(num_rounds=1 + a.repeats * a.rounds), strategy=strategy,
      client_resources={"num_cpus": 1, "num_gpus": 0.0},
      ray_init_args={"num_cpus": cores, "include_dashboard": False,
                     "ignore_reinit_error": True, "runtime_env": {"env_vars": env_vars}})
  if state["error"] or state["first"] is None:
    raise SystemExit(f"error: Flower's simulation failed: "
                     f"{state['error'] or 'no round finished (see its log)'}")
  torch_peer.report(row(a, n, state["first"], state["seconds"], flwr=fl.__version__,
                        ray_cpus=cores, client_cpus=1, device=a.device))


if __name__ == "__main__":
  args = parse()
  (main_loop if args.side == "loop" else main_flower)(args)
