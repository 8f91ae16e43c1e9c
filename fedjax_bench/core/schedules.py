"""Per-round client learning-rate schedules (t is the 0-based round, traced)."""

import jax.numpy as jnp

from fedjax_bench.errors import UsageError

SCHEDULES = ("constant", "inv_sqrt")


def check(name: str) -> None:
  if name not in SCHEDULES:
    raise UsageError(f"unknown --client_lr_schedule={name!r}; valid: {', '.join(SCHEDULES)}")


def client_lr(hp: dict, t):
  """constant: eta0; inv_sqrt: eta0 / sqrt(t / R + 1), R = client_lr_decay_rounds (FedAWE's
  eta0 / sqrt(t/10 + 1) with the default R = 10). Either is scaled by
  lr_decay_per_round^t (the FedSoftMax paper's eta0 * 0.99^t; 1, the default, is a no-op)."""
  eta0 = hp["client_lr"]
  decay = hp.get("lr_decay_per_round", 1.0)
  # Skipped at the default (a Python 1) so other programs are unchanged; a grid passes a tracer.
  if not (isinstance(decay, (int, float)) and decay == 1.0):
    eta0 = eta0 * decay ** jnp.asarray(t).astype(jnp.float32)
  name = hp.get("client_lr_schedule", "constant")
  check(name)
  if name == "inv_sqrt":
    decay = hp.get("client_lr_decay_rounds", 10)
    return eta0 / jnp.sqrt(jnp.asarray(t, jnp.float32) / decay + 1.0)
  return eta0
