"""Trains test_local's padded slab (unequal tau) with its cohort split over the devices of a
"clients" mesh axis, as the engine does; saves deltas, losses, the weighted sum and the
client-steps executed, and the collectives of a summed cohort (for subprocess tests).

usage: cohort_probe.py OUT.npz

Imports tests.core.test_local: run with the repository on PYTHONPATH, as `conftest.device_probe` runs it.
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, PartitionSpec

from tests.core.test_local import _slab_setup
from fedjax_bench.core import cohort, local


def main(out):
  task, world, c = _slab_setup()
  steps = [0]

  def counting_loss(params, x, y, w, rng):
    jax.debug.callback(lambda v: steps.__setitem__(0, steps[0] + np.size(v)), w[0])
    return task.loss(params, x, y, w, rng)

  weights = jnp.where(c.valid, jnp.arange(9.0) + 1, 0.0)
  params = task.init_params(jax.random.PRNGKey(1))
  mesh = Mesh(np.array(jax.devices()), ("clients",))

  def train(p):
    with cohort.sharded_over("clients", jax.device_count()):
      kw = dict(opt=optax.sgd(0.3), batch_size=4, sampling="replacement", width=2,
                loss_fn=counting_loss, valid=c.valid)
      deltas, losses = local.train_cohort(task, world, p, c.ids, jax.random.PRNGKey(4), **kw)
      total, _ = local.train_cohort(task, world, p, c.ids, jax.random.PRNGKey(4),
                                    sum_weights=weights, **kw)
    return deltas, losses, total

  f = jax.jit(jax.shard_map(train, mesh=mesh, in_specs=PartitionSpec(),
                            out_specs=PartitionSpec(), check_vma=False))
  deltas, losses, total = jax.block_until_ready(f(params))
  jax.effects_barrier()

  def summed(p):  # the collectives of one summed cohort
    with cohort.sharded_over("clients", jax.device_count()):
      return local.train_cohort(task, world, p, c.ids, jax.random.PRNGKey(4), opt=optax.sgd(0.3),
                                batch_size=4, sampling="replacement", width=2,
                                valid=c.valid, sum_weights=weights)

  hlo = jax.jit(jax.shard_map(summed, mesh=mesh, in_specs=PartitionSpec(),
                              out_specs=PartitionSpec(), check_vma=False)).lower(params).as_text()
  np.savez(out, devices=jax.device_count(), steps=steps[0], losses=np.asarray(losses),
           all_reduces=hlo.count("all_reduce"), all_gathers=hlo.count("all_gather"),
           **{f"d_{i}": np.asarray(a) for i, a in enumerate(jax.tree.leaves(deltas))},
           **{f"t_{i}": np.asarray(a) for i, a in enumerate(jax.tree.leaves(total))})


if __name__ == "__main__":
  main(sys.argv[1])
