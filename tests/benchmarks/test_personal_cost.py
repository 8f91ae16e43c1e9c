"""benchmarks/speed/personal_cost.py: its arguments, and one tiny interleaved measurement."""

import pytest

from benchmarks.speed import harness, personal_cost, workloads


def test_unknown_algorithms_are_refused_with_the_valid_ones():
  with pytest.raises(SystemExit):
    personal_cost.parse(["--algos=fedrep,nope"])
  assert personal_cost.parse(["--algos=fedrep"]).algos == ["fedavg", "fedrep"]


def test_every_side_builds_and_the_sides_take_turns():
  dataset = workloads.mnist_shaped(0, 20, 20, 10)
  sides = {a: personal_cost.side(a, dataset) for a in personal_cost.SIDES}
  some = {a: sides[a] for a in ("fedavg", "fedrep")}
  seconds = harness.interleaved(some, rounds=1, repeats=2)
  assert {a: len(s["wall"]) for a, s in seconds.items()} == {"fedavg": 2, "fedrep": 2}
