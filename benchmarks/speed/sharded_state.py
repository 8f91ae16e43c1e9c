"""Client states sharded over the "clients" mesh axis against replicated, in one invocation.

  python -m benchmarks.speed.sharded_state [--num_clients=10000] [--devices=4] [--repeats=3]
                                           [--output_dir=results/speed]

MIFA (memory [N, d]) over N clients on `--devices` forced host CPU devices and one run, so
the engine's mesh is ("runs": 1, "clients": devices). Each side runs `--repeats` times,
interleaved (sharded, replicated, sharded, ...; `engine.run`'s `shard_client_state`);
reported: the client-state bytes one device holds (from the final state's shards on device
0), the median seconds per round of each side and their ratio. Writes sharded_state.json
and sharded_state.md under --output_dir.
"""

import os

from absl import app
from absl import flags

from benchmarks.speed import harness

FLAGS = flags.FLAGS
flags.DEFINE_integer("num_clients", 10_000, "Population N.")
flags.DEFINE_integer("devices", 4, "Forced host CPU devices (ignored if XLA_FLAGS sets some).")
flags.DEFINE_integer("clients_per_round", 100, "Cohort drawn per round (uniform_sparse).")
flags.DEFINE_integer("rounds", 10, "Rounds per timed run.")
flags.DEFINE_integer("repeats", 3, "Runs per side; the median is reported.")
flags.DEFINE_string("output_dir", "results/speed", "Where the results go.")

LOCAL_STEPS = 5
HIDDEN = 64  # MLP 60-64-10 on LEAF Synthetic(1, 1): d = 4,554 parameters


def setup(n: int):
  import numpy as np
  from fedjax_bench import models
  from fedjax_bench.algorithms import mifa
  from fedjax_bench.task.build import make_stream_task
  from fedjax_bench.data import stream
  from fedjax_bench.sim import participation, world as world_lib
  model = models.make("mlp", num_classes=10, is_image=False, mlp_hidden=(HIDDEN,))
  task = make_stream_task(
      stream.leaf_stream(n, seed=0, num_test=1000, num_train_eval=1000), model)
  world = world_lib.make(participation.uniform_sparse(n, FLAGS.clients_per_round),
                         np.full(n, LOCAL_STEPS, np.int32))
  hp = mifa.Hparams(client_lr=0.05, batch_size=10, sampling="replacement")
  return (lambda h: mifa.build(task, world, h)), task, hp


def device0_bytes(tree) -> int:
  import jax
  dev = jax.devices()[0]
  return sum(s.data.nbytes for leaf in jax.tree.leaves(tree)
             for s in leaf.addressable_shards if s.device == dev)


def main(argv):
  del argv
  flags_now = os.environ.get("XLA_FLAGS", "")
  if "xla_force_host_platform_device_count" not in flags_now:
    os.environ["XLA_FLAGS"] = (f"{flags_now} --xla_force_host_platform_device_count="
                               f"{FLAGS.devices}").strip()
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  import jax
  from fedjax_bench import engine
  env = harness.environment()
  build, task, hp = setup(FLAGS.num_clients)
  sides = {"sharded": [], "replicated": []}
  state_bytes = {}
  for _ in range(FLAGS.repeats):
    for side in sides:
      out = engine.run(build, task, hp, seeds=[0], rounds=FLAGS.rounds,
                       eval_every=FLAGS.rounds, shard_client_state=side == "sharded")
      sides[side].append(1.0 / out.timing["rounds_per_second"])
      state_bytes[side] = device0_bytes(out.state[1])
      print(f"{side}: {sides[side][-1] * 1e3:.1f} ms/round, client state on device 0: "
            f"{state_bytes[side] / 2**20:.1f} MiB", flush=True)
  harness.finish(env)
  per_round = {s: harness.median(v) for s, v in sides.items()}
  row = {"num_clients": FLAGS.num_clients, "devices": jax.device_count(),
         "params": sum(a.size for a in jax.tree.leaves(task.init_params(
             jax.random.PRNGKey(0)))),
         "client_state_bytes_per_device": state_bytes, "seconds_per_round": per_round,
         "seconds_per_round_all": sides,
         "memory_ratio": state_bytes["sharded"] / state_bytes["replicated"],
         "time_ratio": per_round["sharded"] / per_round["replicated"],
         "clients_per_round": FLAGS.clients_per_round}
  record = {"environment": env, "rounds": FLAGS.rounds, "repeats": FLAGS.repeats,
            "result": row}
  harness.write(FLAGS.output_dir, "sharded_state", record, markdown(record))
  print(markdown(record))
  return 0


def markdown(record) -> str:
  r, env = record["result"], record["environment"]
  mib = lambda b: f"{b / 2**20:.1f} MiB"
  b, t = r["client_state_bytes_per_device"], r["seconds_per_round"]
  return "\n".join([
      "# Client state sharded over the clients axis against replicated", "",
      f"MIFA, {r['num_clients']:,} clients, MLP 60-{HIDDEN}-10 ({r['params']:,} parameters), "
      f"{r.get('clients_per_round', FLAGS['clients_per_round'].default)} clients a round, "
      f"{LOCAL_STEPS} local steps; one run on "
      f"{r['devices']} CPU devices (mesh runs 1 x clients {r['devices']}).", "",
      "| client state | bytes on one device | s/round (median) |", "|---|---:|---:|",
      f"| replicated | {mib(b['replicated'])} | {t['replicated']:.4f} |",
      f"| sharded | {mib(b['sharded'])} | {t['sharded']:.4f} |",
      f"| ratio | {r['memory_ratio']:.3f} | {r['time_ratio']:.2f}x |", "",
      f"Median of {record['repeats']} runs of {record['rounds']} rounds per side, "
      "interleaved, one process.", "", harness.machine(env), ""])


if __name__ == "__main__":
  app.run(main)
