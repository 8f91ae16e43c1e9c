"""fedjax_bench: a JAX-vectorized benchmark suite for federated optimization.

    import fedjax_bench
    result = fedjax_bench.run(algo="fedavg", dataset="synthetic", seeds=3)

`run` takes the command line's flag names as keyword arguments (`api.run`); `Config` and
`resolve` give the typed configuration (`config`).
"""

_EXPORTS = {"run": "api", "Result": "api", "Config": "config", "resolve": "config"}


def __getattr__(name):  # imported on first use: `import fedjax_bench` stays light
  if name in _EXPORTS:
    import importlib
    return getattr(importlib.import_module(f"fedjax_bench.{_EXPORTS[name]}"), name)
  raise AttributeError(f"module 'fedjax_bench' has no attribute {name!r}")
