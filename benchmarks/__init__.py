"""The suite's scripts: the command line (`run.py`), the paper claims (`claims.py`,
`papers/`, `configs/`), the speed benchmarks (`speed/`) and tools (`tools/`).

Run them from the repository root: `python benchmarks/run.py`, `python benchmarks/claims.py`,
or any script as a module, `python -m benchmarks.speed.scale`. benchmarks/README.md lists
every script.
"""
