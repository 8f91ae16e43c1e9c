"""A task: federated data bound to a model and its evaluation (`task.py`), the solved
optimum that the optimality gap reads (`optimum.py`), and the per-run views of data and
world that `--data_per_seed` gives each run (`run_data.py`)."""
