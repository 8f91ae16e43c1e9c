"""Personalized federated learning (FedPer, FedRep, APFL, pFedMe, Per-FedAvg, FedBN): one
headline claim of each paper, tested at CPU scale on data the suite has.

Runs: MNIST over 100 clients with two label shards each (the pathological non-IID split the
personalization papers use), each client's own 20% held out as its test data, the
784-200-200-10 MLP, 10 of 100 clients a round uniformly, 10 local SGD steps of batch 10 at
0.05, 100 rounds. One partition shared by the seeds (per-client test data does not work with
--data_per_seed yet); every method of a seed shares its data, initial model and cohorts, so
differences are paired per seed. Every method is scored on each client's own test data:
a personalized method with each client's own model (personal_test_accuracy), FedAvg's
global model as it is (client_test_accuracy) and after 10 SGD steps of fine-tuning by each
client (finetuned_test_accuracy: FedAvg + FT, the FedRep paper's baseline).
Targets, margins and horizons were declared before any run was made.
"""

from fedjax_bench.claims import Claim, Curve, Difference, Figure, Metric, Paper, Run

# The slow tier's seed budget (docs/claims.md, "Seeds"): 10 seeds a run.
SEEDS = tuple(range(10))

PERS = dict(dataset="mnist", model="mlp", num_clients=100, partition="shards",
            shards_per_client=2, participation="uniform", clients_per_round=10,
            local_steps=10, batch_size=10, client_lr=0.05, rounds=100, eval_every=5,
            holdout_fraction=0.2)
# Per-FedAvg's alpha, and FedAvg fine-tuned by the same one step at it (its paper's
# comparison: FedAvg's model after one step of local SGD).
ALPHA = 0.01
RUNS = {
    "fedavg_ft": dict(algo="fedavg", finetune_steps=10),
    "fedavg_ft1": dict(algo="fedavg", finetune_steps=1, finetune_lr=ALPHA),
    "fedper": dict(algo="fedper"),
    "fedrep": dict(algo="fedrep"),
    "apfl": dict(algo="apfl"),
    "pfedme": dict(algo="pfedme"),
    "perfedavg": dict(algo="perfedavg_fo", perfedavg_alpha=ALPHA),
}
NAMES = {"fedavg_ft": "FedAvg + FT (10 steps)", "fedavg_ft1": "FedAvg + 1 step at α",
         "fedper": "FedPer", "fedrep": "FedRep", "apfl": "APFL", "pfedme": "pFedMe",
         "perfedavg": "Per-FedAvg (FO)"}


def runs():
  return tuple(Run(n, {**PERS, **c}, SEEDS) for n, c in RUNS.items())


def accuracy(run: str, metric: str = "personal_test_accuracy", label: str = "") -> Metric:
  """Mean accuracy over clients on their own test data, in points, the mean of the
  evaluations in the last 20 rounds."""
  return Metric(run, metric, window=20, scale=100.0, label=label or NAMES[run])


FT = accuracy("fedavg_ft", "finetuned_test_accuracy")
GLOBAL = accuracy("fedavg_ft", "client_test_accuracy", "FedAvg, global model")


