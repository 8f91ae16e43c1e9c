"""The client optimizer of local training (--client_opt, core/local.py's ClientOptimizer):
Adam (Kingma & Ba 2015, Algorithm 1), AdamW (Loshchilov & Hutter 2019, Algorithm 2), heavy-ball
momentum and global-norm gradient clipping written as plain NumPy per-client loops, compared
with FedAvg's vectorized rounds under partial participation; momentum 0 is sgd bit for bit;
sgd is the program of before; which algorithms refuse it, and the fingerprints."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tests.conftest import run_rounds, toy_setup
from fedjax_bench import algorithms, config, data, experiment
from fedjax_bench.algorithms import fedavg
from fedjax_bench.core import keys, local, rounds, schedules
from fedjax_bench.engine import run_dir
from fedjax_bench.errors import UsageError

N, COHORT = 8, 3


def _numpy_opt(hp):
  """(init(x) -> state, step(x, g, state) -> (x, state)) of hp's client optimizer, from the
  papers' pseudocode, in float64 NumPy over a list of arrays."""
  name, lr = hp.get("client_opt", "sgd"), hp["client_lr"]
  b1, b2 = hp.get("client_beta1", 0.9), hp.get("client_beta2", 0.999)
  eps, beta = hp.get("client_eps", 1e-8), hp.get("client_momentum", 0.9)
  lam = lr * hp.get("client_weight_decay", 1e-4)  # the paper's lambda (eta_t = 1)

  def init(x):
    zeros = [np.zeros_like(a) for a in x]
    return {"t": 0, "m": zeros, "v": [np.zeros_like(a) for a in x]}

  def step(x, g, s):
    if name == "sgd":
      return [a - lr * b for a, b in zip(x, g)], s
    if name == "momentum":  # m <- g + beta m;  x <- x - lr m
      m = [gi + beta * mi for gi, mi in zip(g, s["m"])]
      return [a - lr * mi for a, mi in zip(x, m)], {**s, "m": m}
    # Kingma & Ba, Algorithm 1 (AdamW: Loshchilov & Hutter, Algorithm 2, lines 6-12).
    t = s["t"] + 1
    m = [b1 * mi + (1 - b1) * gi for mi, gi in zip(s["m"], g)]
    v = [b2 * vi + (1 - b2) * gi * gi for vi, gi in zip(s["v"], g)]
    out = []
    for a, mi, vi in zip(x, m, v):
      m_hat, v_hat = mi / (1 - b1 ** t), vi / (1 - b2 ** t)
      decay = lam * a if name == "adamw" else 0.0
      out.append(a - (lr * m_hat / (np.sqrt(v_hat) + eps) + decay))
    return out, {"t": t, "m": m, "v": v}

  return init, step


def _loop_fedavg(task, world, hp, x, key, t, norms):
  """One FedAvg round (uniform weights, server sgd at server_lr) as a Python loop over the
  cohort and each client's local steps; every client's optimizer state starts at zero."""
  mask = np.asarray(world.participation.sample(keys.for_purpose(key, "participation"), t))
  grad = jax.jit(jax.grad(task.loss))
  train_key = keys.for_purpose(key, "local_train")
  init, step = _numpy_opt(hp)
  clip = hp.get("client_grad_clip", 0.0)
  treedef = jax.tree.structure(x)
  x = [np.asarray(a, np.float64) for a in jax.tree.leaves(x)]
  deltas = []
  for i in np.flatnonzero(mask):
    k = keys.for_purpose(jax.random.fold_in(train_key, int(i)), "local_sampling")
    off, cnt, steps = int(task.offsets[i]), int(task.counts[i]), int(world.client_steps[i])
    y, state, perm = list(x), init(x), jnp.arange(task.max_count, dtype=jnp.int32)
    for s in range(steps):
      pos, w, perm = local.batch_positions(k, s, cnt, perm, batch_size=hp["batch_size"],
                                           sampling="shuffle")
      params = jax.tree.unflatten(treedef, [a.astype(np.float32) for a in y])
      g = [np.asarray(a, np.float64) for a in
           jax.tree.leaves(grad(params, task.x[off + pos], task.y[off + pos], w))]
      norm = np.sqrt(sum(np.sum(a * a) for a in g))
      norms.append(norm)
      if clip and norm > clip:  # global-norm clipping: g * clip / ||g||
        g = [a * (clip / norm) for a in g]
      y, state = step(y, g, state)
    deltas.append([a - b for a, b in zip(y, x)])
  mean = [sum(d[j] for d in deltas) / len(deltas) for j in range(len(x))]
  return jax.tree.unflatten(treedef, [a + hp["server_lr"] * d for a, d in zip(x, mean)])


