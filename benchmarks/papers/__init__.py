"""The papers whose claims `benchmarks/claims.py` checks, each declared in its module."""

from papers import fedalign, fedawe, fedef

PAPERS = {p.name: p for p in (fedawe.PAPER, fedalign.PAPER, fedef.PAPER)}
