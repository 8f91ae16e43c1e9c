"""FedAWE (Xiang et al., NeurIPS 2024): its claims, tested at CPU scale.

Runs: the spec's CPU-scale experiment (§9: toyfl, the stress φ, four dynamics; and the
paper's φ on sine) and the same comparison on real MNIST (the paper's φ, sine, MLP).
Every algorithm of a setting sees the same data, availability and minibatch keys, so
differences are paired per seed.
"""

from fedjax_bench.claims import (Claim, Curve, Difference, Equivalent, Figure,
                                 Metric, Paper, Run)

ALGOS = ("fedawe", "fedavg", "fedavg_all", "fedavg_known", "fedau", "f3ast", "mifa", "fedvarp")
NAMES = {"fedawe": "FedAWE", "fedavg": "FedAvg-active", "fedavg_all": "FedAvg-all",
         "fedavg_known": "FedAvg-known", "fedau": "FedAU", "f3ast": "F3AST", "mifa": "MIFA",
         "fedvarp": "FedVARP"}
DYNAMICS = ("stationary", "staircase", "sine", "interleaved_sine")
OWN = {"fedawe": {"fedawe_clip": 0.0}}  # FedAWE as written (the only algorithm with a clip)

TOYFL = dict(dataset="toyfl", model="logreg", zero_init=True, partition="dirichlet",
             alpha=0.1, num_clients=100, local_steps=10, batch_size=32,
             sampling="replacement", client_lr=0.05, client_lr_schedule="inv_sqrt",
             client_lr_decay_rounds=10, server_lr=1.0, rounds=300, eval_every=10,
             final_window=50, availability_phi="stress", train_eval_examples=0,
             data_per_seed=True)
MNIST = dict(dataset="mnist", model="mlp", partition="dirichlet", alpha=0.1, num_clients=100,
             local_steps=10, batch_size=32, sampling="replacement", client_lr=0.05,
             client_lr_schedule="inv_sqrt", client_lr_decay_rounds=10, server_lr=1.0,
             rounds=200, eval_every=10, final_window=50, availability_phi="paper",
             train_eval_examples=10000)
# Table 8's targets for MNIST: the paper's rule (spec §7.2), quarters of the best final
# test accuracy rounded down to a multiple of 10%, with 90% for MNIST.
MNIST_TARGETS = (22.5, 45.0, 67.5, 90.0)
# On toyfl every quarter target is reached within 10 rounds; its targets are fractions of
# FedAWE's score in the spec's calibration (§9.2, stress φ, sine: 69.71%).
TOYFL_BEST = 69.71


def runs():
  out = []
  for dyn in DYNAMICS:
    out += [Run(f"toyfl_stress_{dyn}_{a}", {**TOYFL, "algo": a, "availability": dyn, **OWN.get(a, {})})
            for a in ALGOS]
  out += [Run(f"toyfl_paper_sine_{a}", {**TOYFL, "algo": a, "availability": "sine",
                                         "availability_phi": "paper", **OWN.get(a, {})})
          for a in ALGOS]
  out += [Run(f"mnist_sine_{a}", {**MNIST, "algo": a, "availability": "sine", **OWN.get(a, {})})
          for a in ALGOS]
  out.append(Run("mnist_sine_fedawe_clip", {**MNIST, "algo": "fedawe", "availability": "sine",
                                            "fedawe_clip": 0.5}))
  return tuple(out)


def final(setting: str, algo: str) -> Metric:
  """A run's score: its mean test accuracy (%) over the last 50 rounds."""
  return Metric(f"{setting}_{algo}", "test_accuracy", window=50, scale=100.0,
                label=NAMES[algo])


def reach(setting: str, algo: str, target: float) -> Metric:
  return Metric(f"{setting}_{algo}", "test_accuracy", scale=100.0, reach=target,
                label=NAMES[algo])


SETTINGS = {f"toyfl_stress_{d}": f"toyfl, stress φ, {d.replace('_', ' ')}" for d in DYNAMICS}
SETTINGS["mnist_sine"] = "MNIST, paper's φ, sine"
GPU = ("SVHN, CIFAR-10 and CINIC-10 cannot be downloaded here and 2,000 rounds of the "
       "paper's CNNs need a GPU; flagfiles in benchmarks/configs/fedawe/")


