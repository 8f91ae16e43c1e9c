"""A batch of Fisher-Yates swaps applied at once instead of one after another.

Local training's shuffled epochs (`local.batch_positions`) fix B consecutive slots of a
permutation per step: for j = 0..B-1, swap perm[a_j] with perm[b_j], where a_j are
increasing and b_j >= a_j. Done as a loop, that is B dependent iterations of a few small
ops each, every local step, every round: for a cohort of 10 logistic-regression clients on
CPU most of a round's fixed cost (docs/performance.md, "Small cohorts"). The same swaps resolve
in parallel: slot a_j is final after swap j (later swaps touch only later slots), and the
value a swap moves comes from the latest earlier swap that wrote its position, a chain
followed by pointer jumping in ceil(log2 B) gathers. Integers in, the same integers out.
"""

import jax.numpy as jnp

# Above this batch size the [B, B] comparisons cost more than the loop's B iterations save.
MAX_PARALLEL = 64


def apply(perm, a, b, valid):
  """``perm`` after swapping perm[a_j] and perm[b_j] for j = 0, 1, ..., in order.

  Requires, among the valid j: a increasing and b_j >= a_j. Invalid swaps do nothing.
  """
  n = a.shape[0]
  j = jnp.arange(n)
  earlier = (j[None, :] < j[:, None]) & valid[None, :]  # [k, j']: valid j' before k

  def latest_writer(x):
    """For each k, the latest valid swap j' < k whose b_{j'} is x_k, or -1."""
    hit = earlier & (b[None, :] == x[:, None])
    return jnp.max(jnp.where(hit, j[None, :], -1), axis=1)

  # q_k, the value at a_k just before swap k (which swap k moves to b_k): what the latest
  # earlier swap wrote there (its own q), else the original.
  parent = latest_writer(a)
  root = jnp.where(parent >= 0, parent, j)
  for _ in range(max(n - 1, 1).bit_length()):
    root = root[root]
  q = perm[a[root]]
  # The value swap j moves into slot a_j: what the latest earlier swap wrote at b_j, else
  # the original.
  src = latest_writer(b)
  out = jnp.where(src >= 0, q[jnp.maximum(src, 0)], perm[b])
  # Each position's last write wins: b_j gets q_j unless a later swap also targets b_j;
  # the slots are written last (a swap writes b after a, and a slot is never a later b).
  later = (j[None, :] > j[:, None]) & valid[None, :]  # [j, k]: valid k after j
  last_b = valid & ~jnp.any(later & (b[None, :] == b[:, None]), axis=1)
  size = perm.shape[0]
  perm = perm.at[jnp.where(last_b, b, size)].set(q, mode="drop")
  return perm.at[jnp.where(valid, a, size)].set(out, mode="drop")
