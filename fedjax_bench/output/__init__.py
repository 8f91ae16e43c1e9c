"""What a run leaves and shows: its files, summary and plots (`results.py`), its terminal
lines (`console.py`) and its TensorBoard event files (`tensorboard.py`)."""
