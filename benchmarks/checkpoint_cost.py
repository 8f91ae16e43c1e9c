"""The cost of checkpoints: one configuration run without checkpoints and with the
default (a save after every evaluation), in one invocation.

  python benchmarks/checkpoint_cost.py [--algos=fedawe,mifa,fedvarp,fedavg] [--rounds=40]

fedawe, mifa and fedvarp keep O(m d) client state ([num_clients, d]); they run as W4 of
benchmarks/scale.py (logistic regression on LEAF Synthetic(1, 1) generated on demand,
10,000 clients available with probability 0.1). fedavg (no client state) runs on 100
clients, all available, as a reference point. Each side of a pair runs in the same
process after one untimed warm-up run (data); per side: the wall seconds of `engine.run`
less its compilation, and with checkpoints the seconds spent in saves, their number and the bytes
of one checkpoint file.
"""

import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("algos", ["fedawe", "mifa", "fedvarp", "fedavg"], "Algorithms to measure.")
flags.DEFINE_integer("rounds", 40, "Rounds per measured run.")
flags.DEFINE_integer("eval_every", 10, "Rounds between evaluations (the CLI's default).")
flags.DEFINE_integer("local_steps", 10, "Local steps per client.")

ALGOS = ("fedawe", "mifa", "fedvarp", "fedavg")


def setup(algo: str):
  """(build, task, hparams, num_clients)."""
  import numpy as np
  from fedjax_bench import algorithms, models
  from fedjax_bench.core import task as task_lib
  from fedjax_bench.data import stream
  from fedjax_bench.sim import availability, participation, world as world_lib
  del algorithms
  import importlib
  module = importlib.import_module(f"fedjax_bench.algorithms.{algo}")
  hp = {"client_lr": 0.05, "batch_size": 10, "sampling": "replacement", "weighting": "uniform",
        "server_opt": "sgd", "client_width": -1, "server_lr": 1.0}
  logreg = models.make("logreg", num_classes=10, is_image=False)
  n = 100 if algo == "fedavg" else 10_000
  task = task_lib.make_stream_task(stream.leaf_stream(n, seed=0), logreg)
  steps = np.full(n, FLAGS.local_steps, np.int32)
  if algo == "fedavg":
    world = world_lib.make(participation.full(n), steps)
  else:
    world = world_lib.make(
        availability.make("stationary", availability.homogeneous(n, 0.1)), steps)
  if algo == "fedawe":
    hp.update(fedawe_clip=0.0, fedawe_eval="server")
  return (lambda h: module.build(task, world, h)), task, hp, n


def measure(algo: str) -> dict:
  from fedjax_bench import engine

  build, task, hp, n = setup(algo)
  saves = []
  real_save = engine._save

  def timed_save(*args, **kwargs):
    t0 = time.perf_counter()
    real_save(*args, **kwargs)
    saves.append(time.perf_counter() - t0)

  def once(ckpt_dir):
    ckpt = None
    if ckpt_dir is not None:
      ckpt = engine.Checkpointing(os.path.join(ckpt_dir, "checkpoint.npz"))
    out = engine.run(build, task, hp, seeds=[0], rounds=FLAGS.rounds,
                     eval_every=FLAGS.eval_every, checkpoint=ckpt)
    return out.timing["wall_seconds"] - out.timing["compile_seconds"]

  engine._save = timed_save
  try:
    with tempfile.TemporaryDirectory() as d:
      once(None)  # warm-up: data, compilation caches
      off = once(None)
      on = once(d)
      size = os.path.getsize(os.path.join(d, "checkpoint.npz"))
  finally:
    engine._save = real_save
  return {"algo": algo, "num_clients": n, "off_s": off, "on_s": on, "ratio": on / off,
          "saves": len(saves), "save_s": sum(saves) / max(len(saves), 1),
          "save_share": sum(saves) / on, "bytes": size}


def main(argv):
  del argv
  bad = [a for a in FLAGS.algos if a not in ALGOS]
  if bad:
    sys.stderr.write(f"error: unknown --algos {bad}; valid: {', '.join(ALGOS)}\n")
    return 2
  print(f"{FLAGS.rounds} rounds, an evaluation every {FLAGS.eval_every}, "
        f"{FLAGS.local_steps} local steps; checkpoint_every=1 against none")
  print(f"{'algo':8} {'clients':>7} {'off s':>7} {'on s':>7} {'ratio':>6} {'saves':>5} "
        f"{'s/save':>7} {'share':>6} {'MB':>7}")
  for algo in FLAGS.algos:
    r = measure(algo)
    print(f"{r['algo']:8} {r['num_clients']:7d} {r['off_s']:7.2f} {r['on_s']:7.2f} "
          f"{r['ratio']:6.3f} {r['saves']:5d} {r['save_s']:7.3f} {r['save_share']:6.1%} "
          f"{r['bytes'] / 1e6:7.2f}", flush=True)
  return 0


if __name__ == "__main__":
  app.run(main)
