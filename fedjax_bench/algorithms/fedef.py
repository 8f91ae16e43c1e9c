"""Fed-EF (Li & Li): compressed uplink with error feedback (Section 3.2, Algorithm 2).

Sign convention (the paper's): Delta_i = theta_t - theta_i (points uphill).

  for i in M_t:   Delta_i = ClientUpdate(theta_t)
                  a_i = Delta_i + e_i                  (e_i = 0 without error feedback)
                  send C(a_i);  e_i = a_i - C(a_i)      (absent clients keep e_i, Section 4.3)
  agg = (1/|M_t|) sum_i C(a_i)
  theta_{t+1} = theta_t - eta * direction(agg)        (SGD, or the paper's AMSGrad)

Names: `fedsgd` / `fedams` are the SGD / AMSGrad servers with any --compressor (identity:
full precision; --error_feedback=false: direct compression, Algorithm 1, or Stoc);
`fedef_sgd` / `fedef_ams` are the paper's methods (error feedback on). Options: error
restarting (Section 5.4, Fig. 9: drop an error older than S rounds from round R on) and two-way
compression (Section 6, Algorithm 3: the server compresses its step with its own error phi).
"""

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from fedjax_bench.algorithms import compression
from fedjax_bench.core import aggregate, device_memory, keys, rounds
from fedjax_bench.core import cohort as cohort_lib
from fedjax_bench.core.types import FederatedAlgorithm, Variant, variant as make_variant, with_count
from fedjax_bench.errors import UsageError
from fedjax_bench.settings import NON_NEGATIVE, coerce, section, setting


class Errors(NamedTuple):
  error: Any         # [n, ...] e_i, or () without error feedback
  last: jax.Array    # [n] int32 last round client i took part, -1 before


class Aux(NamedTuple):
  phi: Any                  # the server's downlink error (two-way), or ()
  messages_up: jax.Array    # int32: client-to-server messages sent so far
  # Bits are reported as count x bits-per-message, one rounding, never a running float sum.


@section("fedef")
class Hparams(rounds.Synchronous, compression.Compression):
  error_feedback: bool = setting(True, "fedsgd/fedams: keep each client's compression error "
                                 "and add it back next time (false: direct compression).")
  ef_restart_after: int = setting(0, "Error restarting: zero a client's error last updated "
                                  "more than S rounds ago (0: off).", check=NON_NEGATIVE)
  ef_restart_from: int = setting(0, "Error restarting starts at this round.",
                                 check=NON_NEGATIVE)


@section("fedef")
class AmsHparams(Hparams):
  """fedams, fedef_ams: the server runs the paper's AMSGrad, whatever --server_opt says."""

  def optimizer_name(self) -> str:
    return "amsgrad"


