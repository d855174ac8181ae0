from __future__ import annotations

import pytest
import replsim
from raftsim import TOTALS


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TOTALS.runs:
        t = TOTALS
        terminalreporter.write_line(
            f"raft simulation: {t.runs} seeded runs, {t.events} events, {t.checks} invariant checks "
            f"(after every event), {t.messages} messages, {t.elections} elected leaders, {t.kills} kills, "
            f"{t.unflushed_lost} unflushed records lost to kills"
        )
    r = replsim.TOTALS
    if r.runs:
        terminalreporter.write_line(
            f"replication simulation: {r.runs} seeded runs, {r.events} events, {r.checks} invariant checks "
            f"(after every event), {r.messages} messages, {r.kills} kills ({r.power_cuts} power cuts), "
            f"{r.elections} leader epochs, {r.truncations} follower truncations, {r.acked_all} acks=all "
            f"and {r.acked_one} acks=1 records acknowledged, {r.unclean} runs past the fault model "
            f"(the last ISR member had lost its tail: durability not checked on)"
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The thousands of seeds (``simulation`` and ``slow``) run only under ``-m slow``: in the
    normal run they are deselected rather than reported as skipped."""
    if "slow" in (config.getoption("markexpr") or ""):
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        many_seeds = item.get_closest_marker("simulation") and item.get_closest_marker("slow")
        (drop if many_seeds else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
