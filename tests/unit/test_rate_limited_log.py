"""RateLimitedLog: one line per fault and interval, a count of the repeats, a recovery line."""

from __future__ import annotations

import errno
import logging
import os

import pytest

from strom.clock import ManualClock
from strom.log.errors import KafkaStorageError
from strom.rate_limited_log import RateLimitedLog, describe_error


def _wrapped(err: int) -> KafkaStorageError:
    try:
        try:
            raise OSError(err, os.strerror(err), "/d/t-0/0.log")
        except OSError as e:
            raise KafkaStorageError(f"append to t-0 failed: {e}") from e
    except KafkaStorageError as k:
        return k


def test_describe_error_finds_the_errno_behind_a_storage_error() -> None:
    assert describe_error(_wrapped(errno.ENOSPC)) == "ENOSPC (No space left on device) on /d/t-0/0.log"
    assert describe_error(ValueError("plain")) == "plain"


def test_one_line_per_interval_then_a_recovery_line(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    rl = RateLimitedLog(logging.getLogger("test.rl"), clock, interval_ms=60_000)
    caplog.set_level(logging.INFO, "test.rl")
    rl.ok("append to", "t-0")  # nothing failing: silent
    for _ in range(100):
        rl.failed("append to", "t-0", _wrapped(errno.ENOSPC), "answering KAFKA_STORAGE_ERROR")
        clock.advance(100)
    rl.failed("flush of", "t-0", _wrapped(errno.EIO), "retrying")  # another fault: its own line
    assert [r.getMessage() for r in caplog.records] == [
        "append to t-0 failed: ENOSPC (No space left on device) on /d/t-0/0.log; "
        "answering KAFKA_STORAGE_ERROR",
        "flush of t-0 failed: EIO (Input/output error) on /d/t-0/0.log; retrying",
    ]
    assert all(r.exc_info is None for r in caplog.records)  # no traceback
    caplog.clear()
    clock.advance(60_000)
    rl.failed("append to", "t-0", _wrapped(errno.ENOSPC), "answering KAFKA_STORAGE_ERROR")
    assert [r.getMessage() for r in caplog.records] == [
        "append to t-0 failed again: ENOSPC (No space left on device) on /d/t-0/0.log; 99 more failure(s) "
        "in the 70.0 s since the last report; answering KAFKA_STORAGE_ERROR"
    ]
    caplog.clear()
    rl.ok("append to", "t-0")
    rl.ok("append to", "t-0")
    assert [r.getMessage() for r in caplog.records] == [
        "append to t-0 works again after 101 failure(s) in 70.0 s"
    ]
    assert rl.failing  # the flush fault has not cleared
    rl.ok("flush of", "t-0")
    assert not rl.failing


def test_flapping_logs_at_most_two_lines_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    """A nearly full disk: appends alternate between failing and working."""
    clock = ManualClock()
    rl = RateLimitedLog(logging.getLogger("test.flap"), clock, interval_ms=60_000)
    caplog.set_level(logging.INFO, "test.flap")
    for _ in range(50):
        rl.failed("append to", "t-0", _wrapped(errno.ENOSPC), "next")
        clock.advance(100)
        rl.ok("append to", "t-0")
        clock.advance(100)
    assert [r.levelname for r in caplog.records] == ["ERROR", "INFO"]
    assert not rl.failing
    caplog.clear()
    clock.advance(60_000)
    rl.failed("append to", "t-0", _wrapped(errno.ENOSPC), "next")
    rl.ok("append to", "t-0")
    assert [r.getMessage() for r in caplog.records] == [
        "append to t-0 failed again: ENOSPC (No space left on device) on /d/t-0/0.log; 49 more failure(s) "
        "in the 70.0 s since the last report; next",
        "append to t-0 works again after 1 failure(s) in 0.0 s",
    ]
