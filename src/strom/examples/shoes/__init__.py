"""strom.streams example: shoes (see cli.py)."""
