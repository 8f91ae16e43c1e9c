"""IFCA, the Iterative Federated Clustering Algorithm (Ghosh, Chung, Yin & Ramchandran,
NeurIPS 2020, "An Efficient Framework for Clustered Federated Learning"), Algorithm 1 with
option II (model averaging).

The server holds k cluster models theta_1..theta_k. Each round:
  1. observe the available clients M_t (the world's participation) and send them every
     theta_j;
  2. each i in M_t estimates its cluster, j_i = argmin_j F(theta_j; Z_i), F its mean loss
     over all of its training examples (ties to the lowest j), and runs local SGD from
     theta_{j_i} (LocalUpdate) to theta~_i;
  3. for every j chosen by some client,
       theta_j <- theta_j + sum_{i: j_i = j} w_i (theta~_i - theta_j) / sum_{i: j_i = j} w_i
     (w_i = 1, --weighting=uniform: option II's average of the theta~_i; or n_i), through
     the server optimizer, each cluster with its own state (sgd at lr 1: the paper);
     a cluster no client chose keeps its model and its optimizer state.
The paper's experiments initialize the theta_j at random: here cluster 0 from FedAvg's
initial key, cluster j >= 1 from the "clusters" key purpose folded with j (a model that starts
at zero, --zero_init or --model=linear, is refused for k > 1: its clusters would never part).
k = 1 is FedAvg bit for bit. F has no l2 term (`client_scores`). From a random start all
clients may keep choosing one cluster (the others then never train); which start separates
the groups depends on the seed.

Evaluation: every client picks its cluster by the same rule on all of its training data,
and its pick is scored on its own test data (personal_test_*, needs --holdout_fraction or a
dataset with per-client test data); the central test_* metrics score the model of the cluster
most clients pick (ties to the lowest j). The picks are gathered as [num_clients, ...] models
(O(N d) at evaluation only). A round reports cluster{j}_clients, how many of its clients
chose cluster j.

Vectorized: the cohort's k losses are one vmap over clusters of a vmap over clients; each
client trains only its own cluster's model (a per-client start), its update goes into the
per-cluster sums as a one-hot [k, ...] stack, and the k server steps are one vmap: no
Python loop runs over clients or steps. Server memory is k models (and k optimizer states).
"""

import jax
import jax.numpy as jnp
import optax

from fedjax_bench.algorithms import fedavg
from fedjax_bench.core import client_scores, keys, rounds
from fedjax_bench.core.rounds import ServerState
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.errors import UsageError
from fedjax_bench.models.dense import Linear
from fedjax_bench.settings import POSITIVE, coerce, section, setting


@section("ifca")
class Hparams(fedavg.Hparams):
  ifca_clusters: int = setting(2, "k: cluster models; each sampled client trains the one of "
                               "lowest loss on its own data (1 is FedAvg).", check=POSITIVE)


def init_models(task, key, k: int):
  """The k cluster models stacked [k, ...]: cluster 0 from FedAvg's initial key
  (`rounds.init_server`'s), cluster j >= 1 from the "clusters" purpose folded with j."""
  first = keys.for_purpose(key, "init")
  others = keys.for_purpose(key, "clusters")
  models = [task.init_params(first)]
  models += [task.init_params(jax.random.fold_in(others, j)) for j in range(1, k)]
  return jax.tree.map(lambda *a: jnp.stack(a), *models)


def choose(losses: jax.Array) -> jax.Array:
  """[k, n] losses -> [n] each column's cluster of lowest loss, ties to the lowest index."""
  return jnp.argmin(losses, axis=0).astype(jnp.int32)


def assign(task, models) -> jax.Array:
  """[num_clients] every client's cluster: the lowest loss of the stacked ``models`` on all
  of its training examples (`client_scores.per_client`, one pass per cluster)."""
  return choose(jax.vmap(lambda p: client_scores.per_client(task, p)[0])(models))


