"""Keys split by purpose and by client.

Every random draw of a round comes from the round key folded with a fixed purpose
number, then with the client's id, so a client's draws do not depend on which
other clients happen to be in the cohort.
"""

import jax

_PURPOSES = {
    "init": 0,
    "participation": 1,
    "local_train": 2,
    "compression": 3,
    "availability": 4,
    "delay": 5,
    "server": 6,
    "local_noise": 7,  # augmentation and dropout inside local steps
    "events": 8,       # asynchronous event traces (sim/asynchrony.Clock)
    "selection": 9,    # FedALIGN's selection minibatches
}


def for_purpose(key: jax.Array, purpose: str) -> jax.Array:
  return jax.random.fold_in(key, _PURPOSES[purpose])


def per_client(key: jax.Array, client_ids: jax.Array) -> jax.Array:
  """One key per client id: [cohort] keys."""
  return jax.vmap(lambda i: jax.random.fold_in(key, i))(client_ids)
