"""The papers whose claims `benchmarks/claims.py` checks, each declared in its module, and
the leaderboard (leaderboard.py), run and checked the same way."""

from benchmarks.papers import (area, baselines, fedalign, fedawe, fedef, hetero_agg, leaderboard,
                               methods, personalization, shakespeare)

PAPERS = {p.name: p for p in (fedawe.PAPER, fedef.PAPER, area.PAPER, hetero_agg.PAPER,
                              fedalign.PAPER, baselines.PAPER, shakespeare.PAPER,
                              personalization.PAPER, methods.PAPER, leaderboard.PAPER)}
# Declared, their runs not made yet: `--check` skips them (`--list` and `claims.py PAPER`
# work). A paper leaves this list in the commit that adds its runs and REPORT.md.
PENDING = ()
