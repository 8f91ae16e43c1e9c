"""FedAvg clients in PyTorch, as researchers write them: the models, the data and the
client's local training that `torch_workloads.py` times in a per-client loop and in
Flower's simulation engine. Runs in a peer's own virtual environment (PyTorch, NumPy, and
Flower for that side; `compare.py` sets them up), never in ours; Flower's actors import it
by name (its folder is on their PYTHONPATH).

A client does what FL-bench's and Flower's PyTorch clients do: copy the global weights
into its model, run ``steps`` SGD steps (plain torch.optim.SGD, no momentum) on minibatches
of its own data drawn as shuffled epochs (a fresh permutation each round and whenever an
epoch runs out, the in-memory form of ``DataLoader(shuffle=True)``; a DataLoader's
per-example collation would only slow this side down), softmax cross entropy, then hand
back its weights; the server averages the cohort's weights uniformly (every client trains
the same number of examples).
"""

import json
import os

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

import architectures


class _LastStep(nn.Module):
  def forward(self, out):
    return out[0][:, -1]  # nn.LSTM returns (outputs, (h, c))


def build_model(name: str, hidden: int = 64) -> nn.Module:
  """`architectures.layers(name)` as an nn.Sequential, checked against
  `architectures.parameter_shapes`."""
  modules = []
  for kind, *sizes in architectures.layers(name, hidden):
    if kind == "linear":
      modules.append(nn.Linear(*sizes))
    elif kind == "conv":
      n_in, n_out, k, pad = sizes
      modules.append(nn.Conv2d(n_in, n_out, k, padding=pad))
    elif kind == "relu":
      modules.append(nn.ReLU())
    elif kind == "pool":
      modules.append(nn.MaxPool2d(2))
    elif kind == "flatten":
      modules.append(nn.Flatten())
    elif kind == "embedding":
      modules.append(nn.Embedding(*sizes))
    elif kind == "lstm":
      n_in, h, num = sizes
      lstm = nn.LSTM(n_in, h, num, batch_first=True)
      with torch.no_grad():
        for layer in range(num):
          b_ih, b_hh = getattr(lstm, f"bias_ih_l{layer}"), getattr(lstm, f"bias_hh_l{layer}")
          b_ih.zero_()
          b_ih[h:2 * h] = architectures.FORGET_BIAS  # PyTorch's gate order: i, f, g, o
          b_hh.zero_()
          b_hh.requires_grad_(False)
      modules.append(lstm)
    elif kind == "last":
      modules.append(_LastStep())
    else:
      raise ValueError(f"unknown layer {kind!r}")
  model = nn.Sequential(*modules)
  shapes = [tuple(p.shape) for p in trainable(model)]
  expected = architectures.parameter_shapes(name, hidden)
  if shapes != expected:
    raise SystemExit(f"error: the PyTorch {name} has parameters {shapes}, "
                     f"architectures.py says {expected}")
  return model


def trainable(model: nn.Module) -> list:
  return [p for p in model.parameters() if p.requires_grad]


class ClientData:
  """The population's examples as `compare.py` wrote them (our generated data, the same
  arrays): x.npy, y.npy, offsets.npy, counts.npy. Images stay uint8 (MNIST's storage)
  and are scaled to [0, 1] a batch at a time, as our side does; ``mmap``: read the files
  lazily (Flower's actors each map them instead of holding a copy)."""

  def __init__(self, path: str, mmap: bool = False, device=None):
    load = lambda name: np.load(os.path.join(path, name), mmap_mode="r" if mmap else None)
    self.x, self.y = load("x.npy"), load("y.npy")
    self.offsets, self.counts = np.load(os.path.join(path, "offsets.npy")), np.load(
        os.path.join(path, "counts.npy"))
    self.image = self.x.ndim == 4
    self.device = device
    if not mmap:
      self.x, self.y = self._tensors(self.x, self.y)

  @property
  def num_clients(self) -> int:
    return len(self.counts)

  def _tensors(self, x, y):
    x = torch.from_numpy(np.ascontiguousarray(x))
    if self.image:  # NHWC as stored -> NCHW, PyTorch's layout, once
      x = x.permute(0, 3, 1, 2).contiguous()
    else:
      x = x.long()  # token ids
    y = torch.from_numpy(np.ascontiguousarray(y)).long()
    if self.device is not None:
      x, y = x.to(self.device), y.to(self.device)
    return x, y

  def client(self, i: int):
    """(x, y) of client i as tensors (a copy when the files are mapped)."""
    lo, n = int(self.offsets[i]), int(self.counts[i])
    if isinstance(self.x, torch.Tensor):
      return self.x[lo:lo + n], self.y[lo:lo + n]
    return self._tensors(self.x[lo:lo + n], self.y[lo:lo + n])

  def batch(self, x, idx):
    xb = x[idx]
    return xb.float().div_(255.0) if self.image else xb


