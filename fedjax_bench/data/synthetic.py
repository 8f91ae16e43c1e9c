"""The LEAF / FedProx Synthetic(alpha, beta) generator (Li et al., FedProx, MLSys 2020;
the FedALIGN paper's Section 4, Fig. 2)."""

import numpy as np

from fedjax_bench.data.federated import Dataset, FederatedData
from fedjax_bench.errors import UsageError


def leaf_synthetic(num_clients: int, alpha: float, beta: float, seed: int,
                   dim: int = 60, num_classes: int = 10, test_fraction: float = 0.1,
                   max_examples_per_client: int | None = None) -> Dataset:
  """Synthetic(alpha, beta): one softmax-regression model and input law per user.

  Follows FedProx's generate_synthetic.py, with draws in the same order:
  ``D_k = int(LogNormal(4, 2)) + 50`` (capped at ``max_examples_per_client``),
  ``u_k ~ N(0, alpha)`` (std), ``B_k ~ N(0, beta)``, ``v_k[j] ~ N(B_k, 1)``,
  ``W_k, b_k ~ N(u_k, 1)``, ``x ~ N(v_k, diag(j^-1.2))``, ``y = argmax(x W_k + b_k)``.
  Each user's examples are shuffled and the last ``test_fraction`` (at least one kept
  for training) go to one central test set, the concatenation over users.
  """
  if num_clients <= 0:
    raise UsageError(f"num_clients must be positive, got {num_clients}")
  if alpha < 0 or beta < 0:
    raise UsageError(f"synthetic alpha and beta are standard deviations, >= 0; "
                     f"got {alpha}, {beta}")
  if not 0 <= test_fraction < 1:
    raise UsageError(f"test_fraction must be in [0, 1), got {test_fraction}")
  if max_examples_per_client is not None and max_examples_per_client < 1:
    raise UsageError(f"max_examples_per_client must be >= 1, got "
                     f"{max_examples_per_client}")
  rng = np.random.default_rng(seed)
  sizes = rng.lognormal(4, 2, num_clients).astype(np.int64) + 50
  if max_examples_per_client is not None:
    sizes = np.minimum(sizes, max_examples_per_client)
  mean_w = rng.normal(0, alpha, num_clients)  # u_k, also the mean of b_k
  big_b = rng.normal(0, beta, num_clients)
  mean_x = np.stack([rng.normal(big_b[k], 1, dim) for k in range(num_clients)])
  std_x = np.arange(1, dim + 1, dtype=np.float64) ** -0.6  # sqrt(j^-1.2)

  train_x, train_y, test_x, test_y = [], [], [], []
  for k in range(num_clients):
    w = rng.normal(mean_w[k], 1, (dim, num_classes))
    b = rng.normal(mean_w[k], 1, num_classes)
    x = mean_x[k] + rng.standard_normal((sizes[k], dim)) * std_x
    y = np.argmax(x @ w + b, axis=1)
    perm = rng.permutation(sizes[k])
    x, y = x[perm], y[perm]
    n_train = max(1, int((1 - test_fraction) * sizes[k]))
    train_x.append(x[:n_train]); train_y.append(y[:n_train])
    test_x.append(x[n_train:]); test_y.append(y[n_train:])

  return Dataset(
      name="synthetic",
      train=FederatedData.from_clients(train_x, train_y),
      test_x=np.concatenate(test_x).astype(np.float32),
      test_y=np.concatenate(test_y).astype(np.int32),
      num_classes=num_classes, feature_shape=(dim,), is_image=False)