def claims():
  out = []
  t2 = "Table 2: group-1 ordering and gains (tested at CPU scale)"
  for s, where in SETTINGS.items():
    margin = 1.5 if s.startswith("toyfl") else 0.0
    out.append(Claim(
        f"T2-gain-{s}", f"FedAWE beats FedAvg-active ({where}"
        + (", spec §9.3 margin +1.5 pp)" if margin else ")"),
        "+1.4 to +5.1 pp", Difference(final(s, "fedawe"), final(s, "fedavg"), margin),
        section=t2))
    out.append(Claim(
        f"T2-all-{s}", f"FedAvg-active beats FedAvg-all ({where})", "+4.5 to +11.2 pp",
        Difference(final(s, "fedavg"), final(s, "fedavg_all")), section=t2))
    for x in ("fedau", "f3ast"):
      out.append(Claim(
          f"T2-{x}-{s}", f"FedAWE beats {NAMES[x]} ({where})", "+0.2 to +3.1 pp",
          Difference(final(s, "fedawe"), final(s, x)), section=t2))
    out.append(Claim(
        f"T2-f3ast-active-{s}", f"F3AST at least matches FedAvg-active ({where})",
        "+0.1 to +1.2 pp", Difference(final(s, "f3ast"), final(s, "fedavg")), section=t2))
  out.append(Claim("T2-cells", "Table 2's cells: SVHN, CIFAR-10, CINIC-10 × four dynamics × "
                   "eight algorithms, within ±2 pp", "Table 2", not_attempted=GPU, section=t2))

  spec = "Spec §9.3: FedAWE matches the memory- and oracle-aided methods (toyfl)"
  for d in DYNAMICS:
    s = f"toyfl_stress_{d}"
    for x in ("fedavg_known", "fedau", "mifa", "fedvarp"):
      out.append(Claim(
          f"S-eq-{x}-{d}", f"|FedAWE − {NAMES[x]}| ≤ 0.6 pp ({SETTINGS[s]})", "spec: ≤ 0.6 pp",
          Equivalent(final(s, "fedawe"), final(s, x), 0.6), section=spec))
  s = "toyfl_paper_sine"
  out.append(Claim("S-paper-phi", "With the paper's φ on toyfl, FedAWE beats FedAvg-active",
                   "spec §9.3 (smoke)", Difference(final(s, "fedawe"), final(s, "fedavg")),
                   section=spec))

  t8 = "Table 8: rounds to a test-accuracy target (MNIST, sine)"
  for q, target in zip(("¼", "½", "¾"), MNIST_TARGETS[:3]):
    out.append(Claim(
        f"T8-lag-{q}", f"FedAWE lags FedAvg-active slightly to the {q} target "
        f"({target:g}%)", "SVHN 40 vs 20, 120 vs 80, 200 vs 160 rounds",
        Difference(reach("mnist_sine", "fedawe", target), reach("mnist_sine", "fedavg", target)),
        section=t8))
  s = "toyfl_stress_sine"
  for frac in (0.90, 0.95, 0.98):
    target = round(frac * TOYFL_BEST, 2)
    out.append(Claim(
        f"T8-lag-toyfl-{frac:g}", f"FedAWE lags FedAvg-active slightly to a target "
        f"({target:g}%, {frac:.0%} of the spec's best; toyfl, stress φ, sine)",
        "SVHN 40 vs 20, 120 vs 80, 200 vs 160 rounds",
        Difference(reach(s, "fedawe", target), reach(s, "fedavg", target)), section=t8))
  out.append(Claim(
      "T8-final", f"FedAWE reaches the final target ({MNIST_TARGETS[3]:g}%) faster than "
      "FedAvg-active", "SVHN 820 vs 900; CIFAR-10 1360 vs 1060 (slower)",
      Difference(reach("mnist_sine", "fedavg", MNIST_TARGETS[3]),
                 reach("mnist_sine", "fedawe", MNIST_TARGETS[3])), section=t8))
  out.append(Claim("T8-cells", "Table 8 on SVHN, CIFAR-10, CINIC-10", "Table 8",
                   not_attempted=GPU, section=t8))

  s = "mnist_sine"
  out.append(Claim(
      "T2-gain-mnist-clip", "FedAWE with the authors' clip 0.5 beats FedAvg-active (MNIST, "
      "paper's φ, sine)", "+1.4 to +5.1 pp",
      Difference(Metric("mnist_sine_fedawe_clip", window=50, scale=100.0,
                        label="FedAWE (clip 0.5)"), final(s, "fedavg")), section=t2))
  other = "Tables 9-10, examples and figures"
  out += [
      Claim("T9", "FedAWE insensitive to the non-stationarity γ; FedAvg-all degrades most",
            "SVHN 85.6-85.7% for γ 0.1-0.3", not_attempted="not yet run at CPU scale "
            "(issue 21); SVHN: " + GPU, section=other),
      Claim("T10", "Accuracy grows with the Dirichlet α; FedAWE best of group 1 for every α",
            "SVHN 82.5 / 85.6 / 89.7% for α 0.05 / 0.1 / 1", not_attempted="not yet run at "
            "CPU scale (issue 21); SVHN: " + GPU, section=other),
      Claim("Ex1", "Example 1 / Fig. 2: FedAvg over active clients is biased unless p1 = p2",
            "closed form", not_attempted="a closed-form example, not a run: checked exactly "
            "by tests/test_unavailability_toys.py (§8.1)", section=other),
      Claim("Ex2", "Example 2 / Fig. 3: FedAvg loses > 10 pp from γ = 0.1 to 0.5 at p = 0.1",
            "SVHN", not_attempted="not yet run at CPU scale (issue 21); the spec (§8.4) "
            "expects no effect on a toy", section=other),
      Claim("F7-mifa", "Fig. 7: under sine FedAWE ends above MIFA (SVHN; MIFA above on "
            "CIFAR-10 and CINIC-10)", "SVHN 85.6 vs 84.1%",
            Difference(final("mnist_sine", "fedawe"), final("mnist_sine", "mifa")),
            section=other),
      Claim("F1-F6", "Figs. 1, 4, 5, 6: illustrations of availability, partitions and "
            "dynamics", "—", not_attempted="illustrations, no claim to test", section=other),
  ]
  return tuple(out)


