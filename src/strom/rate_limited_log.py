"""One clear log line per environment fault, rate-limited, and one when it clears.

A full or failing disk makes every produce, flush, retention round and coordinator write fail the
same way, many times a second. :class:`RateLimitedLog` turns that into one line per fault
``(what, subject)`` — what failed, on which partition or file, the errno name, what happens next —
at most once per ``interval_ms`` (default one minute; repeats in between are counted and reported
with the next line), and one line when the same operation succeeds again::

    ERROR append to t-0 failed: ENOSPC (No space left on device) on /data/t-0/...log; answering
          KAFKA_STORAGE_ERROR, nothing appended; every request retries
    ERROR append to t-0 failed again: ENOSPC (...); 41 more failure(s) in the 60.2 s since ...
    INFO  append to t-0 works again after 43 failures in 12.3 s

No traceback: an ``OSError`` from the disk is an expected condition, not a bug. Time comes from
the injected clock. :meth:`RateLimitedLog.ok` is cheap enough for the produce path (one attribute
test while nothing is failing). Thread-safe (the log cleaner reports from its own thread).
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from dataclasses import dataclass

from strom.clock import Clock

__all__ = ["RateLimitedLine", "RateLimitedLog", "describe_error"]

DEFAULT_INTERVAL_MS = 60_000


def describe_error(exc: BaseException) -> str:
    """``ENOSPC (No space left on device) on <file>`` for the ``OSError`` in ``exc``'s chain
    (``KafkaStorageError`` wraps one); otherwise ``str(exc)``."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            break
        if isinstance(seen, OSError) and seen.errno is not None:
            name = errno.errorcode.get(seen.errno, f"errno {seen.errno}")
            where = f" on {seen.filename}" if seen.filename else ""
            return f"{name} ({seen.strerror}){where}"
        seen = seen.__cause__ or seen.__context__
    return str(exc) or type(exc).__name__


@dataclass
class _Fault:
    first_ms: int  # start of the current run of failures
    reported_ms: int  # last failure line
    failures: int = 1  # in the current run
    suppressed: int = 0  # since the last failure line
    active: bool = True  # failing now (no success since)
    owes_recovery: bool = True  # a failure line was logged since the last recovery line


class RateLimitedLog:
    """Rate-limited fault reports on ``logger`` (see the module docstring).

    Per fault: a failure line at most once per interval (repeats counted into the next one), and
    a recovery line only after a failure line — so an operation that flaps between failing and
    working (a nearly full disk) still logs at most two lines per interval."""

    def __init__(self, logger: logging.Logger, clock: Clock, interval_ms: int = DEFAULT_INTERVAL_MS) -> None:
        self.logger = logger
        self.clock = clock
        self.interval_ms = interval_ms
        self._faults: dict[tuple[str, str], _Fault] = {}
        self._active = 0  # faults with ``active`` set
        self._lock = threading.Lock()

    @property
    def failing(self) -> bool:
        """True while any fault has not cleared (callers may skip :meth:`ok` otherwise)."""
        return self._active > 0

    def failed(self, what: str, subject: str, error: BaseException | str, then: str) -> None:
        """Report that ``what`` (e.g. ``"append to"``) failed for ``subject`` (``"t-0"``, a file)
        with ``error``; ``then`` says what happens next. Logged at most once per interval."""
        now = self.clock.monotonic_ms()
        key = (what, subject)
        with self._lock:
            fault = self._faults.get(key)
            if fault is None:
                self._faults[key] = _Fault(now, now)
                self._active += 1
                again, suppressed, since = False, 0, 0
            else:
                if not fault.active:
                    fault.active, fault.first_ms, fault.failures = True, now, 0
                    self._active += 1
                fault.failures += 1
                if now - fault.reported_ms < self.interval_ms:
                    fault.suppressed += 1
                    return
                again, suppressed, since = True, fault.suppressed, now - fault.reported_ms
                fault.reported_ms, fault.suppressed, fault.owes_recovery = now, 0, True
        cause = error if isinstance(error, str) else describe_error(error)
        if again and suppressed:
            self.logger.error(
                "%s %s failed again: %s; %d more failure(s) in the %s since the last report; %s",
                what, subject, cause, suppressed, _seconds(since), then,
            )
        else:
            self.logger.error("%s %s failed: %s; %s", what, subject, cause, then)

    def ok(self, what: str, subject: str) -> None:
        """``what`` for ``subject`` succeeded: if it had failed, say once that it recovered."""
        if not self._active:
            return
        with self._lock:
            fault = self._faults.get((what, subject))
            if fault is None or not fault.active:
                return
            fault.active = False
            self._active -= 1
            if not fault.owes_recovery:
                return
            fault.owes_recovery = False
            failures, took = fault.failures, self.clock.monotonic_ms() - fault.first_ms
        self.logger.info("%s %s works again after %d failure(s) in %s", what, subject, failures,
                         _seconds(took))


def _seconds(ms: int) -> str:
    return f"{ms / 1000:.1f} s"


class RateLimitedLine:
    """One log line per ``interval_s`` at most for one recurring condition with no subject and
    no recovery to report (out of file descriptors on accept or open); counts the rest into the
    next line. Wall-clock based: it serves module-level code that has no injected clock."""

    def __init__(self, logger: logging.Logger, interval_s: float = DEFAULT_INTERVAL_MS / 1000) -> None:
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
