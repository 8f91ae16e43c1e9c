"""Pure building blocks shared by every algorithm."""
