"""strom.streams example: stocks (see cli.py)."""