def build(task, world, hp: Hparams) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  if task.client_test is None:
    raise UsageError("ifca is scored on each client's pick of cluster model on its own test "
                     "data: give --holdout_fraction (e.g. 0.2)")
  k = rounds.static(hp.ifca_clusters, "ifca_clusters")
  if k > 1 and (getattr(task.model, "zero_init", False) or isinstance(task.model, Linear)):
    raise UsageError("--ifca_clusters > 1 needs cluster models that start apart: this model "
                     "starts every cluster at zero (--zero_init, --model=linear), so no client "
                     "would ever leave cluster 0; valid: a randomly initialized model (logreg "
                     "without --zero_init, mlp, the CNNs)")
  sopt = hp.optimizer()
  clusters = jnp.arange(k)
  width = client_scores.cohort_width(task, hp.client_width)

  def init(key):  # as `rounds.init_server`, with k models and an optimizer state for each
    models = init_models(task, key, k)
    return ServerState(models, jax.vmap(sopt.init)(models), jnp.zeros((), jnp.int32),
                       world.init_state(key)), ()

  def round_fn(server: ServerState, clients, key):
    mask, c, world_state = rounds.observe(world, server, key)
    models = server.params
    # F(theta_j; Z_i) for every cluster j and cohort client i: [k, cap].
    losses = jax.vmap(lambda p: client_scores.of_cohort(task, p, c.ids, c.valid,
                                                        width=width))(models)
    choice = choose(losses)
    chose = (choice[:, None] == clusters) & c.valid[:, None]  # [cap, k] one-hot
    weights = fedavg.client_weights(task, c.ids, c.valid, hp.weighting)

    def one_hot(i, delta):  # client i's update in its cluster's slot of a [k, ...] stack
      s = jnp.any(chose & ((c.ids == i) & c.valid)[:, None], axis=0).astype(jnp.float32)
      return jax.tree.map(lambda d: s.reshape((k,) + (1,) * d.ndim).astype(d.dtype) * d[None],
                          delta)

    start = jax.tree.map(lambda a: a[choice], models)
    total, train_losses = rounds.train(task, world, hp, start, c, key, server.round,
                                       per_client_start=True, sum_weights=weights,
                                       transform=one_hot)
    norm = weights @ chose.astype(jnp.float32)  # [k] sum of the weights of j's clients
    scale = jnp.where(norm > 0, 1.0 / jnp.where(norm > 0, norm, 1.0), 0.0)
    delta = jax.tree.map(lambda s: s * scale.reshape((k,) + (1,) * (s.ndim - 1)).astype(s.dtype),
                         total)
    skip = ~jnp.any(chose, axis=0)  # [k]: nobody chose the cluster, it stays as it was

    def step(params, opt_state, d, skip_j):
      updates, new_state = sopt.update(jax.tree.map(jnp.negative, d), opt_state, params)
      new = optax.apply_updates(params, updates)
      keep = lambda a, b: jax.tree.map(lambda x, y: jnp.where(skip_j, y, x), a, b)
      return keep(new, params), keep(new_state, opt_state)

    params, opt_state = jax.vmap(step)(models, server.opt_state, delta, skip)
    server = ServerState(params, opt_state, server.round + 1, world_state, server.aux)
    counts = jnp.sum(chose, axis=0).astype(jnp.float32)
    return server, clients, {**rounds.metrics(mask, c, train_losses),
                             **{f"cluster{j}_clients": counts[j] for j in range(k)}}

  def eval_params(server, clients):
    """The model of the cluster most clients pick (ties to the lowest index)."""
    picks = assign(task, server.params)
    largest = jnp.argmax(jnp.sum(picks[:, None] == clusters, axis=0))
    return jax.tree.map(lambda a: a[largest], server.params)

  def personal_params(server, clients):
    """Every client's pick of cluster model, [num_clients, ...]."""
    picks = assign(task, server.params)
    return jax.tree.map(lambda a: a[picks], server.params)

  return FederatedAlgorithm(init, round_fn, eval_params=eval_params,
                            personal_params=personal_params)
