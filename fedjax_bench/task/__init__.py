"""The task (data bound to a model), its evaluation and builders, its optimum, per-run views."""
