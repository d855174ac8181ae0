"""Injected time. Broker logic never calls time.time()/time.monotonic() directly."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def time_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (record timestamps, retention)."""
        ...

    def monotonic_ms(self) -> int:
        """Monotonic milliseconds (timeouts, intervals)."""
        ...


class RealClock:
    def time_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to: for deterministic tests."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._wall = start_ms
        self._mono = 0

    def time_ms(self) -> int:
        return self._wall

    def monotonic_ms(self) -> int:
        return self._mono

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError("a clock does not go backwards")
        self._wall += ms
        self._mono += ms
