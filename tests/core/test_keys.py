"""Every key drawn in a round is distinct, and no key drawn from is also one that others are
derived from: the random draws of two purposes (or of a purpose and a step) never share a
key. The draws are recorded as they execute (`jax.debug.callback` inside jax.random's
samplers and fold_in), so this sees every client, local step and leaf of a jitted round.
"""

import collections
import inspect
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_bench import models
from fedjax_bench.algorithms import area, fedef, fedprox
from fedjax_bench.core import keys
from fedjax_bench.task.build import make_task
from fedjax_bench.data import stream
from fedjax_bench.data.federated import Dataset, FederatedData
from fedjax_bench.sim import participation, world as world_lib

_SAMPLERS = ("uniform", "normal", "randint", "bernoulli", "exponential", "categorical",
             "permutation", "choice", "gumbel", "truncated_normal", "bits", "pareto", "gamma",
             "lognormal", "split")
_PACKAGE = str(Path(__file__).resolve().parents[2] / "fedjax_bench")


def _site() -> str:
  """The first caller inside fedjax_bench (or flax), as file:line."""
  for frame in inspect.stack()[2:]:
    if frame.filename.startswith(_PACKAGE) or "/flax/" in frame.filename:
      return f"{Path(frame.filename).name}:{frame.lineno}"
  return "test"


def _data(key):
  if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
    key = jax.random.key_data(key)
  return key


class KeyLog:
  """(site, key) of every draw and the parent key of every fold_in, as executed."""

  def __init__(self):
    self.drawn = collections.defaultdict(set)   # key bytes -> sites that drew from it
    self.parents = collections.defaultdict(set)  # key bytes -> sites that folded into it

  def record(self, table, site, key):
    for row in np.asarray(key).reshape(-1, 2):
      table[row.tobytes()].add(site)

  def install(self, monkeypatch):
    for name in _SAMPLERS:
      original = getattr(jax.random, name)

      def sampler(key, *args, _original=original, _name=name, **kwargs):
        site = f"{_name}@{_site()}"
        jax.debug.callback(lambda k: self.record(self.drawn, site, k), _data(key))
        return _original(key, *args, **kwargs)

      monkeypatch.setattr(jax.random, name, sampler)
    original_fold = jax.random.fold_in

    def fold_in(key, data):
      site = f"fold_in@{_site()}"
      jax.debug.callback(lambda k: self.record(self.parents, site, k), _data(key))
      return original_fold(key, data)

    monkeypatch.setattr(jax.random, "fold_in", fold_in)

  def problems(self) -> list[str]:
    out = [f"{len(s)} draws from one key: {sorted(s)}" for s in self.drawn.values()
           if len(s) > 1]
    out += [f"key drawn from ({sorted(self.drawn[k])}) is also folded into "
            f"({sorted(s)})" for k, s in self.parents.items() if k in self.drawn]
    return out


def _image_task(num_clients=4, per_client=20):
  rng = np.random.default_rng(0)
  n = num_clients * per_client
  x = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
  y = rng.integers(0, 10, n)
  ds = Dataset("fake", FederatedData.from_partition(x, y, np.split(np.arange(n), num_clients)),
               x[:8], y[:8].astype(np.int32), 10, (32, 32, 3), True,
               normalize_mean=(0.5,) * 3, normalize_std=(0.25,) * 3, augmentation="crop_flip")
  model = models.make("cnn_cinic10", num_classes=10, is_image=True, normalize=ds.normalize)
  return make_task(ds, model, train_eval_examples=0)


