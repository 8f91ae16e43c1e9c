"""The character LSTM of LEAF's and FedJAX's Shakespeare benchmark.

Token ids [batch, T] -> an embedding of 8 -> two LSTM layers (256 wide by default,
``--lstm_hidden``) -> a dense layer to the vocabulary, read at the last position: the
next character after the window (LEAF's ``stacked_lstm``). The LSTM is the standard one
with the forget gate's bias shifted by +1, as TensorFlow's BasicLSTMCell in LEAF and Haiku's
LSTM in FedJAX. FedJAX also puts a tanh after each LSTM layer; LEAF does not, nor do we.

Each layer multiplies its whole input sequence by the input kernel at once and scans only
the recurrence h_{t-1} W_h over time (the same numbers as one [x_t, h_{t-1}] kernel a step,
half the matmuls inside the sequential loop).
"""

import jax
import jax.numpy as jnp
from flax import linen as nn

from fedjax_bench.errors import UsageError

EMBED_DIM = 8
NUM_LAYERS = 2
FORGET_BIAS = 1.0


class LSTMLayer(nn.Module):
  """One LSTM layer over a sequence: [batch, T, in] -> [batch, T, hidden], zero start state.
  Its kernel is one [in + hidden, 4 hidden] matrix (rows: input, then recurrent) with
  LeCun-normal initialization over that fan-in, as a kernel over [x_t, h_{t-1}] would be;
  gates in the order input, cell, forget, output."""
  hidden: int

  @nn.compact
  def __call__(self, x):
    d = x.shape[-1]
    kernel = self.param("kernel", nn.initializers.lecun_normal(), (d + self.hidden,
                                                                  4 * self.hidden))
    bias = self.param("bias", nn.initializers.zeros, (4 * self.hidden,))
    xw = jnp.einsum("btd,dg->tbg", x, kernel[:d]) + bias  # [T, batch, 4 hidden]
    w_h = kernel[d:]

    def step(carry, xw_t):
      c, h = carry
      i, g, f, o = jnp.split(xw_t + h @ w_h, 4, axis=-1)
      c = jax.nn.sigmoid(f + FORGET_BIAS) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
      h = jax.nn.sigmoid(o) * jnp.tanh(c)
      return (c, h), h

    zeros = jnp.zeros((x.shape[0], self.hidden), xw.dtype)
    _, hs = jax.lax.scan(step, (zeros, zeros), xw)
    return jnp.swapaxes(hs, 0, 1)


class CharLSTM(nn.Module):
  vocab_size: int
  num_classes: int
  hidden: int = 256

  @nn.compact
  def __call__(self, x):
    h = nn.Embed(self.vocab_size, EMBED_DIM,
                 embedding_init=nn.initializers.truncated_normal(1.0))(x.astype(jnp.int32))
    for _ in range(NUM_LAYERS):
      h = LSTMLayer(self.hidden)(h)
    return nn.Dense(self.num_classes)(h[:, -1])


def build(*, num_classes: int, dataset=None, settings=None) -> CharLSTM:
  """The model for ``dataset`` (token data: its ``vocab_size``; without a dataset the
  inputs share the ``num_classes`` vocabulary) at ``settings.lstm_hidden``."""
  from fedjax_bench.data.federated import is_tokens
  from fedjax_bench.models.settings import ModelSettings
  vocab = num_classes
  if dataset is not None:
    if not is_tokens(dataset.train.x):
      raise UsageError(f"--model=char_lstm reads token sequences (--dataset=shakespeare, or "
                       f"text read by leaf_json or tff_h5); --dataset={dataset.name} is not")
    vocab = dataset.vocab_size or num_classes
  hidden = (settings or ModelSettings()).lstm_hidden
  return CharLSTM(vocab_size=vocab, num_classes=num_classes, hidden=hidden)
