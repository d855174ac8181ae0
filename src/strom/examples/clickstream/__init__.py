"""strom.streams example: clickstream (see cli.py)."""