def claims():
  s = ("MNIST, two label shards a client, 100 clients, 10 a round: mean accuracy over clients "
       "on their own 20%")
  return (
      Claim("fedper-beats-global", "FedPer's personal models (shared body, each client's own "
            "output layer) are more accurate on their clients' data than FedAvg's global model",
            "FedPer (Arivazhagan et al. 2019), its experiments: FedPer above FedAvg on "
            "non-IID clients",
            Difference(accuracy("fedper"), GLOBAL), section=s),
      Claim("fedper-beats-ft", "FedPer beats FedAvg + fine-tuning", "the FedRep paper's "
            "comparisons (FedPer among the methods above FedAvg + FT)",
            Difference(accuracy("fedper"), FT), section=s),
      Claim("fedrep-beats-ft", "FedRep beats FedAvg + fine-tuning", "FedRep (Collins et al., "
            "ICML 2021), its experiments: FedRep above FedAvg + FT",
            Difference(accuracy("fedrep"), FT), section=s),
      Claim("fedrep-beats-fedper", "FedRep (head first, then body) beats FedPer (head and body "
            "together)", "FedRep, its experiments: FedRep above FedPer",
            Difference(accuracy("fedrep"), accuracy("fedper")), section=s),
      Claim("apfl-beats-global", "APFL's personalized models (adaptive α) beat FedAvg's global "
            "model on non-IID clients", "APFL (Deng et al. 2020), its experiments",
            Difference(accuracy("apfl"), GLOBAL), section=s),
      Claim("pfedme-beats-perfedavg", "pFedMe's personalized models beat Per-FedAvg's",
            "pFedMe (T Dinh et al., NeurIPS 2020), its MNIST experiments",
            Difference(accuracy("pfedme"), accuracy("perfedavg")), section=s,
            note="The paper's sizes are on its own MNIST split and models: only the direction "
            "is claimed here."),
      Claim("perfedavg-beats-fedavg-1step", "after one step of local SGD at α, Per-FedAvg's "
            "model is more accurate on a client's data than FedAvg's after the same step",
            "Per-FedAvg (Fallah et al., NeurIPS 2020), its experiments",
            Difference(accuracy("perfedavg"),
                       accuracy("fedavg_ft1", "finetuned_test_accuracy")), section=s),
      Claim("fedbn-feature-shift", "FedBN beats FedAvg when clients differ in their features "
            "(the digits benchmark: MNIST, SVHN, USPS, SynthDigits, MNIST-M)",
            "FedBN (Li et al., ICLR 2021), its digits experiments",
            not_attempted="USPS, SynthDigits and MNIST-M are not available offline, and MNIST "
            "label shards differ in labels, not features; fedbn is tested for its reductions "
            "and against a NumPy transcription (tests/algorithms/test_fedbn.py)", section=s),
  )


FIGURES = (
    Figure("personal_accuracy.png", "MNIST, two label shards a client: accuracy on each "
           "client's own data",
           (Curve("fedavg_ft", "FedAvg (global)", "client_test_accuracy"),
            Curve("fedavg_ft", NAMES["fedavg_ft"], "finetuned_test_accuracy"),
            *(Curve(n, NAMES[n], "personal_test_accuracy")
              for n in ("fedper", "fedrep", "apfl", "pfedme", "perfedavg"))),
           ylabel="mean accuracy over clients"),
)

PAPER = Paper(
    name="personalization",
    title="Personalized FL: FedPer, FedRep, APFL, pFedMe, Per-FedAvg, FedBN",
    source="Arivazhagan et al. (FedPer) 2019, arXiv:1912.00818; Collins et al. (FedRep) ICML "
           "2021, arXiv:2102.07078; Deng et al. (APFL) 2020, arXiv:2003.13461; T Dinh et al. "
           "(pFedMe) NeurIPS 2020, arXiv:2006.08848; Fallah et al. (Per-FedAvg) NeurIPS 2020, "
           "arXiv:2002.07948; Li et al. (FedBN) ICLR 2021, arXiv:2102.07623. How each is read: "
           "docs/algorithms.md.",
    runs=runs(), claims=claims(), figures=FIGURES,
    intro="""Everything here runs on a 2-core CPU, on one setting that all six papers' claims
can be read on: MNIST over 100 clients with two label shards each, each client's own 20%
held out, the 784-200-200-10 MLP, 10 of 100 clients a round, 10 local SGD steps of batch 10 at
0.05, 100 rounds, every method at its declared defaults (FedPer's and FedRep's head: the output
layer; FedRep: 10 head steps, then the 10 body steps; APFL: α = 0.25, adapted; pFedMe: λ = 15,
K = 5, personal step 0.05; Per-FedAvg FO: α = 0.01). The papers run other data (FLICKR-AES,
CIFAR, FEMNIST, their own MNIST splits): their claims are read here as directions, not
sizes.""",
    notes="""Every margin is 0: the papers' claims are orderings of accuracies. "FedAvg + FT"
fine-tunes the global model with 10 SGD steps at the clients' learning rate on each client's
own training data before scoring it on its test data (the evaluation protocol of
docs/algorithms.md); "FedAvg + 1 step at α" is Per-FedAvg's comparison, one step at its
α = 0.01.""")
