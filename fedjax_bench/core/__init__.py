"""What a round is made of, shared by several algorithms or by the engine: the algorithm
contract (types), keys, cohorts and their rows over the devices, local training and the
terms added to its objective, learning-rate schedules, aggregation, server optimizers, the
synchronous round's steps (rounds), per-client memory, every client's score at one model,
and the check that state fits the device. A mechanism of one paper sits beside its
algorithm in algorithms/."""