def build(task, world, hp: Hparams, *, server_opt: str | None = None,
          error_feedback: bool | None = None, name: str = "fedsgd") -> FederatedAlgorithm:
  hp = coerce(AmsHparams if server_opt == "amsgrad" else Hparams, hp)
  opt = hp.server_opt
  if server_opt is not None and opt not in ("sgd", server_opt):
    raise UsageError(f"--algo={name} uses --server_opt={server_opt}; got {opt}")
  if opt not in ("sgd", "amsgrad"):
    raise UsageError(f"--algo={name}: --server_opt={opt}; valid: sgd, amsgrad")
  sopt = hp.optimizer()
  ef = hp.error_feedback
  if error_feedback is not None and not ef:
    raise UsageError(f"--algo={name} is error feedback; for compression without it use "
                     "--algo=fedsgd or fedams with --error_feedback=false")
  up = hp.compressor_of("up")
  down = None if hp.down_compressor == "none" else hp.compressor_of("down")
  ef = ef and up.name != "identity"
  restart_after = rounds.static(hp.ef_restart_after, "ef_restart_after")
  restart_from = hp.ef_restart_from
  n = world.num_clients

  shapes = jax.eval_shape(task.init_params, jax.random.PRNGKey(0))
  d = sum(math.prod(s.shape) for s in jax.tree.leaves(shapes))
  up_bits, dense_bits = up.bits(shapes), compression.dense_bits(shapes)
  down_bits = down.bits(shapes) if down else dense_bits
  if ef:
    # One device's rows: the engine shards client states over the devices runs leave over.
    device_memory.check_fits(cohort_lib.rows_here(n) * d * 4,
                      f"the error-feedback state ({n} clients x {d} parameters)",
                      "use fewer clients or a smaller model, or shard the runs over more "
                      "devices")

  def init(key):
    server = rounds.init_server(task, world, sopt, key)
    zeros = lambda: jax.tree.map(jnp.zeros_like, server.params)
    server = server._replace(aux=Aux(zeros() if down else (), jnp.zeros((), jnp.int32)))
    error = (jax.tree.map(lambda a: jnp.zeros((n,) + a.shape, a.dtype), server.params)
             if ef else ())
    return server, Errors(error, jnp.full(n, -1, jnp.int32))

  def round_fn(server, clients: Errors, key):
    t = server.round
    mask, c, world_state = rounds.observe(world, server, key)
    deltas, losses = rounds.train(task, world, hp, server.params, c, key, t)
    grads = jax.tree.map(jnp.negative, deltas)  # the paper's Delta_i
    if ef:
      err = cohort_lib.gather(clients.error, c)
      if restart_after > 0:
        last = cohort_lib.gather(clients.last, c)
        stale = (t >= restart_from) & (last >= 0) & (last < t - restart_after)
        err = jax.tree.map(lambda e: jnp.where(_rows(stale, e), 0.0, e), err)
      sent_in = jax.tree.map(jnp.add, grads, err)
    else:
      sent_in = grads
    ckeys = keys.per_client(keys.for_purpose(key, "compression"), c.ids)
    sent = jax.vmap(up.apply)(ckeys, sent_in)
    active = cohort_lib.members(clients.last, c)
    error = clients.error
    if ef:
      error = cohort_lib.scatter(error, c, jax.tree.map(jnp.subtract, sent_in, sent))
    clients = Errors(error, jnp.where(active, t, clients.last))

    agg = aggregate.weighted_mean(sent, c.valid)
    updates, opt_state = sopt.update(agg, server.opt_state, server.params)
    phi = server.aux.phi
    if down is not None:
      # Two-way: the server sends C_down(step + phi) and keeps what it dropped. The step
      # includes eta (an equivalent form for positively homogeneous compressors).
      step = jax.tree.map(lambda u, p: -u + p, updates, phi)
      sent_down = down.apply(keys.for_purpose(key, "server"), step)
      phi = jax.tree.map(jnp.subtract, step, sent_down)
      updates = jax.tree.map(jnp.negative, sent_down)
    anyone = jnp.any(c.valid)
    keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(anyone, a, b), new, old)
    params = keep(optax.apply_updates(server.params, updates), server.params)
    messages = server.aux.messages_up + jnp.sum(c.valid).astype(jnp.int32)
    aux = Aux(keep(phi, server.aux.phi), messages)
    sent_bits = lambda count, bits: count.astype(jnp.float32) * jnp.float32(bits)
    server = rounds.ServerState(params, keep(opt_state, server.opt_state), t + 1, world_state,
                                aux)
    mean_in = aggregate.weighted_mean(sent_in, c.valid)
    compressed_mean = up.apply(keys.for_purpose(key, "diagnostics"), mean_in)
    metrics = {
        **rounds.metrics(mask, c, losses),
        "cum_uplink_bits": sent_bits(messages, up_bits) / n,
        "cum_uplink_bits_per_participant": sent_bits(t + 1, up_bits),
        "cum_downlink_bits": (sent_bits(t + 1, down_bits) if down
                              else sent_bits(messages, dense_bits) / n),
        "compression_ratio": jnp.float32(dense_bits / up_bits),
        # Over the participants: undefined in a round without any.
        **with_count({"q_a2": compression.discrepancy(agg, mean_in),
                      "q_c2": compression.discrepancy(compressed_mean, mean_in)}, anyone),
    }
    return server, clients, metrics

  return FederatedAlgorithm(init, round_fn)


def _rows(flag, a):
  return flag.reshape(flag.shape + (1,) * (a.ndim - 1))


def variant(name: str, *, server_opt=None, error_feedback=None) -> Variant:
  return make_variant(build, AmsHparams if server_opt == "amsgrad" else Hparams,
                      server_opt=server_opt, error_feedback=error_feedback, name=name)


fedsgd = variant("fedsgd", server_opt="sgd")
fedams = variant("fedams", server_opt="amsgrad")
fedef_sgd = variant("fedef_sgd", server_opt="sgd", error_feedback=True)
fedef_ams = variant("fedef_ams", server_opt="amsgrad", error_feedback=True)
