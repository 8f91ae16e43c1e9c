"""The character LSTM: its forward pass against a NumPy transcription of the LSTM
equations, its local training inside the vmapped round against a per-client loop, and the
model/data checks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import toy_dataset
from fedjax_bench import models
from fedjax_bench.algorithms import fedavg
from fedjax_bench.task.build import make_task
from fedjax_bench.data import text
from fedjax_bench.data.federated import Dataset, FederatedData
from fedjax_bench.errors import UsageError
from fedjax_bench.models import char_lstm
from fedjax_bench.sim import participation, world as world_lib
from tests.algorithms.test_fedavg import _loop_round


def _sigmoid(z):
  return 1 / (1 + np.exp(-z))


def _numpy_forward(params, tokens):
  """CharLSTM written out in float64: embedding, two LSTM layers (gates i, g, f, o; the
  forget gate's bias +1), the dense layer on the last output."""
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params["params"])
  h_seq = p["Embed_0"]["embedding"][np.asarray(tokens, np.int64)]  # [B, T, 8]
  for layer in ("LSTMLayer_0", "LSTMLayer_1"):
    kernel, bias = p[layer]["kernel"], p[layer]["bias"]
    d, hidden = h_seq.shape[-1], kernel.shape[1] // 4
    c = np.zeros((h_seq.shape[0], hidden))
    h = np.zeros_like(c)
    outs = []
    for t in range(h_seq.shape[1]):
      z = np.concatenate([h_seq[:, t], h], axis=-1) @ kernel + bias
      i, g, f, o = np.split(z, 4, axis=-1)
      c = _sigmoid(f + 1.0) * c + _sigmoid(i) * np.tanh(g)
      h = _sigmoid(o) * np.tanh(c)
      outs.append(h)
    h_seq = np.stack(outs, axis=1)
  return h_seq[:, -1] @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"]


def test_forward_is_the_lstm_recurrence():
  model = char_lstm.CharLSTM(vocab_size=text.VOCAB_SIZE, num_classes=text.VOCAB_SIZE, hidden=12)
  x, _, _ = text.samples(["Fair is foul, and foul is fair:", "Hover through the fog"],
                         seq_len=20)
  params = model.init(jax.random.PRNGKey(0), jnp.asarray(x[:1]))
  assert params["params"]["LSTMLayer_0"]["kernel"].shape == (8 + 12, 48)
  got = model.apply(params, jnp.asarray(x))
  np.testing.assert_allclose(got, _numpy_forward(params, x), rtol=1e-4, atol=1e-5)


def _text_dataset(num_clients=5, seq_len=12, seed=0) -> Dataset:
  rng = np.random.default_rng(seed)
  words = ["thou", "art", "more", "lovely", "and", "temperate", "rough", "winds", "do"]
  xs, ys = [], []
  for i in range(num_clients):
    passages = [" ".join(rng.choice(words, 3 + i)) for _ in range(1 + i % 2)]
    x, y, _ = text.samples(passages, seq_len=seq_len)
    xs.append(x)
    ys.append(y)
  train = FederatedData.from_clients(xs, ys)
  return Dataset("text", train, train.x[:16], train.y[:16], text.VOCAB_SIZE, (seq_len,), False,
                 vocab_size=text.VOCAB_SIZE)


def test_token_ids_stay_integers_in_the_layout():
  ds = _text_dataset()
  assert ds.train.x.dtype == np.int8 and ds.train.y.dtype == np.int32


@pytest.mark.parametrize("width", [0, 2])
def test_vectorized_rounds_equal_a_per_client_loop(width):
  ds = _text_dataset()
  model = models.make("char_lstm", num_classes=ds.num_classes, is_image=False, dataset=ds)
  assert model.vocab_size == text.VOCAB_SIZE and model.hidden == 256  # the declared default
  model = char_lstm.CharLSTM(vocab_size=ds.vocab_size, num_classes=ds.num_classes, hidden=8)
  task = make_task(ds, model)
  steps = world_lib.client_steps(ds.train.counts, local_steps=0, local_epochs=1.0,
                                 batch_size=4)
  world = world_lib.make(participation.uniform(ds.train.num_clients, 3), steps)
  hp = dict(client_lr=0.5, server_lr=1.0, batch_size=4, sampling="shuffle",
            weighting="data_size", client_width=width)
  alg = fedavg.build(task, world, hp)
  server, clients = alg.init(jax.random.PRNGKey(0))
  params, round_fn = server.params, jax.jit(alg.round)
  for t in range(2):
    key = jax.random.PRNGKey(200 + t)
    expected = _loop_round(task, world, hp, params, key, t)
    server, clients, _ = round_fn(server, clients, key)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6),
                 server.params, expected)
    params = server.params


def test_models_and_data_must_agree():
  tokens = _text_dataset()
  with pytest.raises(UsageError, match="holds token sequences; its model is one of char_lstm, "
                                       "not --model=logreg"):
    models.make("logreg", num_classes=tokens.num_classes, is_image=False, dataset=tokens)
  with pytest.raises(UsageError, match="--model=char_lstm reads token sequences"):
    models.make("char_lstm", num_classes=3, is_image=False, dataset=toy_dataset())
  with pytest.raises(UsageError, match="takes no zero init"):
    models.make("char_lstm", num_classes=3, is_image=False, zero_init=True)
