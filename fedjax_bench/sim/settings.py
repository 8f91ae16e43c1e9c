"""The simulated world's settings: who takes part, and when clients are available."""

from fedjax_bench.settings import NON_NEGATIVE, POSITIVE, PROBABILITY, section, setting
from fedjax_bench.sim.availability import DYNAMICS, PHI_MODES
from fedjax_bench.sim.participation import PARTICIPATIONS


@section("simulated world")
class WorldSettings:
  participation: str = setting("uniform", "uniform: --clients_per_round of --num_clients "
                               "without replacement; full: everyone; bernoulli: each client "
                               "independently with --participation_prob; proportional: "
                               "--clients_per_round distinct clients drawn one by one in "
                               "proportion to their training examples (q-FFL, FedProx).",
                               choices=PARTICIPATIONS)
  clients_per_round: int = setting(10, "Cohort size for --participation=uniform and "
                                   "proportional.", check=POSITIVE)
  participation_prob: float = setting(0.1, "Probability for --participation=bernoulli.",
                                      check=PROBABILITY)
  cohort_cap: int = setting(0, "Static cohort size for bernoulli participation and "
                            "availability (0: mean + 7 std).", check=NON_NEGATIVE)
  availability: str = setting("off", "Client availability: each client is available with its "
                              "own probability p_i^t = p_i * f(t) (the FedAWE paper's App. J.3); off: "
                              "--participation decides.",
                              choices=("off", *DYNAMICS))
  availability_probs: str = setting("data", "Base p_i: data = <label histogram of client i, "
                                    "phi> (FedAWE, App. J.3); constant = --availability_p for every "
                                    "client (the paper's Example 2).",
                                    choices=("data", "constant"))
  availability_phi: str = setting("paper", "Class weights phi of the data-correlated p_i: "
                                  "paper = U(0,1) for the first half of the classes, U(0,0.5) "
                                  "for the rest, drawn from --partition_seed; stress = 0.9 / "
                                  "0.1 (our FedAWE CPU experiment, docs/papers/fedawe.md).",
                                  choices=PHI_MODES)
  availability_p: float = setting(0.5, "p_i of every client for --availability_probs="
                                  "constant.", check=PROBABILITY)
  availability_p_min: float = setting(0.0, "Floor on the base p_i (IBM/fedau used 0.02; the "
                                      "FedAWE paper none).", check=PROBABILITY)
  availability_period: int = setting(20, "Period P of staircase/sine/interleaved_sine (and of "
                                     "cyclic).", check=POSITIVE)
  availability_gamma: float = setting(0.3, "Amplitude gamma of the sine dynamics.",
                                      check=PROBABILITY)
  availability_delta0: float = setting(0.1, "interleaved_sine: p_i^t below this is 0.",
                                       check=PROBABILITY)
  availability_low: float = setting(0.4, "staircase: the factor of the low half-period.",
                                    check=PROBABILITY)
  markov_a: float = setting(0.05, "markov: the inactive -> active transition probability.",
                            check=PROBABILITY)

  def availability_kwargs(self) -> dict:
    return dict(period=self.availability_period, gamma=self.availability_gamma,
                delta0=self.availability_delta0, staircase_low=self.availability_low,
                markov_a=self.markov_a, p_min=self.availability_p_min, cap=self.cohort_cap)