def test_a_round_with_augmentation_dropout_compression_and_16_steps_never_reuses_a_key(
    monkeypatch):
  task = _image_task()
  world = world_lib.make(participation.bernoulli(np.full(4, 0.9)), np.full(4, 16))
  alg = fedef.build(task, world, dict(client_lr=0.01, batch_size=4, client_width=0,
                                      compressor="stoc", stoc_bits=2, error_feedback=True,
                                      down_compressor="stoc", down_stoc_bits=2))
  run_key = keys.root(0)
  server, clients = alg.init(keys.init_key(run_key))
  log = KeyLog()
  log.install(monkeypatch)
  out = jax.jit(alg.round)(server, clients, keys.round_key(run_key, 3))
  jax.block_until_ready(out)
  sites = {s.split("@")[0] for v in log.drawn.values() for s in v}
  # Augmentation (randint, bernoulli), dropout (bernoulli), minibatches and compression
  # (uniform), participation (uniform) were all drawn, per client and per step.
  assert {"uniform", "randint", "bernoulli", "split"} <= sites, sites
  assert len(log.drawn) > 4 * 16 * 3, len(log.drawn)
  assert not log.problems(), "\n".join(log.problems()[:10])


def test_the_asynchronous_event_clock_never_reuses_a_key(monkeypatch):
  task = _image_task(num_clients=3, per_client=8)
  world = world_lib.make(participation.full(3), np.full(3, 2))
  alg = area.build(task, world, dict(client_lr=0.01, batch_size=4, client_width=0,
                                     aggregation="poisson", async_delta=2, sim_time=0.0,
                                     async_rates="normal", async_rate=10.0,
                                     async_rate_std=3.0))
  run_key = keys.root(1)
  server, clients = alg.init(keys.init_key(run_key))
  log = KeyLog()
  log.install(monkeypatch)
  step = jax.jit(alg.round)
  for t in range(4):
    server, clients, _ = step(server, clients, keys.round_key(run_key, t))
  jax.block_until_ready(server)
  assert not log.problems(), "\n".join(log.problems()[:10])


def test_a_fedprox_round_with_stragglers_never_reuses_a_key(monkeypatch):
  task = _image_task(num_clients=4, per_client=8)
  world = world_lib.make(participation.uniform(4, 3), np.full(4, 4))
  alg = fedprox.build(task, world, dict(client_lr=0.01, batch_size=4, client_width=0,
                                        local_steps=4, straggler_fraction=0.5))
  run_key = keys.root(2)
  server, clients = alg.init(keys.init_key(run_key))
  log = KeyLog()
  log.install(monkeypatch)
  _, _, m = jax.jit(alg.round)(server, clients, keys.round_key(run_key, 1))
  assert float(m["num_stragglers"]) == 1  # all but round(0.5 * 3) = 2 of the 3
  assert not log.problems(), "\n".join(log.problems()[:10])


def test_generated_data_keys_never_meet_the_runs_keys(monkeypatch):
  """An on-demand client's examples (data/stream.py) come from the "data" domain of the
  seed: none of its keys is a key of the run with the same seed (once, example keys of
  client k were round k's keys)."""
  log = KeyLog()
  log.install(monkeypatch)
  pop = stream.leaf_stream(16, seed=0, num_test=4, num_train_eval=4)
  fetch = jax.jit(lambda c, pos: pop.example_fn(c)(pos))
  for client in range(4):
    jax.block_until_ready(fetch(client, jnp.arange(6)))
  data_keys = set(log.drawn) | set(log.parents)
  run_key = keys.root(0)
  run_keys = {np.asarray(k).tobytes() for k in
              [run_key, keys.init_key(run_key)]
              + [keys.round_key(run_key, t) for t in range(8)]
              + [keys.for_purpose(keys.round_key(run_key, t), p) for t in range(8)
                 for p in keys.PURPOSES]}
  assert data_keys and not data_keys & run_keys


def test_purpose_names_are_distinct_and_fold_to_distinct_keys():
  key = keys.root(0)
  folded = {np.asarray(keys.for_purpose(key, p)).tobytes() for p in keys.PURPOSES}
  assert len(folded) == len(keys.PURPOSES)
  with pytest.raises(ValueError, match="valid: run, data"):
    keys.root(0, "model")
