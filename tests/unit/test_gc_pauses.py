"""The garbage-collector pause monitor (strom.observability.gc_pauses)."""

from __future__ import annotations

import gc

import pytest

from strom.observability.gc_pauses import GcPauseMonitor


def test_each_collection_is_timed_by_generation() -> None:
    mon = GcPauseMonitor()
    mon.install()
    try:
        mon.install()  # once only
        assert gc.callbacks.count(mon._callback) == 1
        gc.collect(0)
        gc.collect(2)
        gc.collect(2)
    finally:
        mon.close()
    assert mon._callback not in gc.callbacks
    assert mon.histograms[0].count >= 1 and mon.histograms[2].count >= 2
    assert 0 < mon.max_pause_s < 5
    before = sum(h.count for h in mon.histograms.values())
    gc.collect()
    assert sum(h.count for h in mon.histograms.values()) == before  # closed: no longer counted


def test_pause_is_stop_minus_start() -> None:
    t = [10.0]
    mon = GcPauseMonitor(lambda: t[0])
    mon._callback("stop", {"generation": 1})  # a stop without a start (installed mid-collection)
    mon._callback("start", {"generation": 1})
    t[0] += 0.03
    mon._callback("stop", {"generation": 1})
    assert mon.histograms[1].count == 1
    assert mon.max_pause_s == pytest.approx(0.03)
    assert dict(mon.histograms[1].cumulative())["0.025"] == 0
    assert dict(mon.histograms[1].cumulative())["0.05"] == 1