@pytest.mark.parametrize("opt", [
    dict(client_opt="adam", client_lr=0.05),
    dict(client_opt="momentum", client_lr=0.1, client_momentum=0.9),
    dict(client_opt="sgd", client_lr=0.3, client_grad_clip=0.5),
    dict(client_opt="adamw", client_lr=0.05, client_beta1=0.5, client_beta2=0.9,
         client_eps=1e-3, client_weight_decay=0.5, client_grad_clip=0.5),
])
def test_rounds_equal_the_papers_optimizers_as_numpy_loops(opt):
  # Clients of 7..14 examples, batch 4, one epoch: 2 to 4 local steps, so K_i differs.
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_epochs=1.0, batch_size=4)
  hp = dict(server_lr=0.7, batch_size=4, local_epochs=1.0, **opt)
  alg = fedavg.build(task, world, hp)
  server, clients = alg.init(jax.random.PRNGKey(0))
  server0 = server
  step = jax.jit(alg.round)
  x, norms, seen = server.params, [], np.zeros(N, bool)
  for t in range(3):
    key = jax.random.PRNGKey(40 + t)
    x = _loop_fedavg(task, world, hp, x, key, t, norms)
    server, clients, _ = step(server, clients, key)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6),
                 server.params, x)
    seen |= np.asarray(world.participation.sample(keys.for_purpose(key, "participation"), t))
  assert (~seen).any()  # partial participation: some client never trained
  # The check can fail: the rounds are not plain SGD's, and a clip binds on some steps only.
  sgd = {**hp, "client_opt": "sgd", "client_grad_clip": 0.0}
  x = server0.params
  for t in range(3):
    x = _loop_fedavg(task, world, sgd, x, jax.random.PRNGKey(40 + t), t, [])
  assert not np.allclose(jax.tree.leaves(x)[0], jax.tree.leaves(server.params)[0], atol=1e-4)
  if opt.get("client_grad_clip"):
    assert min(norms) < opt["client_grad_clip"] < max(norms)


def test_momentum_zero_is_sgd_bit_for_bit():
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_steps=5, batch_size=4,
                          model="mlp")
  hp = dict(client_lr=0.3, server_lr=0.7, batch_size=4, local_steps=5)
  out = []
  for extra in ({}, {"client_opt": "momentum", "client_momentum": 0.0},
                {"client_opt": "momentum", "client_momentum": 0.5}):
    server, _, m = run_rounds(fedavg.build(task, world, {**hp, **extra}))
    out.append((jax.tree.leaves(server.params), float(m["client_loss"])))
  for a, b in zip(out[0][0], out[1][0]):
    np.testing.assert_array_equal(a, b)
  assert out[0][1] == out[1][1]
  assert not np.array_equal(out[0][0][0], out[2][0][0])  # momentum 0.5 moves otherwise


def test_sgd_is_the_program_of_before():
  """The default client optimizer is ``optax.sgd(lr)`` itself: the local training's jaxpr
  is the one an explicit ``optax.sgd`` gives (no clip, no state), for every step size form."""
  task, world = toy_setup(num_clients=N, cohort=COHORT)
  # XLA's loop: the fused kernel would replace this logistic regression's default steps
  # (tests/core/test_logreg_sgd.py).
  hp = rounds.Synchronous(client_lr=0.2, lr_decay_per_round=0.9, fused_logreg=False)
  server = rounds.init_server(task, world, optax.sgd(1.0), jax.random.PRNGKey(0))
  key = jax.random.PRNGKey(1)
  _, c, _ = rounds.observe(world, server, key)

  def program(make_opt):  # the optimizer made inside the trace, as a round makes it
    return str(jax.make_jaxpr(lambda p, t: rounds.train(
        task, world, hp, p, c, key, t, opt=make_opt and make_opt(schedules.client_lr(hp, t))))(
            server.params, jnp.int32(3)))

  explicit = program(optax.sgd)
  assert program(None) == explicit
  assert program(hp.client_optimizer) == explicit
  clipped = rounds.Synchronous(client_lr=0.2, lr_decay_per_round=0.9, client_grad_clip=1.0)
  assert program(clipped.client_optimizer) != explicit


