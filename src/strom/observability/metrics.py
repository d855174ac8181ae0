"""The broker's own counters: plain Python numbers, bumped on the hot paths, read at scrape time.

Nothing here imports ``prometheus_client`` or the server: the request loop, the produce and fetch
handlers and the log's fsync add to these numbers (one dict update per request or per topic of a
request, never per record), and :mod:`strom.observability.collector` turns them into Prometheus
metric families when ``/metrics`` is scraped. No locks: the request paths run on the broker's
event loop; the fsync histogram is also fed from worker threads, where a lost increment under a
race is tolerated (a metric, not a ledger).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict

__all__ = ["DURATION_BUCKETS", "FSYNC_SECONDS", "BrokerMetrics", "Histogram"]

# seconds: 0.5 ms .. 30 s (Kafka's request times span sub-millisecond produces to long polls)
DURATION_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)


class Histogram:
    """A fixed-bucket histogram (Prometheus semantics: cumulative ``le`` buckets, sum, count)."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...] = DURATION_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound (+Inf)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, float]]:
        """``(le, count of observations <= le)`` for every bound and ``+Inf``."""
        out: list[tuple[str, float]] = []
        total = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            total += n
            out.append((repr(float(bound)), total))
        out.append(("+Inf", total + self.counts[-1]))
        return out


# log flushes (fsync of a segment's files): fed by strom.log.file_cache, read by the collector
FSYNC_SECONDS = Histogram()


class BrokerMetrics:
    """What one broker counts as it serves (the gauges are read from its state at scrape time)."""

    def __init__(self) -> None:
        self.requests: defaultdict[tuple[str, int], int] = defaultdict(int)  # (api, version)
        self.errors: defaultdict[tuple[str, str], int] = defaultdict(int)  # (api, error name)
        self.durations: dict[str, Histogram] = {}  # request name (FetchConsumer ...) -> seconds
        self.bytes_in: defaultdict[str, int] = defaultdict(int)  # topic -> bytes produced
        self.records_in: defaultdict[str, int] = defaultdict(int)  # topic -> records produced
        self.bytes_out: defaultdict[str, int] = defaultdict(int)  # topic -> bytes fetched by consumers
        self.replication_bytes_out: defaultdict[str, int] = defaultdict(int)  # topic -> to followers
        self.produce_requests_failed: defaultdict[str, int] = defaultdict(int)  # topic -> failed appends
        self.connections_created: defaultdict[str, int] = defaultdict(int)  # listener
        self.connections_closed: defaultdict[str, int] = defaultdict(int)  # listener
        self.auth_failures: defaultdict[str, int] = defaultdict(int)  # listener
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.retention_segments_deleted = 0  # (log_tasks: retention by time, size, log start)
        self.cleaner_runs = 0  # logs cleaned (compaction rounds that cleaned one)
        self.cleaner_bytes_read = 0
        self.cleaner_bytes_written = 0
        self.cleaner_seconds = 0.0

    def request_done(self, api: str, version: int, request: str, seconds: float, error: str | None) -> None:
        """One request answered: counted by API and version, timed by ``request`` (the API's
        name, Fetch split into FetchConsumer and FetchFollower as Kafka's RequestMetrics do)."""
        self.requests[(api, version)] += 1
        h = self.durations.get(request)
        if h is None:
            h = self.durations[request] = Histogram()
        h.observe(seconds)
        if error is not None:
            self.errors[(api, error)] += 1
