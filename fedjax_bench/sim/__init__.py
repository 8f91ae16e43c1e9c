"""The simulated world: what happens to the clients, as pure functions of (key, t)."""