def local_train(model: nn.Module, data: ClientData, x, y, steps: int, batch: int, lr: float,
                gen: torch.Generator) -> float:
  """``steps`` SGD steps on shuffled epochs of (x, y); returns the last minibatch loss."""
  optimizer = torch.optim.SGD(trainable(model), lr=lr)
  model.train()
  n, perm, pos, loss = len(y), None, 0, None
  for _ in range(steps):
    if perm is None or pos + batch > n:
      perm, pos = torch.randperm(n, generator=gen), 0
    idx = perm[pos:pos + batch] if batch <= n else perm
    pos += batch
    optimizer.zero_grad()
    loss = F.cross_entropy(model(data.batch(x, idx)), y[idx])
    loss.backward()
    optimizer.step()
  return float(loss.detach())


def set_weights(model: nn.Module, weights) -> None:
  """Copies the global weights (tensors or NumPy arrays, `trainable` order) into ``model``."""
  with torch.no_grad():
    for p, w in zip(trainable(model), weights):
      p.copy_(torch.as_tensor(w))


def get_weights(model: nn.Module) -> list:
  return [p.detach().clone() for p in trainable(model)]


def synchronize(device) -> None:
  """Waits for the device's queued work (a CUDA device runs asynchronously)."""
  if device.type == "cuda":
    torch.cuda.synchronize(device)


def threads() -> int:
  """The cores this process may run on."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:
    return os.cpu_count() or 1


# --- Flower ---------------------------------------------------------------------------------
# Imported only in Flower's environment (flwr is not in the loop's).

_ACTOR = {}  # per actor process: the data (mapped) and a model to train in


class FlowerClientFn:
  """Flower's ``client_fn(context)``: the NumPyClient of partition ``partition-id``. The
  mapped data and a model to train in are kept per actor process (Flower's examples build
  both in client_fn; keeping them is the faster choice for this side). A class, so that
  Ray's pickling refers to it by name and the actors import this module."""

  def __init__(self, *, data_path: str, model: str, hidden: int, steps: int, batch: int,
               lr: float, seed: int, device: str = "cpu"):
    self.data_path, self.model, self.hidden, self.device = data_path, model, hidden, device
    self.steps, self.batch, self.lr, self.seed = steps, batch, lr, seed

  def __call__(self, context):
    import flwr  # noqa: PLC0415

    cid = int(context.node_config["partition-id"])
    if "data" not in _ACTOR:
      torch.set_num_threads(1)  # one client per core (client_resources num_cpus=1)
      device = torch.device(self.device)
      _ACTOR["data"] = ClientData(self.data_path, mmap=True, device=device)
      _ACTOR["model"] = build_model(self.model, self.hidden).to(device)
      _ACTOR["gen"] = torch.Generator().manual_seed(self.seed + os.getpid())
    data, net, gen = _ACTOR["data"], _ACTOR["model"], _ACTOR["gen"]
    steps, batch, lr = self.steps, self.batch, self.lr

    class Client(flwr.client.NumPyClient):
      def get_parameters(self, config):
        return [w.cpu().numpy() for w in get_weights(net)]

      def fit(self, parameters, config):
        set_weights(net, parameters)
        x, y = data.client(cid)
        loss = local_train(net, data, x, y, steps, batch, lr, gen)
        return self.get_parameters(config), steps * batch, {"loss": loss}

      def evaluate(self, parameters, config):
        return 0.0, 1, {}

    return Client().to_client()


def report(row: dict) -> None:
  print(json.dumps(row), flush=True)
