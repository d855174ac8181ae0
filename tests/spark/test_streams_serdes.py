"""strom.streams with Schema Registry serdes and a dead-letter topic, on a real broker, a real
strom schema registry and local Spark: Avro values in, an Avro aggregate out, undecodable records
to the dead-letter topic with Kafka Streams' error headers, all in the batches' transactions (read
back read_committed), and equal to a plain-Python reference."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from strom.testing.broker_process import BrokerProcess

from .conftest import create_topic, produce

pytestmark = [pytest.mark.spark, pytest.mark.integration]

BASE = 1_700_000_000_000
TRADE = json.dumps({"type": "record", "name": "Trade", "namespace": "strom.test",
                    "fields": [{"name": "sym", "type": "string"}, {"name": "qty", "type": "int"}]})
TOTAL = json.dumps({"type": "record", "name": "Total", "namespace": "strom.test",
                    "fields": [{"name": "n", "type": "int"}, {"name": "qty", "type": "long"}]})


def read_all(bootstrap: str, topic: str) -> list[Any]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"chk-{time.monotonic_ns()}",
                  "isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(str(m.error()))
            out.append(m)
        raise AssertionError(f"no end of {topic}")
    finally:
        c.close()


def test_avro_in_avro_out_and_dead_letters(spark: Any, kbroker: BrokerProcess, registry: str,
                                           tmp_path: Path) -> None:
    from strom import streams as S
    from strom.streams import serdes

    boot = kbroker.bootstrap
    for t in ("sd-trades", "sd-totals", "sd-dlq"):
        create_topic(boot, t, 1)
    writer = S.avro(registry, TRADE)
    trades = [("AAPL", 3), ("MSFT", 1), ("AAPL", 4), ("GOOG", 2), ("AAPL", 1), ("MSFT", 5)]
    recs: list[Any] = []
    bad_at = {2, 5}  # offsets of records that are not Avro of the registry
    i = 0
    for sym, qty in trades:
        while i in bad_at:
            recs.append((sym.encode(), b"not avro at all", [], BASE + i))
            i += 1
        value = serdes.encode(writer, {"sym": sym, "qty": qty}, "sd-trades")
        recs.append((sym.encode(), value, [], BASE + i))
        i += 1
    produce(boot, "sd-trades", 0, recs)

    q = (
        S.stream(spark, "sd-trades", bootstrap=boot, value_serde=S.avro(registry), on_error="dlq",
                 dlq_topic="sd-dlq")
        .group_by_key()
        .aggregate(lambda: {"n": 0, "qty": 0}, lambda a, v: {"n": a["n"] + 1, "qty": a["qty"] + v["qty"]},
                   value_serde=S.avro(registry, TOTAL))
        .to("sd-totals", str(tmp_path / "ck"), trigger={"availableNow": True})
    )
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()

    reader = S.avro(registry)
    latest = {m.key().decode(): serdes.decode(reader, m.value(), "out") for m in read_all(boot, "sd-totals")}
    ref: dict[str, dict[str, int]] = {}
    for sym, qty in trades:
        a = ref.get(sym, {"n": 0, "qty": 0})
        ref[sym] = {"n": a["n"] + 1, "qty": a["qty"] + qty}
    assert latest == ref
    assert ref == {"AAPL": {"n": 3, "qty": 8}, "MSFT": {"n": 2, "qty": 6}, "GOOG": {"n": 1, "qty": 2}}

    dead = read_all(boot, "sd-dlq")
    assert [m.value() for m in dead] == [b"not avro at all"] * 2
    for m, off in zip(dead, sorted(bad_at), strict=True):
        h = {k: v.decode() for k, v in m.headers()}
        assert h["__streams.errors.topic"] == "sd-trades"
        assert h["__streams.errors.partition"] == "0" and h["__streams.errors.offset"] == str(off)
        assert h["__streams.errors.exception"] == "DecodeError"
        assert f"sd-trades-0 offset {off} is not avro" in h["__streams.errors.message"]
