"""A block's value of a per-round mean metric is the mean over the items (messages, cohort
clients) of its rounds, not over its rounds: checked against a plain loop over the same
per-round trace, for the engine's blocks and for summary.json's final window."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import toy_setup
from fedjax_bench import algorithms, engine
from fedjax_bench.output import results
from fedjax_bench.core import types
from fedjax_bench.sim import participation
from tests.algorithms.test_async_reference import (Problem, init_key, make_world, regression_task,
                                                   round_key)

ROUNDS, EVAL_EVERY, WINDOW = 30, 7, 14   # evaluations at 0, 7, 14, 21, 28, 30
SEEDS = [0, 1]


def per_round_trace(alg, seed, rounds, observe=None):
  """The round function's metrics of rounds 0..rounds-1 with the engine's keys
  ({name: [rounds]}), and observe(key, t) per round."""
  server, clients = alg.init(init_key(seed))
  out, seen = [], []
  step = jax.jit(alg.round)
  for t in range(rounds):
    key = round_key(seed, t)
    if observe is not None:
      seen.append(observe(key, t))
    server, clients, metrics = step(server, clients, key)
    out.append({k: float(v) for k, v in metrics.items()})
  return {k: np.array([m[k] for m in out]) for k in out[0]}, np.array(seen)


def block_means(values, counts, ends):
  """Plain loop: for each block (rounds ends[b-1]..ends[b]-1), the mean of ``values`` over
  the block's items (``counts`` per round), NaN without any."""
  out, start = [], 0
  for end in ends:
    num = den = 0.0
    for t in range(start, end):
      if counts[t] > 0:
        num += values[t] * counts[t]
        den += counts[t]
    out.append(num / den if den > 0 else np.nan)
    start = end
  return np.array(out)


def window_mean(values, counts, first, last):
  """Plain loop over rounds first..last-1."""
  items = [(values[t], counts[t]) for t in range(first, last) if counts[t] > 0]
  den = sum(c for _, c in items)
  return sum(v * c for v, c in items) / den if den else np.nan


def check_against_loop(out, traces, names_and_counts):
  """Engine blocks and summarize()'s final window against the plain loop."""
  h = out.history
  ends = list(h.rounds[1:])
  final = results.summarize(h, WINDOW)
  first = int(h.rounds[results.final_indices(h.rounds, WINDOW)[0] - 1])
  for s, (trace, counts_by_name) in enumerate(traces):
    for name in names_and_counts:
      counts = counts_by_name[name]
      want = block_means(trace[name], counts, ends)
      np.testing.assert_allclose(h.metrics[name][1:, 0, s], want, rtol=1e-5, atol=1e-6,
                                 err_msg=f"{name} seed {SEEDS[s]}")
      np.testing.assert_array_equal(
          h.metrics[types.count_name(name)][1:, 0, s],
          [counts[a:b].sum() for a, b in zip([0] + ends[:-1], ends)])
      got = final[name]["per_seed"][s]
      want = window_mean(trace[name], counts, first, ROUNDS)
      if np.isnan(want):
        assert got is None, (name, s)
      else:
        np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=f"final {name}")


def test_async_per_message_metrics_with_poisson_aggregation():
  """Staleness and client_loss are means over the messages applied: aggregation events
  and events past the horizon carry none."""
  prob = Problem()
  task = regression_task(prob.xs, prob.ys)
  world = make_world(prob.n, 2)
  hp = {"client_lr": 0.3, "batch_size": 4, "aggregation": "poisson", "async_delta": 2,
        "sim_time": 0.41}
  build = lambda h: algorithms.get("fedbuff").build(task, world, h)
  out = engine.run(build, task, hp, seeds=SEEDS, rounds=ROUNDS, eval_every=EVAL_EVERY)
  names = ("staleness", "event_staleness", "client_loss")
  traces = []
  for seed in SEEDS:
    trace, _ = per_round_trace(build(hp), seed, ROUNDS)
    # A message was applied at an event iff the server's message counter moved.
    applied = np.diff(np.concatenate([[0.0], trace["cum_messages"]]))
    assert set(np.unique(applied)) <= {0.0, 1.0}
    traces.append((trace, {k: applied for k in names}))
  # What the test must cover: aggregation events inside blocks, events past the
  # horizon, a block with no message (NaN), a final window with messages.
  applied = np.stack([c["staleness"] for _, c in traces])
  assert (applied[:, :21].sum(1) < 21).all() and (applied[:, 21:] == 0).any()
  last = applied[:, 28:].sum(1)
  assert (last == 0).any() and (last > 0).any()
  assert (applied[:, 14:].sum(1) > 0).all()
  assert np.mean([t["staleness"][a > 0].mean() for (t, _), a in zip(traces, applied)]) > 0.5
  check_against_loop(out, traces, names)


def test_sync_cohort_mean_with_empty_rounds():
  """client_loss is the mean over the clients trained in the block; rounds nobody was
  available for carry none, a block of only such rounds is NaN."""
  task, world = toy_setup(num_clients=6, part=participation.bernoulli(np.full(6, 0.15)))
  hp = {"client_lr": 0.2, "server_lr": 1.0, "batch_size": 4}
  build = lambda h: algorithms.get("fedavg").build(task, world, h)
  eval_every = 2
  out = engine.run(build, task, hp, seeds=SEEDS, rounds=ROUNDS, eval_every=eval_every)
  traces = []
  for seed in SEEDS:
    state = world.init_state(init_key(seed))
    observe = jax.jit(lambda key, t: jnp.sum(world.observe(key, t, state)[0]))
    trace, active = per_round_trace(build(hp), seed, ROUNDS, observe)
    np.testing.assert_array_equal(trace["num_active"], active)  # nobody over the cap
    traces.append((trace, {"client_loss": active.astype(np.float64)}))
  active = np.stack([c["client_loss"] for _, c in traces])
  blocks = active.reshape(len(SEEDS), -1, eval_every)
  assert (active == 0).any() and (blocks.sum(2) == 0).any()          # empty rounds, blocks
  assert ((blocks.min(2) == 0) & (blocks.max(2) > 0)).any()           # half-empty blocks
  assert (np.ptp(blocks, axis=2) > 0).any()                           # unequal cohorts
  check_against_loop(out, traces, ("client_loss",))


def test_summary_weights_blocks_by_count_and_keeps_divergence():
  rounds = np.array([0, 2, 4, 6])
  nan = np.nan
  loss = np.array([nan, 1.0, nan, 4.0])[:, None, None].repeat(2, axis=2)
  count = np.array([nan, 3.0, 0.0, 1.0])[:, None, None].repeat(2, axis=2)
  loss[3, 0, 1] = count[3, 0, 1] = nan     # seed 1 diverged before the last evaluation
  h = results.History(rounds, {"client_loss": loss, types.count_name("client_loss"): count},
                      seeds=[0, 1])
  final = results.summarize(h, final_window=6)["client_loss"]
  assert final["per_seed"] == [pytest.approx((3 * 1.0 + 4.0) / 4), None]
  assert results.summarize(h, final_window=4)["client_loss"]["per_seed"][0] == 4.0
  h.metrics[types.count_name("client_loss")][3] = 0.0
  assert results.summarize(h, final_window=4)["client_loss"]["per_seed"] == [None, None]
  assert results.COUNT_SUFFIX == types.COUNT_SUFFIX
