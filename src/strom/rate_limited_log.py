"""A log line for a recurring condition (out of file descriptors ...) at most once a minute."""

from __future__ import annotations

import logging
import threading
import time

_LOG_EVERY_S = 60.0


class RateLimitedLog:
    """One log line per ``interval_s`` at most for a recurring condition; counts the rest."""

    def __init__(self, logger: logging.Logger, interval_s: float = _LOG_EVERY_S) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self._last = -1e18
        self._suppressed = 0
        self._lock = threading.Lock()

    def log(self, level: int, msg: str, *args: object) -> bool:
        now = time.monotonic()
        with self._lock:
            if now - self._last < self.interval_s:
                self._suppressed += 1
                return False
            self._last = now
            suppressed, self._suppressed = self._suppressed, 0
        if suppressed:
            msg += f" ({suppressed} more like this since the last message)"
        self.logger.log(level, msg, *args)
        return True
