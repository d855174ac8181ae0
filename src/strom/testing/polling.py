"""Waiting for a condition in tests and benches that drive real broker processes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError, TimeoutError):
    """A condition did not hold in time (an AssertionError for pytest, a TimeoutError for benches)."""


def wait_for(what: str, check: Callable[[], T | None], timeout: float = 30.0, every: float = 0.2) -> T:
    """Call ``check`` every ``every`` seconds until it returns something true, and return that.
    An exception from ``check`` (a node restarting, a connection refused) counts as "not yet".
    Raises :class:`WaitTimeout` naming ``what`` and the last answer after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as e:  # a node restarting: ask again
            last = e
        if last and not isinstance(last, Exception):
            return last  # type: ignore[return-value]
        time.sleep(every)
    raise WaitTimeout(f"timed out waiting for {what} (last: {last!r})")


__all__ = ["WaitTimeout", "wait_for"]
