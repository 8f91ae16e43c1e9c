"""FedRep (Collins, Hassani, Mokhtari & Shakkottai, ICML 2021, "Exploiting Shared
Representations for Personalized Federated Learning", arXiv:2102.07078), Algorithm 1: a
shared representation phi (the body) and a head h_i per client, trained in turn.

  phi^0 the initial body; every head h_i starts as the initial model's.
  Each round t:
    1. the server samples I^t (the world's participation) and sends phi^t;
    2. each i in I^t
       - makes tau_h updates of its head with the body fixed:
           h_i <- GRD(f_i(phi^t, h), h_i, alpha), tau_h times
         (--head_steps, or --head_epochs epochs: the authors' code's local_ep - local_rep_ep);
       - then its local steps on the body with its new head fixed:
           phi_i <- GRD(f_i(phi, h_i), phi^t, alpha)
         (--local_steps or --local_epochs: the paper's tau steps, the authors' code's
         local_rep_ep epochs), and sends phi_i;
    3. phi^{t+1} = phi^t + the (weighted) mean over I^t of phi_i - phi^t through the server
       optimizer (sgd at lr 1: the paper's 1/(rn) average).
  A client not sampled keeps its head.

GRD is a step of the client optimizer at round t's client learning rate on a minibatch: the
head's steps draw theirs from the round key's "head_train" purpose, the body's from its
"local_train" purpose as FedAvg's do. Only the moving part is trained in each phase (the
other is read, not updated), so every client optimizer acts on that part alone. The head is
the model's last --head_layers layers (models/layers.py); with 0 there is no head phase and
this is FedAvg bit for bit. Evaluation scores each client's (phi, h_i) on its own test data
(personal_test_accuracy and its spread; needs --holdout_fraction); test_accuracy scores the
server's body with the initial head, a model no client uses. Models with batch norm are
refused: a phase would move the running statistics of the part it holds fixed.
"""

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_bench.algorithms import fedavg, personal_parts
from fedjax_bench.core import aggregate, cohort as cohort_lib, keys, parts, rounds
from fedjax_bench.core.types import FederatedAlgorithm, Personal, with_count
from fedjax_bench.errors import UsageError
from fedjax_bench.models import layers
from fedjax_bench.settings import NON_NEGATIVE, POSITIVE, coerce, section, setting
from fedjax_bench.sim import world as world_lib


@section("fedrep")
class Hparams(fedavg.Hparams, personal_parts.HeadLayers):
  head_steps: int = setting(10, "Local steps on the head (body fixed) before the body's "
                            "steps (the paper's tau_h).", check=POSITIVE)
  head_epochs: float = setting(0.0, "If > 0, each client runs this many epochs on the head "
                               "instead of --head_steps (the authors' code: 10, with 1 body "
                               "epoch: --local_epochs=1).", check=NON_NEGATIVE)


def head_world(task, world, hp: Hparams):
  """The world with the head phase's step budgets: --head_steps, or --head_epochs epochs of
  each client's own examples."""
  steps = world_lib.client_steps(np.asarray(task.counts), local_steps=hp.head_steps,
                                 local_epochs=hp.head_epochs, batch_size=hp.batch_size,
                                 drop_last=hp.sampling == "shuffle_drop_last")
  return world._replace(client_steps=jnp.asarray(steps), max_steps=max(int(steps.max()), 1))


def build(task, world, hp: Hparams) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  personal_parts.require_client_test(task, "fedrep")
  head = personal_parts.head_mask(task, hp.head_layers)
  if parts.has_state(personal_parts.shapes(task)):
    raise UsageError("fedrep trains the head and the body in turn, each phase moving the "
                     "other's batch-norm statistics; use a model without batch norm (logreg, "
                     "mlp, a paper's CNN) or fedper")
  body = jax.tree.map(lambda m: not m, head)
  sopt = hp.optimizer()
  empty = layers.is_empty(head)
  heads_world = None if empty else head_world(task, world, hp)

  def init(key):  # every head h_i starts as the initial model's
    server = rounds.init_server(task, world, sopt, key)
    return server, personal_parts.own_rows(parts.select(server.params, head), world.num_clients)

  def round_fn(server, heads, key):
    observed, c, world_state = rounds.observe(world, server, key)
    weights = fedavg.client_weights(task, c.ids, c.valid, hp.weighting)
    metrics, client_loss = {}, None
    if not empty:
      h = cohort_lib.gather(heads, c)
      # 1. the head's steps, the body fixed at phi^t
      head_loss = lambda hd, *batch: task.loss(parts.merge(server.params, hd), *batch)
      dh, head_losses = rounds.train(task, heads_world, hp, h, c,
                                     keys.for_purpose(key, "head_train"), server.round,
                                     per_client_start=True, loss_fn=head_loss)
      h = jax.tree.map(jnp.add, h, dh)
      valid = c.valid.astype(jnp.float32)
      metrics = with_count({"head_loss": jnp.sum(head_losses * valid)
                            / jnp.maximum(jnp.sum(valid), 1.0)}, jnp.sum(valid))

      def client_loss(i):  # 2. the body's steps, client i's new head fixed
        own = jax.tree.map(lambda a: a[jnp.argmax(c.ids == i)], h)
        return lambda phi, *batch: task.loss(parts.merge(phi, own), *batch)

      heads = cohort_lib.scatter(heads, c, h)
    total, losses = rounds.train(task, world, hp, parts.select(server.params, body), c, key,
                                 server.round, sum_weights=weights, client_loss=client_loss)
    # 3. the body's mean update; the server's head is no client's and stays
    delta = parts.merge(jax.tree.map(jnp.zeros_like, server.params),
                        aggregate.mean_of_sum(total, weights))
    server = rounds.apply_update(sopt, server, delta, world_state, skip=~jnp.any(c.valid))
    return server, heads, {**rounds.metrics(observed, c, losses), **metrics}

  return FederatedAlgorithm(init, round_fn,
                            personal_params=lambda server, heads: Personal(server.params, heads))
