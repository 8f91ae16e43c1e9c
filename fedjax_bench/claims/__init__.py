"""Claims as code: each paper declares its runs and claims (benchmarks/papers/); runs are
cached by configuration and code (`store`), verdicts computed (`verdicts`), each claim's
comparisons checked for equal terms (`pairs`) and the report generated (`paper.render`);
the leaderboard's tasks become such a declaration (`leaderboard.board`). Driven by
`benchmarks/claims.py`."""

from fedjax_bench.claims.paper import Curve, Figure, Paper, plot, render
from fedjax_bench.claims.store import Run
from fedjax_bench.claims.verdicts import (AtLeast, AtMost, Claim, Difference, Equivalent, Exact,
                                         LargerGap, Metric)

__all__ = ["AtLeast", "AtMost", "Claim", "Curve", "Difference", "Equivalent", "Exact", "Figure",
           "LargerGap", "Metric", "Paper", "Run", "plot", "render"]
