"""The trade-statistics interactive-query service on ``strom.streams`` (see :mod:`.cli`)."""
