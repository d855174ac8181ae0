"""Test-only fault injection for crash-safety tests (no effect unless the variable is set).

``STROM_TEST_CRASH_AT=<point>[,<point>...]`` makes the process kill itself with SIGKILL — the
same as ``kill -9`` — when it reaches a named point of a multi-step file operation, so an
integration test can prove that recovery completes or discards the operation. Points:

* ``cleaner.before_swap_lock``: cleaned segment written and fsynced, swap not started
* ``cleaner.before_swap``: the same, under the log's lock, ``.txnindex`` entries merged
* ``cleaner.after_swap_rename``: ``.swap`` committed, old segments still in place
* ``cleaner.after_old_renamed``: old segments renamed to ``.deleted``, ``.swap`` not yet renamed
* ``retention.after_rename``: expired segments renamed to ``.deleted``, checkpoint not written
"""

from __future__ import annotations

import os
import signal

ENV = "STROM_TEST_CRASH_AT"


def crash_point(name: str) -> None:
    points = os.environ.get(ENV)
    if points and name in points.split(","):
        os.kill(os.getpid(), signal.SIGKILL)
