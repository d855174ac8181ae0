"""The blocking fetch path of the Spark source (kafka_io.FetchChannel, Fetch v11 parsed by hand)
against the asyncio client's Fetch (kio-decoded), on a real broker; no Spark needed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from strom.protocol import records as rec
from strom.spark.kafka_io import KafkaSession
from strom.spark.options import ClientSettings
from strom.testing.broker_process import BrokerProcess

from .conftest import create_topic, produce


def _both(sess: KafkaSession, topic: str, partition: int, offset: int) -> tuple[object, object]:
    view = sess.fetch_view(topic, partition, offset, max_wait_ms=50)
    viewed = dataclasses.replace(view, records=bytes(view.records))
    via_client = sess.run(sess._fetch(topic, partition, offset, 50))
    return viewed, via_client


def test_fetch_channel_matches_client_fetch(kbroker: BrokerProcess) -> None:
    create_topic(kbroker.bootstrap, "kio-plain", 2)
    produce(kbroker.bootstrap, "kio-plain", 1, [(b"k%d" % i, b"v" * i, [], 1000 + i) for i in range(300)])
    sess = KafkaSession(ClientSettings(kbroker.bootstrap))
    try:
        for offset in (0, 17, 299, 300):
            viewed, via_client = _both(sess, "kio-plain", 1, offset)
            assert viewed == via_client
        empty, _ = _both(sess, "kio-plain", 0, 0)
        assert empty.records == b"" and empty.high_watermark == 0  # type: ignore[attr-defined]
        out_of_range, via_client = _both(sess, "kio-plain", 1, 10_000)
        assert out_of_range == via_client and out_of_range.error_code == 1  # type: ignore[attr-defined]
    finally:
        sess.close()


def test_fetch_channel_read_committed_aborted_list(kbroker: BrokerProcess) -> None:
    ck = pytest.importorskip("confluent_kafka")
    create_topic(kbroker.bootstrap, "kio-txn", 1)
    p = ck.Producer({"bootstrap.servers": kbroker.bootstrap, "transactional.id": "kio-txn-1"})
    p.init_transactions(30)
    for commit in (False, True, False):
        p.begin_transaction()
        for i in range(5):
            p.produce("kio-txn", value=b"c" if commit else b"a", key=b"%d" % i, partition=0)
        p.flush(30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    sess = KafkaSession(ClientSettings(kbroker.bootstrap, isolation_level=1))
    try:
        viewed, via_client = _both(sess, "kio-txn", 0, 0)
        assert viewed == via_client
        assert len(viewed.aborted) == 2  # type: ignore[attr-defined]
        assert viewed.last_stable_offset == viewed.high_watermark  # type: ignore[attr-defined]
        assert sum(1 for _ in rec.iter_batches(viewed.records)) >= 6  # type: ignore[attr-defined]
    finally:
        sess.close()


def test_fetch_channel_survives_broker_restart(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data").start()
    try:
        create_topic(b.bootstrap, "kio-restart", 1)
        produce(b.bootstrap, "kio-restart", 0, [(None, b"x", [], 1)] * 10)
        sess = KafkaSession(ClientSettings(b.bootstrap, request_timeout_ms=5000))
        try:
            first = bytes(sess.fetch_view("kio-restart", 0, 0, max_wait_ms=10).records)
            b.stop()
            b.start()
            again = sess.fetch_view("kio-restart", 0, 0, max_wait_ms=10)
            assert bytes(again.records) == first and again.high_watermark == 10
        finally:
            sess.close()
    finally:
        b.stop()