# Methods whose update reads the plain SGD steps (docs/algorithms.md, "Client optimizers"),
# and those that train with any client optimizer.
SGD_ONLY = {"scaffold", "feddyn", "fednova", "qfedavg"}
ANY_OPT = {"fedavg", "fedavg_all", "fedavg_known", "fedau", "f3ast", "fedawe", "mifa", "fedvarp",
           "fedsgd", "fedams", "fedef_sgd", "fedef_ams", "fedmax", "fedmax_k", "fedsoftmax",
           "fedalign", "fedavg_priority", "fedavg_all_clients", "local_model", "fedalign_prox",
           "fedprox_priority", "fedprox_all_clients", "fedprox", "ditto", "dp_fedavg"}
_SMALL = dict(num_clients=12, local_steps=2, batch_size=4, train_eval_examples=0,
              clients_per_round=4, num_priority=2, test_mix="official", holdout_fraction=0.25)


def test_every_local_training_reads_the_client_optimizer():
  """Each algorithm that declares --client_opt either refuses anything but sgd in one line
  or trains with it (its round's program changes, in each of its local trainings: Ditto's
  personal steps too); the asynchronous ones do not declare it (refused as having no
  effect). An algorithm outside the lists above that needs settings of its own to be
  built is skipped."""
  dataset = data.load("synthetic", num_clients=12, partition_seed=0)
  refused, checked, undeclared = set(), set(), set()
  for name, algo in sorted(algorithms.ALGORITHMS.items()):
    if "client_opt" not in config.specs(name):
      assert name not in SGD_ONLY | ANY_OPT, name
      undeclared.add(name)
      with pytest.raises(UsageError, match="--client_opt has no effect"):
        config.resolve(algo=name, client_opt="adam")
      continue
    assert algo.kind != algorithms.ASYNCHRONOUS, name
    small = {k: v for k, v in _SMALL.items() if k in config.specs(name)}
    programs = {}
    for opt in ("sgd", "adam"):
      try:
        exp = experiment.setup(config.resolve(algo=name, client_opt=opt, **small),
                               dataset=dataset)
      except UsageError as e:
        if opt == "sgd" and name not in SGD_ONLY | ANY_OPT:
          break
        assert opt == "adam" and f"--client_opt=adam is not valid for --algo={name}" in str(e)
        assert "\n" not in str(e) and "valid: --client_opt=sgd" in str(e)
        refused.add(name)
        continue
      alg = exp.build(exp.hparams)
      server, clients = alg.init(jax.random.PRNGKey(0))
      programs[opt] = str(jax.make_jaxpr(alg.round)(server, clients, jax.random.PRNGKey(1)))
    checked.add(name)
    if name not in refused and programs:
      # Adam's moments: one sqrt per parameter leaf and local training more than sgd's.
      trainings = 2 if name == "ditto" else 1
      assert programs["adam"].count("sqrt") >= programs["sgd"].count("sqrt") + 2 * trainings, name
  assert refused & (SGD_ONLY | ANY_OPT) == SGD_ONLY
  assert checked >= SGD_ONLY | ANY_OPT
  assert undeclared >= {"area", "fedbuff", "asfedavg", "mifa_async", "sfedavg"}