FIGURES = (
    Figure("mnist_sine.png", "MNIST, paper's φ, sine: test accuracy",
           tuple(Curve(f"mnist_sine_{a}", NAMES[a], scale=100.0) for a in ALGOS),
           ylabel="test accuracy (%)"),
    Figure("toyfl_stress_sine.png", "toyfl, stress φ, sine: test accuracy",
           tuple(Curve(f"toyfl_stress_sine_{a}", NAMES[a], scale=100.0) for a in ALGOS),
           ylabel="test accuracy (%)"),
)

PAPER = Paper(
    name="fedawe",
    title="FedAWE: efficient federated learning against heterogeneous and non-stationary "
          "client unavailability (Xiang et al., NeurIPS 2024)",
    spec="../shared/specs/000_fedawe.md",
    runs=runs(), claims=claims(), figures=FIGURES,
    intro="""Everything here ran on a 2-core CPU. The paper's own experiments (SVHN,
CIFAR-10, CINIC-10 with CNNs, 2,000 rounds) cannot run here; its orderings are tested on
the spec's CPU-scale task (§9: toyfl, a 10-class Gaussian mixture over 100 clients,
Dirichlet 0.1, logistic regression, 300 rounds, the stress φ that makes availability
strongly label-dependent) and on real MNIST (the paper's φ, the 784-200-200-10 MLP, 200
rounds). A run's score is its mean test accuracy (%) over the last 50 rounds; toyfl
regenerates its data per seed (`--data_per_seed`), MNIST shares one partition.""",
    notes="""FedAWE runs without its clip (`--fedawe_clip=0`, the algorithm as written)
except in T2-gain-mnist-clip (the authors' code clips at 0.5); F3AST is the spec's
literal reconstruction. On toyfl the margin +1.5 pp of the FedAWE gain is the spec's §9.3
calibration, not the paper's; elsewhere a claim of "beats" has margin 0 (an interval
above zero suffices). Table 8's MNIST targets are the paper's rule (quarters of the best
accuracy rounded down to 10%) applied to MNIST; its toyfl targets are fractions of the
spec's calibrated score, since every quarter target is reached within 10 rounds there.
A seed that never reaches a target counts as reaching it one evaluation after the last
round (a lower bound, so a difference with it errs toward zero).

On a convex model (toyfl) all unbiased methods reach the same optimum, so the spec expects
FedAWE to tie, not beat, FedAU, MIFA, FedVARP and FedAvg-known there (the S-eq rows); the
T2-fedau rows test the paper's "beats" anyway. On MNIST, 200 rounds are a tenth of the
paper's 2,000 and every algorithm shares the CPU experiment's learning rate 0.05 (Table 7
gives FedAWE 0.1); we did not tune. The MNIST figure shows FedAWE starting slower than
FedAvg-active (the stale local models Table 8 describes) and its averaged model still
oscillating at round 200.

The paper's analysis is checked exactly by the default test suite, not by runs:
Example 1's biased fixed points and FedAWE's unbiased x̄ (`tests/test_unavailability_toys.py`,
spec §8.1), the periodic orbit under sine availability (§8.2), the five-client values
(§8.6), the instability without the clip (§8.3), Prop. 1, Lemma 2, Eq. 4 and Lemma 4, and
every algorithm against an independent NumPy transcription of its pseudocode
(`tests/test_unavailability_algorithms.py`). §8.3's server-aggregate values for s = 10
(67.048, 56.767) did not reproduce: we and a 512-seed NumPy simulation get 66.61 and
56.35.""")
