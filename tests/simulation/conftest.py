from __future__ import annotations

import pytest
from raftsim import TOTALS


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TOTALS.runs:
        t = TOTALS
        terminalreporter.write_line(
            f"raft simulation: {t.runs} seeded runs, {t.events} events, {t.checks} invariant checks "
            f"(after every event), {t.messages} messages, {t.elections} elected leaders, {t.kills} kills, "
            f"{t.unflushed_lost} unflushed records lost to kills"
        )
