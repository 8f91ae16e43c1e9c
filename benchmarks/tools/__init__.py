"""Tools: `python -m benchmarks.tools.plot_runs` (curves of several runs in one plot) and
`python -m benchmarks.tools.update_references` (the reference curves the tests compare)."""
