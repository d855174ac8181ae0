"""The metric collectors against a whole in-process broker (manual clock, in-memory network:
requests go through the real KafkaProtocol and handlers), the histogram, the listener's config."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from strom.client import groups
from strom.clock import ManualClock
from strom.config_schema import ConfigError
from strom.observability.collector import Family, StromCollector, render
from strom.observability.http import parse_http_listener
from strom.observability.metrics import Histogram
from strom.server.broker import Broker
from strom.testing.inprocess import broker_config
from strom.testing.network import MemoryNetwork
from strom.testing.scheduler import ManualScheduler


def _broker(data: Path, clock: ManualClock, sched: ManualScheduler, per_partition: bool) -> Broker:
    config = broker_config(data, {
        "controller.quorum.append.linger.ms": "0",
        "strom.metrics.partition.enable": str(per_partition).lower(),
    })
    return Broker(config, clock=clock, scheduler=sched, threaded_flush=False)


@pytest.mark.parametrize("per_partition", [True, False])
def test_collector_on_a_memory_broker(tmp_path: Path, per_partition: bool) -> None:
    async def go() -> None:
        clock = ManualClock()
        sched = ManualScheduler(clock)
        broker = _broker(tmp_path / "data", clock, sched, per_partition)
        assert broker.not_ready_reasons()  # not started
        await broker.start(listen=False)
        assert broker.not_ready_reasons() == []
        collector = StromCollector(broker)

        def value(name: str, **labels: str) -> float | None:
            """The sample's value in the rendered text, as Prometheus' own parser reads it."""
            for fam in text_string_to_metric_families(render(collector.collect())):
                for s in fam.samples:
                    if s.name == name and s.labels == labels:
                        return float(s.value)
            return None

        net = MemoryNetwork(broker)
        client = net.client()
        try:
            assert await client.create_topics({"t": (2, 1)}) == {"t": None}
            records = [(None, b"x" * 10, [], -1)] * 7
            await client.produce("t", 0, records)
            await client.produce("t", 1, records[:3])
            assert value("strom_topic_records_in_total", topic="t") == 10
            bytes_in = value("strom_topic_bytes_in_total", topic="t")
            assert bytes_in is not None and bytes_in > 100
            assert value("strom_topic_log_size_bytes", topic="t") == bytes_in
            await client.fetch("t", 0, 0, max_wait_ms=0)
            out = value("strom_topic_bytes_out_total", topic="t")
            assert out is not None and out > 70
            assert value("strom_request_duration_seconds_count", request="FetchConsumer") == 1
            assert value("strom_request_duration_seconds_count", request="Produce") == 2

            # a long poll parked in the fetch purgatory
            waiting = asyncio.ensure_future(client.fetch("t", 1, 3, max_wait_ms=500))
            for _ in range(200):
                await asyncio.sleep(0)
                if broker.replica_manager.purgatory.size():
                    break
            assert value("strom_purgatory_size", operation="Fetch") == 1
            sched.advance(500)
            await asyncio.wait_for(waiting, 5)
            assert value("strom_purgatory_size", operation="Fetch") == 0

            # lag: committed 2 of 7 on partition 0, 3 of 3 on partition 1
            assert await groups.commit_offsets(client, "g", {("t", 0): 2, ("t", 1): 3}) == {
                ("t", 0): None, ("t", 1): None}
            assert value("strom_consumer_group_lag_sum", group="g") == 5
            lag0 = value("strom_consumer_group_lag", group="g", topic="t", partition="0")
            lag1 = value("strom_consumer_group_lag", group="g", topic="t", partition="1")
            if per_partition:
                assert (lag0, lag1) == (5, 0)
                assert value("strom_log_end_offset", topic="t", partition="0") == 7
                assert value("strom_log_high_watermark", topic="t", partition="1") == 3
            else:  # behind the flag: no per-partition series
                assert lag0 is None and lag1 is None
                assert value("strom_log_end_offset", topic="t", partition="0") is None
            assert value("strom_groups", type="classic", state="Empty") == 1
            assert value("strom_partitions") == value("strom_leader_partitions") == 2 + 3
            assert value("strom_under_replicated_partitions") == 0
            assert value("strom_offline_partitions") == 0
            assert value("strom_active_controller") == 1
            if per_partition:  # every strom_ name the Grafana dashboard queries is exposed
                rendered = render(collector.collect())
                names = {s.name for f in text_string_to_metric_families(rendered) for s in f.samples}
                for f in text_string_to_metric_families(rendered):  # families without samples yet
                    names.add(f.name + ("_total" if f.type == "counter" else ""))
                dashboard = (Path(__file__).parents[2] / "deploy/grafana/strom-dashboard.json").read_text()
                wanted = set(re.findall(r"\bstrom_[a-z_]+", dashboard))
                assert len(wanted) > 15
                assert wanted <= names, wanted - names
            errors_before = value("strom_request_errors_total", api="CreateTopics",
                                  error="TOPIC_ALREADY_EXISTS")
            assert errors_before is None  # per-topic errors are not the answer's top-level error
        finally:
            await client.close()
            net.close()
            await broker.stop()
        assert "shutting down" in broker.not_ready_reasons()

    asyncio.run(go())


def test_histogram_buckets_are_cumulative() -> None:
    h = Histogram((0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 2.0):
        h.observe(v)
    assert h.cumulative() == [("0.1", 2), ("1.0", 3), ("+Inf", 4)]
    assert h.count == 4 and h.sum == pytest.approx(2.65)


def test_http_listener_value() -> None:
    assert parse_http_listener("") is None
    assert parse_http_listener("  ") is None
    assert parse_http_listener("http://127.0.0.1:9644") == ("http", "127.0.0.1", 9644)
    assert parse_http_listener("http://:9644") == ("http", "0.0.0.0", 9644)
    assert parse_http_listener("https://0.0.0.0:9645") == ("https", "0.0.0.0", 9645)
    for bad in ("ftp://h:1", "http://h", "h:1", "http://h:99999", "http://h:1/x"):
        with pytest.raises(ConfigError, match=r"strom\.http\.listener"):
            parse_http_listener(bad)


def test_render_escapes_label_values_and_parses_back() -> None:
    fam = Family("x_total", "counter", "help", ("topic",))
    fam.add(('we"ird\\to\npic',), 3)
    h = Histogram((1.0,))
    h.observe(0.5)
    hist = Family("d_seconds", "histogram", "durations", ("request",))
    hist.add(("Produce",), h)
    text = render([fam, hist])
    parsed = {f.name: f for f in text_string_to_metric_families(text)}
    (sample,) = parsed["x"].samples
    assert sample.labels == {"topic": 'we"ird\\to\npic'} and sample.value == 3
    assert parsed["x"].type == "counter"
    by_name = {(s.name, s.labels.get("le")): s.value for s in parsed["d_seconds"].samples}
    assert by_name[("d_seconds_bucket", "1.0")] == 1
    assert by_name[("d_seconds_bucket", "+Inf")] == 1
    assert by_name[("d_seconds_count", None)] == 1
    assert by_name[("d_seconds_sum", None)] == 0.5


def test_retention_activity_is_counted(tmp_path: Path) -> None:
    from strom.server.log_tasks import run_retention

    async def go() -> None:
        clock = ManualClock()
        sched = ManualScheduler(clock)
        broker = _broker(tmp_path / "data", clock, sched, False)
        await broker.start(listen=False)
        net = MemoryNetwork(broker)
        client = net.client()
        try:
            configs = {"segment.bytes": "200", "retention.bytes": "250", "file.delete.delay.ms": "0"}
            assert await client.create_topics({"r": (1, 1, configs)}) == {"r": None}
            for _ in range(6):
                await client.produce("r", 0, [(None, b"x" * 100, [], -1)])
            segments = broker.logs[("r", 0)].segment_count
            assert segments >= 4
            removed = run_retention(broker)
            assert removed >= 2
            text = render(StromCollector(broker).collect())
            samples = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
                       if not s.labels}
            assert samples["strom_log_retention_segments_deleted_total"] == removed
            assert samples["strom_log_cleaner_runs_total"] == 0
        finally:
            await client.close()
            net.close()
            await broker.stop()

    asyncio.run(go())
