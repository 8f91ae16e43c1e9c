"""The AREA paper's scalar least-squares toys (its App. A.2.1, Fig. 4, and our two-client
bias experiment, docs/papers/area.md).

Client i holds one example (a_i, b_i); with the scalar ``linear`` model (no bias) and
``loss_type="squared_error"`` its loss is f̂_i(x) = ½(a_i x − b_i)², and with equal
weights (one example each) f(x) = mean_i f̂_i(x), minimized at x* = Σ a_i b_i / Σ a_i².

* ``heterogeneous`` (App. A.2.1, Fig. 4): a_i = 100·i, b_i = 1 for i = 1..n, so
  f̂_i(x) = ½(100 i x − 1)² and x* ≈ 2.9703e-4 for n = 50.
* ``two_clients`` (docs/papers/area.md): f̂_1(x) = (x − 1)², f̂_2(x) = (x + 1)², x* = 0, written as
  a_1 = a_2 = b_1 = −b_2 = √2 (float32), i.e. ½(√2 x ∓ √2)² = (x ∓ 1)² up to the
  float32 rounding of √2² (relative 1e-7). This is our scaling, the one our
  stepsize α = 0.1 was calibrated for; the minimizers ±1 and x* = 0 are exact.

There is no held-out data: the "test set" is the training examples again (test_loss is
then the plain mean loss, train_loss without any l2 penalty).
"""

import numpy as np

from fedjax_bench.data.federated import Dataset, FederatedData
from fedjax_bench.errors import UsageError

VARIANTS = ("heterogeneous", "two_clients")


def heterogeneous_x_star(num_clients: int, scale: float = 100.0) -> float:
  """The closed form of App. A.2.1: Σ_i scale·i / Σ_i (scale·i)²."""
  a = scale * np.arange(1, num_clients + 1, dtype=np.float64)
  return float(a.sum() / np.square(a).sum())


def scalar_quadratic(num_clients: int = 50, variant: str = "heterogeneous",
              scale: float = 100.0) -> Dataset:
  """One example per client (see the module docstring); ``scale`` is the 100 of App. A.2.1."""
  if variant == "heterogeneous":
    if num_clients < 1:
      raise UsageError(f"num_clients must be positive, got {num_clients}")
    a = scale * np.arange(1, num_clients + 1, dtype=np.float64)
    b = np.ones(num_clients)
  elif variant == "two_clients":
    if num_clients != 2:
      raise UsageError(f"the two_clients quadratic has 2 clients; got num_clients="
                       f"{num_clients} (pass --num_clients=2)")
    root2 = np.float32(np.sqrt(2.0))
    a = np.array([root2, root2])
    b = np.array([root2, -root2])
  else:
    raise UsageError(f"unknown quadratic variant {variant!r}; choose one of "
                     f"{', '.join(VARIANTS)}")
  x = a.astype(np.float32)[:, None]
  y = b.astype(np.float32)
  train = FederatedData.from_clients([x[i:i + 1] for i in range(len(y))],
                                     [y[i:i + 1] for i in range(len(y))])
  return Dataset(name="quadratic", train=train, test_x=train.x.copy(), test_y=train.y.copy(),
                 num_classes=1, feature_shape=(1,), is_image=False)
