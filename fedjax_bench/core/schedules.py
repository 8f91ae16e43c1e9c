"""Per-round client learning-rate schedules (t is the 0-based round, traced)."""

import jax.numpy as jnp

from fedjax_bench.errors import UsageError
from fedjax_bench.settings import POSITIVE, section, setting

SCHEDULES = ("constant", "inv_sqrt")


@section("local training")
class ClientLrSchedule:
  client_lr_schedule: str = setting("constant", "Per-round client learning rate: constant, or "
                                    "inv_sqrt = client_lr / sqrt(t / --client_lr_decay_rounds "
                                    "+ 1) (FedAWE's, with 10).", choices=SCHEDULES)
  client_lr_decay_rounds: int = setting(10, "R of --client_lr_schedule=inv_sqrt.",
                                        check=POSITIVE,
                                        used_if=lambda hp: hp.client_lr_schedule == "inv_sqrt")
  lr_decay_per_round: float = setting(1.0, "Synchronous algorithms: the client learning rate "
                                      "of round t is multiplied by this^t, on top of "
                                      "--client_lr_schedule (the FedSoftMax paper: 0.99).",
                                      check=POSITIVE, sweep=True)


def check(name: str) -> None:
  if name not in SCHEDULES:
    raise UsageError(f"unknown --client_lr_schedule={name!r}; valid: {', '.join(SCHEDULES)}")


def client_lr(hp, t):
  """constant: eta0; inv_sqrt: eta0 / sqrt(t / R + 1), R = client_lr_decay_rounds (FedAWE's
  eta0 / sqrt(t/10 + 1) with the default R = 10). Either is scaled by
  lr_decay_per_round^t (the FedSoftMax paper's eta0 * 0.99^t; 1, the default, is a no-op)."""
  eta0 = hp.client_lr
  decay = hp.lr_decay_per_round
  # Skipped at the default (a Python 1) so other programs are unchanged; a grid passes a tracer.
  if not (isinstance(decay, (int, float)) and decay == 1.0):
    eta0 = eta0 * decay ** jnp.asarray(t).astype(jnp.float32)
  if hp.client_lr_schedule == "inv_sqrt":
    decay = hp.client_lr_decay_rounds
    return eta0 / jnp.sqrt(jnp.asarray(t, jnp.float32) / decay + 1.0)
  return eta0
