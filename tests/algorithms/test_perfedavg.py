"""Per-FedAvg (Fallah, Mokhtari & Ozdaglar 2020): Algorithm 1 with its first-order and
Hessian-free local steps written as a plain per-client loop (float64 NumPy), round by round
under partial participation; HF's finite difference against the exact Hessian-vector
product; evaluation personalizes the global model by SGD steps at alpha."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import float64_gradient, one_line, toy_setup
from fedjax_bench import api, config
from fedjax_bench.algorithms import perfedavg
from fedjax_bench.core import keys, local, local_terms
from fedjax_bench.errors import UsageError

N, COHORT = 8, 3


def _loop_round(task, world, hp, variant, w, key, t):
  """Algorithm 1 with NumPy: each sampled client's local steps from w_k, each on minibatches
  D, D' (and D''), dealt in turn from one draw of 2B (3B) examples; then the average."""
  mask = np.asarray(world.participation.sample(keys.for_purpose(key, "participation"), t))
  grad, beta, alpha = float64_gradient(task), hp["client_lr"], hp["perfedavg_alpha"]
  parts = 2 if variant == "fo" else 3
  train_key = keys.for_purpose(key, "local_train")
  local_models, weights = [], []
  for i in np.flatnonzero(mask):
    k = keys.for_purpose(jax.random.fold_in(train_key, int(i)), "local_sampling")
    off, cnt = int(task.offsets[i]), int(task.counts[i])
    wi, perm = list(w), jnp.arange(task.max_count, dtype=jnp.int32)
    for s in range(int(world.client_steps[i])):
      pos, wt, perm = local.batch_positions(k, s, cnt, perm,
                                            batch_size=parts * hp["batch_size"],
                                            sampling="shuffle")
      d, d1, d2 = [(task.x[off + pos[j::parts]], task.y[off + pos[j::parts]], wt[j::parts])
                   for j in range(parts)] + [None] * (3 - parts)
      w_tilde = [a - alpha * g for a, g in zip(wi, grad(wi, *d))]
      g = grad(w_tilde, *d1)
      if variant == "hf":  # the Hessian-vector product by a central difference
        delta = hp["perfedavg_delta"]
        plus = grad([a + delta * b for a, b in zip(wi, g)], *d2)
        minus = grad([a - delta * b for a, b in zip(wi, g)], *d2)
        g = [a - alpha * (p - m) / (2 * delta) for a, p, m in zip(g, plus, minus)]
      wi = [a - beta * b for a, b in zip(wi, g)]
    local_models.append(wi)
    weights.append(float(task.counts[i]) if hp["weighting"] == "data_size" else 1.0)
  return [sum(c * m[j] for c, m in zip(weights, local_models)) / sum(weights)
          for j in range(len(w))]


def _personalized(task, hp, w, init_key, t):
  """Each client's w after perfedavg_finetune_steps SGD steps at alpha on minibatches of B of
  its training data, drawn from "init" -> "personal_train" -> round t -> client."""
  grad, alpha = float64_gradient(task), hp["perfedavg_alpha"]
  tune_key = jax.random.fold_in(keys.for_purpose(init_key, "personal_train"), t)
  train_key = keys.for_purpose(tune_key, "local_train")
  out = []
  for i in range(N):
    k = keys.for_purpose(jax.random.fold_in(train_key, i), "local_sampling")
    off, cnt = int(task.offsets[i]), int(task.counts[i])
    wi, perm = list(w), jnp.arange(task.max_count, dtype=jnp.int32)
    for s in range(hp["perfedavg_finetune_steps"]):
      pos, wt, perm = local.batch_positions(k, s, cnt, perm, batch_size=hp["batch_size"],
                                            sampling="shuffle")
      wi = [a - alpha * g for a, g in zip(wi, grad(wi, task.x[off + pos], task.y[off + pos],
                                                   wt))]
    out.append(wi)
  return [np.stack([m[j] for m in out]) for j in range(len(w))]


