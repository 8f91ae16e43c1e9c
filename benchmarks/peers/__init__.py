"""Our FedAvg against the peers researchers use (compare.py)."""