def test_estimated_local_optimum_trains_with_the_client_optimizer():
  """fedmax's F_i* estimate (--local_optimum=estimate) runs the client optimizer: its
  program gains Adam's square roots, and `local_optimum.estimate` with Adam is Adam's."""
  dataset = data.load("synthetic", num_clients=12, partition_seed=0)
  small = dict(num_clients=12, local_steps=2, batch_size=4, train_eval_examples=0,
               local_optimum="estimate", local_optimum_steps=3)
  sqrts = {}
  for opt in ("sgd", "adam"):
    exp = experiment.setup(config.resolve(algo="fedmax", client_opt=opt, **small),
                           dataset=dataset)
    init = exp.build(exp.hparams).init
    sqrts[opt] = str(jax.make_jaxpr(init)(jax.random.PRNGKey(0))).count("sqrt")
  assert sqrts["adam"] >= sqrts["sgd"] + 2

  from fedjax_bench.algorithms import local_optimum
  task, _ = toy_setup(num_clients=4)
  params = task.init_params(jax.random.PRNGKey(0))
  run = lambda opt: np.asarray(local_optimum.estimate(
      task, params, jax.random.PRNGKey(1), steps=3, lr=0.1, batch_size=4, opt=opt))
  assert np.array_equal(run(None), run(optax.sgd(0.1)))
  assert not np.allclose(run(None), run(optax.adam(0.1)))


@pytest.mark.parametrize("settings,message", [
    (dict(client_opt="nadam"), "--client_opt='nadam' is not valid; valid: sgd, momentum, adam, "
     "adamw"),
    (dict(client_momentum=0.5), "--client_momentum has no effect on --algo=fedavg"),
    (dict(client_opt="adam", client_momentum=0.5), "--client_momentum has no effect"),
    (dict(client_beta1=0.5), "--client_beta1 has no effect"),
    (dict(client_opt="adam", client_weight_decay=0.1), "--client_weight_decay has no effect"),
    (dict(client_opt="momentum", client_momentum=1.0), "--client_momentum must be in [0, 1)"),
    (dict(client_opt="adam", client_beta2=1.0), "--client_beta2 must be in [0, 1)"),
    (dict(client_opt="adamw", client_eps=0.0), "--client_eps must be positive"),
    (dict(client_opt="adamw", client_weight_decay=-1.0), "--client_weight_decay must be >= 0"),
    (dict(client_grad_clip=-1.0), "--client_grad_clip must be >= 0"),
])
def test_bad_client_optimizer_settings_are_one_line_errors(settings, message):
  with pytest.raises(UsageError, match=re.escape(message)):
    config.resolve(algo="fedavg", **settings)


def test_sweeping_a_setting_of_another_optimizer_is_refused():
  with pytest.raises(UsageError, match="--client_beta1 has no effect"):
    config.check_sweep(config.resolve(algo="fedavg"), {"client_beta1": [0.8, 0.9]})
  config.check_sweep(config.resolve(algo="fedavg", client_opt="adam"),
                     {"client_beta1": [0.8, 0.9]})


def test_clip_is_refused_by_sgd_only_methods():
  task, world = toy_setup(num_clients=N, cohort=COHORT)
  from fedjax_bench.algorithms import scaffold
  with pytest.raises(UsageError, match=r"^--client_grad_clip=0.5 is not valid for "
                     r"--algo=scaffold: .*; valid: --client_opt=sgd without"):
    scaffold.build(task, world, dict(client_grad_clip=0.5))


def test_fingerprints_of_runs_before_are_unchanged():
  """At sgd every new setting is left out of the run's fingerprint (the keys of the
  committed runs stay); another optimizer is in it, with its settings once given."""
  fp = lambda cfg: run_dir.run_fingerprint(cfg, [0], [])
  plain = fp(config.resolve(algo="fedavg"))
  new = {"client_opt", "client_momentum", "client_beta1", "client_beta2", "client_eps",
         "client_weight_decay", "client_grad_clip"}
  assert not new & set(plain)
  adam = fp(config.resolve(algo="fedavg", client_opt="adam", client_beta2=0.99))
  assert adam["client_opt"] == "adam" and adam["client_beta2"] == 0.99
  assert set(adam) - set(plain) == {"client_opt", "client_beta2"}
  assert fp(config.resolve(algo="fedavg", client_grad_clip=1.0))["client_grad_clip"] == 1.0
