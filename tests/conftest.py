"""Small problems shared by the tests."""

import os
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]

from fedjax_bench.engine import compile_cache  # noqa: E402

# One persistent compilation cache for the whole suite, this process and every command line
# it starts (they inherit the variable, whatever cache dir a test gives them): the suite
# compiles many identical programs. FEDJAX_BENCH_COMPILE_CACHE=off runs it without.
os.environ.setdefault(compile_cache.ENV, compile_cache.directory() or "off")
compile_cache.enable()

from fedjax_bench import models  # noqa: E402
from fedjax_bench.algorithms import fedavg  # noqa: E402
from fedjax_bench.task.build import make_task  # noqa: E402
from fedjax_bench.data.federated import Dataset, FederatedData  # noqa: E402
from fedjax_bench.sim import participation, world as world_lib  # noqa: E402


def pytest_xdist_auto_num_workers(config):
  """``-n auto`` (setup.cfg): one worker per usable core, but no more than one per 4 GiB of
  memory (a worker holds up to about 3.6 GB); $PYTEST_XDIST_AUTO_NUM_WORKERS overrides."""
  if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
    return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
  cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
  return max(1, min(cpus or 1, int(gib // 4)))


def device_probe(script, out, devices: int, *args, timeout=300):
  """Runs ``script OUT ARGS`` on ``devices`` forced CPU devices; np.load of OUT. The
  repository is on the script's PYTHONPATH (probes import `tests.conftest` and test modules)."""
  import subprocess
  path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
  env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
             JAX_PLATFORMS="cpu", PYTHONPATH=path)
  subprocess.run([sys.executable, str(script), str(out), *args], check=True, env=env,
                 timeout=timeout)
  return np.load(out)


def one_line(excinfo) -> str:
  """The message of a raised error (pytest.raises' excinfo), checked to be one line."""
  assert "\n" not in str(excinfo.value)
  return str(excinfo.value)


def shared_tfds_dir() -> Path | None:
  """The real MNIST in TFDS format: $TFDS_DATA_DIR, else ../shared/tfds beside the repo."""
  for d in (os.environ.get("TFDS_DATA_DIR"), REPO.parent / "shared" / "tfds"):
    if d and (Path(d) / "mnist").is_dir():
      return Path(d).resolve()  # subprocesses run elsewhere: a relative path would break
  return None


def toy_dataset(num_clients=6, dim=5, classes=3, seed=0, sizes=None) -> Dataset:
  """Gaussian classes with client sizes `sizes` (default: 7, 8, 9, ...)."""
  rng = np.random.default_rng(seed)
  sizes = list(sizes or [7 + i for i in range(num_clients)])
  n = sum(sizes)
  centers = rng.normal(size=(classes, dim)) * 2
  y = rng.integers(0, classes, n)
  x = (centers[y] + rng.normal(size=(n, dim))).astype(np.float32)
  parts = np.split(np.arange(n), np.cumsum(sizes)[:-1])
  return Dataset("toy", FederatedData.from_partition(x, y, parts), x[:20], y[:20].astype(np.int32),
                 classes, (dim,), False)


def toy_setup(*, num_clients=6, cohort=3, local_steps=3, local_epochs=0.0, batch_size=4,
              model="logreg", sizes=None, part=None, dim=5, hidden=8, holdout=0.0):
  """(task, world) over `toy_dataset`; ``holdout`` > 0 holds out that fraction of each
  client's examples as its own test data (data/holdout.py, seed 0)."""
  ds = toy_dataset(num_clients=num_clients, sizes=sizes, dim=dim)
  if holdout:
    from fedjax_bench.data import holdout as holdout_lib
    ds = holdout_lib.split(ds, holdout, 0)
  task = make_task(ds, models.make(model, num_classes=3, is_image=False, mlp_hidden=(hidden,)))
  part = part or participation.uniform(num_clients, cohort)
  steps = world_lib.client_steps(ds.train.counts, local_steps=local_steps,
                                 local_epochs=local_epochs, batch_size=batch_size)
  return task, world_lib.make(part, steps)


@pytest.fixture
def fedavg_builder():
  def make(task, world):
    return lambda hp: fedavg.build(task, world, hp)
  return make


def run_rounds(alg, rounds: int = 3, first_key: int = 9):
  """(server, clients, last metrics) after ``rounds`` jitted rounds from PRNGKey(0)'s init,
  round t's key PRNGKey(first_key + t)."""
  import jax
  server, clients = alg.init(jax.random.PRNGKey(0))
  step = jax.jit(alg.round)
  metrics = None
  for t in range(rounds):
    server, clients, metrics = step(server, clients, jax.random.PRNGKey(first_key + t))
  return server, clients, metrics


def float64_gradient(task):
  """(x, xb, yb, wb) -> grad f_i at a float64 point (a list of leaves, evaluated in float32),
  as float64 leaves: the gradient oracle of the NumPy transcriptions."""
  import jax
  grad = jax.jit(jax.grad(task.loss))
  treedef = jax.tree.structure(task.init_params(jax.random.PRNGKey(0)))

  def g(x, xb, yb, wb):
    params = jax.tree.unflatten(treedef, [a.astype(np.float32) for a in x])
    return [np.asarray(a, np.float64) for a in jax.tree.leaves(grad(params, xb, yb, wb))]

  return g


def client_sampling_key(train_key, i):
  """Client i's minibatch key in a round whose local-training key is ``train_key``."""
  import jax
  from fedjax_bench.core import keys
  return keys.for_purpose(jax.random.fold_in(train_key, int(i)), "local_sampling")


def loop_sgd(grad, task, params, key, i, steps: int, *, batch_size: int, lr: float,
             sampling: str = "shuffle"):
  """Client i's local SGD written as a loop: ``steps`` steps from ``params`` on the
  minibatches of its sampling key ``key`` (`client_sampling_key`), ``grad`` the gradient of
  its loss; its final parameters (NumPy float32 leaves)."""
  import jax
  import jax.numpy as jnp
  from fedjax_bench.core import local
  off, cnt = int(task.offsets[i]), int(task.counts[i])
  p, perm = params, jnp.arange(task.max_count, dtype=jnp.int32)
  for s in range(steps):
    pos, w, perm = local.batch_positions(key, s, cnt, perm, batch_size=batch_size,
                                         sampling=sampling)
    g = grad(p, task.x[off + pos], task.y[off + pos], w)
    p = jax.tree.map(lambda a, b: np.asarray(a) - lr * np.asarray(b), p, g)
  return p


def loop_local_update(grad, task, world, hp, params, train_key, i):
  """Client i's update x_i - x (float64 leaves) from its `loop_sgd` of the round's step
  budget, shuffled epochs, at hp's client_lr and batch_size."""
  import jax
  p = loop_sgd(grad, task, params, client_sampling_key(train_key, i), i,
               int(world.client_steps[i]), batch_size=hp["batch_size"], lr=hp["client_lr"])
  return jax.tree.map(lambda a, b: np.asarray(a, np.float64) - np.asarray(b), p, params)
