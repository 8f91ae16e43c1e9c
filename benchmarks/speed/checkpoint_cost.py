"""The cost of checkpoints: one configuration run without checkpoints, with the default
time budget for saves (--checkpoint_max_share), and with a save after every evaluation
(max_share 0), in one invocation.

  python -m benchmarks.speed.checkpoint_cost [--algos=fedawe,mifa,fedvarp,fedavg] [--rounds=40]
                                             [--local_steps=1,10]

fedawe, mifa and fedvarp keep O(m d) client state ([num_clients, d]); they run as W4 of
benchmarks/speed/scale.py (logistic regression on LEAF Synthetic(1, 1) generated on demand,
10,000 clients available with probability 0.1). fedavg (no client state) runs on 100
clients, all available, as a reference point. Each side of a pair runs in the same
process after one untimed warm-up run (data); per side: the wall seconds of `engine.run`
less its compilation, and with checkpoints the seconds spent in saves, their number and the bytes
of one checkpoint file. Writes results/speed/checkpoint_cost.{json,md}.
"""

import os
import tempfile
import time

from absl import app
from absl import flags

from benchmarks.speed import harness

FLAGS = flags.FLAGS
flags.DEFINE_list("algos", ["fedawe", "mifa", "fedvarp", "fedavg"], "Algorithms to measure.")
flags.DEFINE_integer("rounds", 40, "Rounds per measured run.")
flags.DEFINE_integer("eval_every", 10, "Rounds between evaluations (the CLI's default).")
flags.DEFINE_list("local_steps", ["1", "10"], "Local steps per client (one row each).")
flags.DEFINE_string("output_dir", "results/speed", "Where checkpoint_cost.{json,md} go.")

ALGOS = ("fedawe", "mifa", "fedvarp", "fedavg")


def setup(algo: str, local_steps: int):
  """(build, task, hparams, num_clients)."""
  import numpy as np
  from fedjax_bench import algorithms, models
  from fedjax_bench.task.build import make_stream_task
  from fedjax_bench.data import stream
  from fedjax_bench.sim import availability, participation, world as world_lib
  del algorithms
  import importlib
  module = importlib.import_module(f"fedjax_bench.algorithms.{algo}")
  hp = {"client_lr": 0.05, "batch_size": 10, "sampling": "replacement", "weighting": "uniform",
        "server_opt": "sgd", "client_width": -1, "server_lr": 1.0}
  logreg = models.make("logreg", num_classes=10, is_image=False)
  n = 100 if algo == "fedavg" else 10_000
  task = make_stream_task(stream.leaf_stream(n, seed=0), logreg)
  steps = np.full(n, local_steps, np.int32)
  if algo == "fedavg":
    world = world_lib.make(participation.full(n), steps)
  else:
    world = world_lib.make(
        availability.make("stationary", availability.homogeneous(n, 0.1)), steps)
  if algo == "fedawe":
    hp.update(fedawe_clip=0.0, fedawe_eval="server")
  return (lambda h: module.build(task, world, h)), task, hp, n


def measure(algo: str, local_steps: int) -> dict:
  from fedjax_bench import engine

  build, task, hp, n = setup(algo, local_steps)
  saves = []
  real_save = engine._save

  def timed_save(*args, **kwargs):
    t0 = time.perf_counter()
    real_save(*args, **kwargs)
    saves.append(time.perf_counter() - t0)

  def once(ckpt_dir, **kw):
    saves.clear()
    ckpt = None
    if ckpt_dir is not None:
      ckpt = engine.Checkpointing(os.path.join(ckpt_dir, "checkpoint.npz"), **kw)
    out = engine.run(build, task, hp, seeds=[0], rounds=FLAGS.rounds,
                     eval_every=FLAGS.eval_every, checkpoint=ckpt)
    seconds = out.timing["wall_seconds"] - out.timing["compile_seconds"]
    return {"seconds": seconds, "saves": len(saves), "save_s": sum(saves) / max(len(saves), 1),
            "share": sum(saves) / seconds}

  engine._save = timed_save
  try:
    with tempfile.TemporaryDirectory() as d:
      once(None)  # warm-up: data, compilation caches
      off = once(None)["seconds"]
      every = once(d, max_share=0)
      size = os.path.getsize(os.path.join(d, "checkpoint.npz"))
      default = once(d)
  finally:
    engine._save = real_save
  return {"algo": algo, "num_clients": n, "local_steps": local_steps, "off_s": off,
          "every": every, "default": default, "bytes": size}


def main(argv):
  del argv
  from fedjax_bench import engine
  if harness.unknown("algos", FLAGS.algos, ALGOS):
    return 2
  env = harness.environment()
  share = engine.Checkpointing("").max_share
  print(f"{FLAGS.rounds} rounds, an evaluation every {FLAGS.eval_every}; no checkpoints "
        f"against a save at every evaluation and the default budget (max_share {share})")
  head = ("| algo | clients | local steps | no saves s | every save: share of run | saves | "
          "s/save | MB | default budget: share of run | saves |")
  lines = [head, "|" + "---|" * 10]
  print(head)
  rows = []
  for algo in FLAGS.algos:
    for steps in map(int, FLAGS.local_steps):
      r = measure(algo, steps)
      rows.append(r)
      e, d = r["every"], r["default"]
      line = (f"| {algo} | {r['num_clients']:,} | {steps} | {r['off_s']:.2f} | "
              f"{e['share']:.1%} | {e['saves']} | {e['save_s']:.3f} | {r['bytes'] / 1e6:.1f} | "
              f"{d['share']:.1%} | {d['saves']} |")
      lines.append(line)
      print(line, flush=True)
  harness.finish(env)
  md = ["# Checkpoint cost", "",
        f"`python -m benchmarks.speed.checkpoint_cost`: {FLAGS.rounds} rounds, an evaluation "
        f"every {FLAGS.eval_every}, one seed; each configuration without checkpoints, with a "
        f"save at every evaluation (`--checkpoint_max_share=0`) and with the default budget "
        f"({share}). Share = seconds in saves / seconds of the run (compilation excluded).", "",
        *lines, "", harness.machine(env)]
  harness.write(FLAGS.output_dir, "checkpoint_cost",
                {"max_share": share, "rounds": FLAGS.rounds, "eval_every": FLAGS.eval_every,
                 "rows": rows, "environment": env}, "\n".join(md))
  return 0


if __name__ == "__main__":
  app.run(main)
