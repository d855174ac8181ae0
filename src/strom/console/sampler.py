"""The console's metrics page: brokers' ``/metrics`` sampled every few seconds, kept in memory
(the last ``keep`` samples per broker), drawn as server-rendered SVG lines (no chart library).

Series: produce and consume throughput (bytes/s, from ``strom_topic_bytes_in_total`` and
``strom_topic_bytes_out_total`` summed over topics), records in/s, request rate, and consumer-group
lag (``strom_consumer_group_lag_sum`` per group, summed over brokers)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import urllib.request
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["MetricsSampler", "Sample", "sparkline"]

log = logging.getLogger("strom.console.metrics")

RATE_COUNTERS = {
    "bytes in/s": "strom_topic_bytes_in_total",
    "bytes out/s": "strom_topic_bytes_out_total",
    "records in/s": "strom_topic_records_in_total",
    "requests/s": "strom_requests_total",
}


@dataclass
class Sample:
    at: float
    totals: dict[str, float]  # counter name -> sum over its series
    lag: dict[str, float]  # group -> lag sum


@dataclass
class BrokerSeries:
    url: str
    samples: deque[Sample] = field(default_factory=lambda: deque(maxlen=120))
    error: str | None = None

    def rates(self, name: str) -> list[float]:
        s = list(self.samples)
        out = []
        for a, b in itertools.pairwise(s):
            dt = b.at - a.at
            if dt > 0:
                out.append(max(0.0, (b.totals.get(name, 0.0) - a.totals.get(name, 0.0)) / dt))
        return out


def parse(text: str) -> tuple[dict[str, float], dict[str, float]]:
    totals: dict[str, float] = {}
    lag: dict[str, float] = {}
    wanted = set(RATE_COUNTERS.values())
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in wanted:
                totals[s.name] = totals.get(s.name, 0.0) + float(s.value)
            elif s.name == "strom_consumer_group_lag_sum":
                lag[s.labels["group"]] = float(s.value)
    return totals, lag


class MetricsSampler:
    """Samples ``urls``, and those ``discover`` returns each round (the brokers of the cluster's
    metadata at a conventional port): a URL seen once keeps its series."""

    def __init__(self, urls: list[str], interval_s: float = 10.0, keep: int = 120,
                 discover: Callable[[], Awaitable[list[str]]] | None = None,
                 fetch: Callable[[str], Awaitable[str]] | None = None) -> None:
        self.keep = keep
        self.fetch = fetch  # how a URL is read (default: urllib in a thread)
        self.series = [BrokerSeries(u, deque(maxlen=keep)) for u in urls]
        self.interval = interval_s
        self.discover = discover
        self.discover_error: str | None = None
        self.task: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.series) or self.discover is not None

    def start(self) -> None:
        if self.enabled and self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._run())

    async def _discover(self) -> None:
        if self.discover is None:
            return
        try:
            urls = await self.discover()
        except Exception as e:  # the cluster unreachable: the known series go on
            self.discover_error = str(e) or type(e).__name__
            return
        self.discover_error = None
        known = {s.url for s in self.series}
        self.series += [BrokerSeries(u, deque(maxlen=self.keep)) for u in urls if u not in known]

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def _run(self) -> None:
        while True:
            await self._discover()
            await asyncio.gather(*(self._sample(s) for s in self.series))
            # nothing to sample yet (the cluster not reachable yet): ask again soon
            await asyncio.sleep(self.interval if self.series else min(self.interval, 1.0))

    async def _sample(self, series: BrokerSeries) -> None:
        try:
            text = await (self.fetch(series.url) if self.fetch else asyncio.to_thread(_get, series.url))
            totals, lag = parse(text)
        except Exception as e:  # an unreachable broker: shown on the page, sampling goes on
            series.error = str(e)
            return
        series.error = None
        series.samples.append(Sample(time.monotonic(), totals, lag))

    def lag_by_group(self) -> dict[str, list[float]]:
        """Per group, the lag summed over brokers, one point per sample round (the shortest
        history among the brokers)."""
        n = min((len(s.samples) for s in self.series), default=0)
        out: dict[str, list[float]] = {}
        for i in range(n):
            groups = {g for s in self.series for g in s.samples[len(s.samples) - n + i].lag}
            for g in groups:
                out.setdefault(g, []).append(
                    sum(s.samples[len(s.samples) - n + i].lag.get(g, 0.0) for s in self.series))
        return out


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        body: bytes = r.read()
    return body.decode()


def sparkline(values: list[float], width: int = 320, height: int = 60) -> str:
    """An SVG polyline of ``values`` (newest on the right), scaled to the largest."""
    if len(values) < 2:
        return (f'<svg width="{width}" height="{height}" class="spark"><text x="4" y="{height // 2}" '
                f'font-size="11" fill="#6b7487">collecting…</text></svg>')
    top = max(values) or 1.0
    step = width / (len(values) - 1)
    points = " ".join(
        f"{i * step:.1f},{height - 2 - (v / top) * (height - 4):.1f}" for i, v in enumerate(values)
    )
    return (f'<svg width="{width}" height="{height}" class="spark" viewBox="0 0 {width} {height}">'
            f'<polyline fill="none" stroke="#2f6fdf" stroke-width="1.5" points="{points}"/></svg>')
