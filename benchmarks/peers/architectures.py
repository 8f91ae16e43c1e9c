"""The peers' PyTorch models, written down as layers without importing PyTorch.

`torch_workloads.py` builds each model from these specs (one PyTorch layer per entry) and
checks at start-up that the module's trainable parameters have exactly the shapes
`parameter_shapes` gives from PyTorch's documented layouts; tests/benchmarks/test_peers.py
checks that those shapes add up to our models' parameter counts (no test needs PyTorch).

Our models, as benchmarks/speed/speed.py's workloads train them:
  logreg      W1: `models/dense.LogReg`, 784 -> 10 (7,850 parameters)
  mlp         W2: `models/dense.MLP` with (200, 200): 784-200-200-10 (199,210)
  cnn         W3: the FedAvg paper's MNIST CNN (`--model=cnn`, `fedavg_cnn`): 5x5
              convolutions of 32 and 64 channels, SAME padding, each followed by 2x2 max
              pooling, a dense layer of 512, the output layer (1,663,370)
  char_lstm   W7: `models/char_lstm.CharLSTM`: an embedding of 8, two LSTM layers of
              ``hidden``, a dense layer to the 82-id vocabulary read at the last position

PyTorch's nn.LSTM has two bias vectors a layer (b_ih and b_hh, always added together); ours
has one. The peers' LSTM keeps b_hh at zero and out of training (requires_grad=False), so
the trainable parameters, and the function, are ours; its b_ih starts at +1 on the forget
gate, our `char_lstm.FORGET_BIAS`. Our CNN flattens H, W, C where PyTorch flattens C, H, W:
the same layer sizes.
"""

IMAGE_SHAPE = (1, 28, 28)  # PyTorch's C, H, W of the MNIST-shaped inputs
NUM_CLASSES = 10
VOCAB = 82  # data/text.VOCAB_SIZE: LEAF's 80 characters, PAD and OOV
EMBED = 8   # models/char_lstm.EMBED_DIM
LSTM_LAYERS = 2  # models/char_lstm.NUM_LAYERS
FORGET_BIAS = 1.0  # models/char_lstm.FORGET_BIAS

# Each layer: (kind, *sizes). linear (in, out); conv (in, out, kernel, padding), stride 1;
# pool (2x2 max pooling); relu; flatten; embedding (vocabulary, width); lstm (in, hidden,
# layers), batch first; last (the LSTM's output at the last position).
_CNN = (("conv", 1, 32, 5, 2), ("relu",), ("pool",), ("conv", 32, 64, 5, 2), ("relu",),
        ("pool",), ("flatten",), ("linear", 7 * 7 * 64, 512), ("relu",),
        ("linear", 512, NUM_CLASSES))


def layers(model: str, hidden: int = 64) -> tuple:
  """The model's layers in order; ``hidden``: the char LSTM's width."""
  if model == "logreg":
    return (("flatten",), ("linear", 784, NUM_CLASSES))
  if model == "mlp":
    return (("flatten",), ("linear", 784, 200), ("relu",), ("linear", 200, 200), ("relu",),
            ("linear", 200, NUM_CLASSES))
  if model == "cnn":
    return _CNN
  if model == "char_lstm":
    return (("embedding", VOCAB, EMBED), ("lstm", EMBED, hidden, LSTM_LAYERS), ("last",),
            ("linear", hidden, VOCAB))
  raise ValueError(f"unknown model {model!r}; valid: logreg, mlp, cnn, char_lstm")


def parameter_shapes(model: str, hidden: int = 64) -> list[tuple[int, ...]]:
  """The trainable parameters' shapes in PyTorch's order and layout (weight [out, in],
  conv weight [out, in, k, k], LSTM weight_ih_l{k} [4 hidden, in], weight_hh_l{k}
  [4 hidden, hidden], bias_ih_l{k} [4 hidden]; b_hh is not trained, see above)."""
  shapes = []
  for kind, *sizes in layers(model, hidden):
    if kind == "linear":
      n_in, n_out = sizes
      shapes += [(n_out, n_in), (n_out,)]
    elif kind == "conv":
      n_in, n_out, k, _ = sizes
      shapes += [(n_out, n_in, k, k), (n_out,)]
    elif kind == "embedding":
      shapes.append(tuple(sizes))
    elif kind == "lstm":
      n_in, h, num = sizes
      for layer in range(num):
        shapes += [(4 * h, n_in if layer == 0 else h), (4 * h, h), (4 * h,)]
  return shapes


def num_params(model: str, hidden: int = 64) -> int:
  total = 0
  for shape in parameter_shapes(model, hidden):
    count = 1
    for n in shape:
      count *= n
    total += count
  return total
