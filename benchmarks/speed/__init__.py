"""The speed benchmarks, each `python -m benchmarks.speed.NAME` from the repository root;
`harness` is what they share, `workloads` their generated data."""