@pytest.mark.parametrize("variant,weighting", [("fo", "data_size"), ("hf", "uniform")])
def test_rounds_follow_algorithm_1_under_partial_participation(variant, weighting):
  task, world = toy_setup(num_clients=N, cohort=COHORT, local_steps=3, batch_size=3,
                          holdout=0.3)
  hp = dict(client_lr=0.2, batch_size=3, local_steps=3, perfedavg_alpha=0.3,
            perfedavg_finetune_steps=2, weighting=weighting)
  if variant == "hf":
    hp["perfedavg_delta"] = 1e-2
  alg = getattr(perfedavg, f"perfedavg_{variant}").build(task, world, hp)
  server, clients = alg.init(jax.random.PRNGKey(0))
  step = jax.jit(alg.round)
  w = [np.asarray(a, np.float64) for a in jax.tree.leaves(server.params)]
  for t in range(3):
    key = jax.random.PRNGKey(9 + t)
    w = _loop_round(task, world, hp, variant, w, key, t)
    server, clients, m = step(server, clients, key)
    for a, b in zip(jax.tree.leaves(server.params), w):
      np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
    assert float(m["client_loss.count"]) == COHORT
  personal = jax.jit(alg.personal_params)(server, clients)
  for a, b in zip(jax.tree.leaves(personal),
                  _personalized(task, hp, w, jax.random.PRNGKey(0), t=3)):
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)


def test_the_hessian_free_step_approaches_the_exact_hessian_vector_product():
  """HF's meta-gradient g - alpha d, d the paper's central difference, against g - alpha
  grad^2 f(w; D'') g by forward-over-reverse autodiff: close, not equal (the paper's is an
  approximation), and closer for a smaller delta. And the step's gradient is the one
  `local_terms.with_gradient` was given, bit for bit."""
  task, _ = toy_setup(num_clients=4, cohort=2, model="mlp")
  w = task.init_params(jax.random.PRNGKey(1))
  xb, yb = task.x[:12], task.y[:12]
  wb = jnp.ones(12)
  alpha = 0.3
  parts = perfedavg.split((xb, yb, wb), 3)
  grad = jax.grad(task.loss)
  w_tilde = jax.tree.map(lambda a, b: a - alpha * b, w, grad(w, *parts[0]))
  g = grad(w_tilde, *parts[1])
  hvp = jax.jvp(lambda p: grad(p, *parts[2]), (w,), (g,))[1]
  exact = jax.tree.map(lambda a, h: a - alpha * h, g, hvp)
  errors = []
  for delta in (1e-1, 1e-2):
    h = perfedavg.meta_objective(task.loss, alpha, delta)
    approx = jax.grad(h)(w, xb, yb, wb, jax.random.PRNGKey(0))
    scale = max(float(jnp.max(jnp.abs(a))) for a in jax.tree.leaves(exact))
    errors.append(max(float(jnp.max(jnp.abs(a - b)))
                      for a, b in zip(jax.tree.leaves(approx), jax.tree.leaves(exact))) / scale)
  assert errors[1] < 1e-2 and errors[1] < errors[0]
  value = local_terms.with_gradient(jnp.float32(2.5), w, exact)
  assert float(value) == 2.5
  jax.tree.map(np.testing.assert_array_equal,
               jax.grad(lambda p: local_terms.with_gradient(2.5, p, exact))(w), exact)


def test_a_run_scores_the_personalized_models():
  common = dict(dataset="synthetic", num_clients=10, rounds=4, eval_every=4, seeds=[0],
                progress=False, holdout_fraction=0.25, clients_per_round=5, host_devices=1)
  curves = api.run(algo="perfedavg_hf", perfedavg_alpha=0.05, **common).curves
  assert {"personal_test_accuracy", "personal_test_accuracy_worst10",
          "client_test_accuracy"} <= set(curves)
  assert np.all(np.isfinite(curves["personal_test_accuracy"]))


def test_bad_settings_are_one_line_errors():
  task, world = toy_setup(num_clients=4, cohort=2)
  with pytest.raises(UsageError, match="give --holdout_fraction") as e:
    perfedavg.perfedavg_fo.build(task, world, {})
  one_line(e)
  with pytest.raises(UsageError, match="valid: fo, hf") as e:
    perfedavg.build(task, world, {}, method="so")
  one_line(e)
  with pytest.raises(UsageError, match="--perfedavg_delta has no effect on "
                     "--algo=perfedavg_fo") as e:
    config.resolve(algo="perfedavg_fo", perfedavg_delta=0.1)
  one_line(e)
  with pytest.raises(UsageError, match="--perfedavg_alpha must be positive") as e:
    config.resolve(algo="perfedavg_hf", perfedavg_alpha=0.0)
  one_line(e)
