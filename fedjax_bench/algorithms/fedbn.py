"""FedBN (Li, Jiang, Zhang, Kamp & Dou, ICLR 2021, "FedBN: Federated Learning on Non-IID
Features via Local Batch Normalization", arXiv:2102.07623), Algorithm 1: every layer is
averaged but batch normalization, which each client keeps.

  Every client's model w^(k) starts as w_0. Each round t:
    1. the server samples S_t (the world's participation; the paper takes every client);
    2. each k in S_t runs its local steps of SGD on its model: the shared layers from the
       server's, its BatchNorm layers (their scale and bias, and their running mean and
       variance) its own;
    3. every layer l that is not BatchNorm becomes the (weighted) mean over S_t of the
       clients' w_l^(k) (the paper's 1/K: --weighting=uniform, the default), through the
       server optimizer (sgd at lr 1: the mean itself); each client keeps its BatchNorm.
  A client not sampled keeps its BatchNorm layers.

A model's batch normalization is every module that keeps running statistics
(models/layers.py); the models with it are --model=mlp_bn and fedbn_cnn (the paper's digits
CNN). On a model without any nothing is local and this is FedAvg bit for bit. Evaluation
scores each client's model (the shared layers, its BatchNorm) on its own test data
(personal_test_accuracy and its spread; needs --holdout_fraction); test_accuracy scores the
server's model with the initial BatchNorm, a model no client uses.
"""

from fedjax_bench.algorithms import fedavg, personal_parts
from fedjax_bench.core.types import FederatedAlgorithm
from fedjax_bench.models import layers
from fedjax_bench.settings import coerce

Hparams = fedavg.Hparams


def build(task, world, hp: Hparams) -> FederatedAlgorithm:
  hp = coerce(Hparams, hp)
  personal_parts.require_client_test(task, "fedbn")
  return personal_parts.build(task, world, hp,
                              layers.norm_mask(personal_parts.shapes(task)))
