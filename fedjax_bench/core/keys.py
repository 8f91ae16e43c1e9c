"""Every random key of a simulation, derived along a tree of named purposes.

  PRNGKey(seed) -> "run"  -> "init"   -> purpose -> ...
                          -> "rounds" -> round t -> purpose -> client -> sub-purpose -> step
                -> "data" -> purpose -> client / example index -> ...

Each level folds in one kind of thing: names (a domain, a phase, a purpose) or indices
(a round, a client, a local step, a leaf). A name is folded in as a fixed 32-bit hash of
the name (`PURPOSES`, distinct by construction), so two purposes never share a key, and a
name's key never equals an index's key at the same level unless code mixes the two kinds,
which these helpers do not. A client's draws depend only on (seed, round, client), never
on which other clients share its cohort. Data generated from a seed lives in the "data"
domain, so it never reuses the run's keys of the same seed.
"""

import zlib

import jax
import jax.numpy as jnp

_NAMES = (
    # domains of a seed
    "run", "data",
    # phases of a run
    "init", "rounds",
    # purposes of the init and round keys
    "participation", "local_train", "compression", "availability", "delay", "server",
    "events", "selection", "diagnostics",
    # sub-purposes of a client's local-training key
    "local_sampling", "local_noise",
    # the asynchronous aggregation clock (sim/asynchrony), beside the clients' clocks
    "aggregation_clock",
    # purposes of the data domain (data/stream.py)
    "client_models", "examples",
    # round-key purposes added since (appended: a run's recorded bindings stay as they were)
    "stragglers", "local_optimum", "dp_noise", "personal_train",
    # IFCA's cluster models after the first (algorithms/ifca.py)
    "clusters",
    # DP-FedAvg with adaptive clipping: the noise on the unclipped count (algorithms/dp_fedavg.py)
    "dp_count_noise",
    # a run's evaluation after t rounds (`eval_key`) and its fine-tuning (--finetune_steps);
    # FedRep's head steps before the body's (algorithms/fedrep.py)
    "evaluation", "finetune", "head_train",
)
PURPOSES = {name: zlib.crc32(f"fedjax_bench/{name}".encode()) for name in _NAMES}
assert len(set(PURPOSES.values())) == len(PURPOSES)


def for_purpose(key: jax.Array, purpose: str) -> jax.Array:
  """The key of a named purpose (a domain, phase or purpose of `PURPOSES`) under ``key``."""
  return jax.random.fold_in(key, jnp.uint32(PURPOSES[purpose]))


def root(seed: int, domain: str = "run") -> jax.Array:
  """A seed's key of a domain: "run" for the simulation, "data" for generated data."""
  if domain not in ("run", "data"):
    raise ValueError(f"unknown key domain {domain!r}; valid: run, data")
  return for_purpose(jax.random.PRNGKey(seed), domain)


def init_key(run_key: jax.Array) -> jax.Array:
  """The key of a run's initialization (its algorithm's and its world's)."""
  return for_purpose(run_key, "init")


def round_key(run_key: jax.Array, t) -> jax.Array:
  """The key of round (or asynchronous event) t of a run."""
  return jax.random.fold_in(for_purpose(run_key, "rounds"), t)


def eval_key(run_key: jax.Array, t) -> jax.Array:
  """The key of a run's evaluation after t rounds (a phase of its own beside "rounds", so
  nothing an evaluation draws is drawn by the training)."""
  return jax.random.fold_in(for_purpose(run_key, "evaluation"), t)


def per_client(key: jax.Array, client_ids: jax.Array) -> jax.Array:
  """One key per client id: [cohort] keys."""
  return jax.vmap(lambda i: jax.random.fold_in(key, i))(client_ids)
