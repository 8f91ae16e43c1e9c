"""How fast can logistic-regression local training be with XLA's dots alone?

  python -m benchmarks.speed.dot_ceiling [--batch=32] [--clients=4] [--steps=10]

Times local SGD steps that are nothing but the two products of a softmax-regression step
(logits = x W^T, then W -= lr * g^T x with g = logits: no input conversion, softmax,
sampling, masking or aggregation), one client at a time in a scan, on one CPU device.
Every CPU device runs its own clients in the engine, so the devices times this rate
bounds what any logreg engine built on XLA:CPU's dots reaches; `speed.py`'s ratio
against the per-client loop cannot beat that bound over the loop's rate.
"""

import os

if __name__ == "__main__":  # one CPU device; not on import (tests)
  os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=1")

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from benchmarks.speed import harness  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("batch", 32, "Examples per step (logreg32: 32; W1: 10).")
flags.DEFINE_integer("clients", 4, "Clients per timed call (one at a time).")
flags.DEFINE_integer("steps", 10, "Local steps per client.")
flags.DEFINE_integer("repeats", 50, "Timed calls; the best is reported.")

FEATURES, CLASSES = 784, 10


def local_steps(w, x):
  """w: [clients, K, D]; x: [clients, steps, B, D]."""
  def client(w, x):
    def step(w, xb):
      return w - 0.01 * ((xb @ w.T).T @ xb), None
    return jax.lax.scan(step, w, x)[0]
  return jax.lax.map(lambda a: client(*a), (w, x))


def main(argv):
  del argv
  c, s, b = FLAGS.clients, FLAGS.steps, FLAGS.batch
  x = jax.random.normal(jax.random.PRNGKey(0), (c, s, b, FEATURES))
  w = jnp.zeros((c, CLASSES, FEATURES))
  f = jax.jit(local_steps)
  best = harness.best_seconds(lambda: f(w, x), FLAGS.repeats)
  rate = c * s / best
  flops = 2 * 2 * b * FEATURES * CLASSES
  cores = len(os.sched_getaffinity(0))
  print(f"batch {b}: {rate:,.0f} client-steps/s on one device ({rate * flops / 1e9:.1f} "
        f"GFLOP/s); bound for {cores} devices: {cores * rate:,.0f} client-steps/s")


if __name__ == "__main__":
  app.run(main)
