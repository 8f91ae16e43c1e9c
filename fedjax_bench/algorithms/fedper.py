"""FedPer (Arivazhagan, Aggarwal, Singh & Choudhary 2019, "Federated Learning with
Personalization Layers", arXiv:1912.00818), Algorithm 1: a shared body ("base layers")
averaged by the server, and personalization layers (the head) that each client keeps.

  W_B^0 the initial body; every client's head W_{P,k} starts as the initial model's.
  Each round t:
    1. the server samples S_t (the world's participation) and sends W_B^t;
    2. each k in S_t runs local SGD on (W_B, W_{P,k}) jointly from (W_B^t, W_{P,k}), its
       local steps (the paper's E epochs: --local_epochs), keeps its new W_{P,k} and returns
       its W_{B,k};
    3. W_B^{t+1} = W_B^t + the (weighted) mean of W_{B,k} - W_B^t through the server
       optimizer (sgd at lr 1: the paper's average; its weights n_k/n: --weighting=data_size).
  A client not sampled keeps its head.

The head is the model's last --head_layers layers (models/layers.py); with 0 nothing is
local and this is FedAvg bit for bit. Evaluation scores each client's (W_B, W_{P,k}) on its
own test data (personal_test_accuracy and its spread; needs --holdout_fraction);
test_accuracy scores the server's body with the initial head, a model no client uses.
"""

from fedjax_bench.algorithms import fedavg, personal_parts
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.settings import coerce, section


@section("fedper")
class Hparams(fedavg.Hparams, personal_parts.HeadLayers):
  pass


def build(task, world, hp: Hparams) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  personal_parts.require_client_test(task, "fedper")
  return personal_parts.build(task, world, hp, personal_parts.head_mask(task, hp.head_layers))
