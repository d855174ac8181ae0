"""A data dir written by strom before the metadata quorum starts on it: topics (with their ids),
records, topic configs and committed group offsets are all there, served by the quorum path
(``strom.metadata.quorum.enable=true``); the old registry is kept as ``*.migrated``."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from test_clients import TS0, Rec, confluent_produce, confluent_read, create_topic

from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

QUORUM_OFF = ["strom.metadata.quorum.enable=false", "group.initial.rebalance.delay.ms=0"]
QUORUM_ON = ["strom.metadata.quorum.enable=true", "group.initial.rebalance.delay.ms=0"]


def _describe(bootstrap: str, topic: str) -> tuple[str, int, str | None]:
    from confluent_kafka.admin import AdminClient, ConfigResource
    from kafka import KafkaAdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([res])[res].result(timeout=20)
    kadmin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:  # kafka-python's Metadata v>=10 answer carries the topic id
        (desc,) = kadmin.describe_topics([topic])
    finally:
        kadmin.close()
    return str(desc.get("topic_id")), len(desc["partitions"]), configs["retention.ms"].value


def _committed(bootstrap: str, group: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return int(c.committed([TopicPartition(topic, 0)], timeout=20)[0].offset)
    finally:
        c.close()


def _commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        c.close()


def test_old_data_dir_starts_on_the_quorum_with_nothing_lost(tmp_path: Path) -> None:
    data = tmp_path / "data"
    recs = [Rec(i % 2, TS0 + i, b"k", b"v%d" % i, ()) for i in range(20)]
    old = BrokerProcess(data, overrides=QUORUM_OFF).start()
    try:
        create_topic(old.bootstrap, "kept", 2, {"retention.ms": "4321000"})
        confluent_produce(old.bootstrap, "kept", recs)
        _commit(old.bootstrap, "g1", "kept", 7)
        before = _describe(old.bootstrap, "kept")
        assert len(before[0]) == 36 and before[0] != str(uuid.UUID(int=0)), before
    finally:
        assert old.stop() == 0
    assert (data / "strom-topics.json").exists()
    assert not (data / "__cluster_metadata-0").exists()

    new = BrokerProcess(data, port=old.port, overrides=QUORUM_ON).start()
    try:
        assert _describe(new.bootstrap, "kept") == before
        got = confluent_read(new.bootstrap, "kept", 2, len(recs))
        assert sorted(g.value for g in got) == sorted(r.value for r in recs)
        assert _committed(new.bootstrap, "g1", "kept") == 7
        create_topic(new.bootstrap, "fresh", 1)  # the controller serves new topics
    finally:
        assert new.stop() == 0
    assert (data / "strom-topics.json.migrated").exists()
    assert not (data / "strom-topics.json").exists()
    assert (data / "__cluster_metadata-0").is_dir()

    again = BrokerProcess(data, port=old.port, overrides=QUORUM_ON).start()  # from the log alone
    try:
        assert _describe(again.bootstrap, "kept") == before
        assert _describe(again.bootstrap, "fresh")[1] == 1
    finally:
        assert again.stop() == 0

    # back on the registry path: refused (it cannot read the metadata log), nothing written
    listing = sorted(p.name for p in data.iterdir())
    back = subprocess.run(
        [sys.executable, "-m", "strom", "serve", "--override", f"listeners=PLAINTEXT://127.0.0.1:{old.port}",
         "--override", f"log.dirs={data}", "--override", "strom.metadata.quorum.enable=false"],
        capture_output=True, text=True, timeout=60,
    )
    assert back.returncode == 1, back.stderr
    assert "strom.metadata.quorum.enable" in back.stderr and "__cluster_metadata-0" in back.stderr
    assert sorted(p.name for p in data.iterdir()) == listing
    assert not (data / "strom-topics.json").exists()


def _init_producer_ids(bootstrap: str, transactional_ids: list[str | None]) -> list[int]:
    """InitProducerId for each (None: an idempotent producer), retried while the node has no
    producer-id block yet (COORDINATOR_LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE)."""
    import asyncio
    import time

    from strom.client.connection import KafkaConnection

    async def main() -> list[int]:
        host, port = bootstrap.rsplit(":", 1)
        conn = await KafkaConnection.open(host, int(port))
        out: list[int] = []
        try:
            for tid in transactional_ids:
                deadline = time.monotonic() + 30
                while True:
                    resp = await conn.request(
                        22,
                        {"transactional_id": tid, "transaction_timeout": 60_000, "producer_id": -1,
                         "producer_epoch": -1},
                    )
                    if int(resp.error_code) == 0:
                        out.append(int(resp.producer_id))
                        break
                    assert int(resp.error_code) in (14, 15) and time.monotonic() < deadline, resp
                    await asyncio.sleep(0.2)
        finally:
            await conn.close()
        return out

    return asyncio.run(main())


def test_producer_ids_stay_unique_across_the_migration_and_restarts(tmp_path: Path) -> None:
    """Ids handed out on the registry path (``strom-producer-ids.json``) are never handed out
    again once the node's producer-id blocks come from the controller, nor after a restart."""
    data = tmp_path / "data"
    old = BrokerProcess(data, overrides=QUORUM_OFF).start()
    try:
        before = _init_producer_ids(old.bootstrap, [None, None, "tx-a", None])
    finally:
        assert old.stop() == 0
    assert (data / "strom-producer-ids.json").exists()

    seen = list(before)
    for round_ in range(2):  # the migrating start, then a start from the metadata log alone
        node = BrokerProcess(data, port=old.port, overrides=QUORUM_ON).start()
        try:
            got = _init_producer_ids(node.bootstrap, [None, f"tx-b{round_}", None, f"tx-c{round_}"])
        finally:
            assert node.stop() == 0
        assert min(got) > max(seen), (seen, got)
        assert len(set(got)) == len(got)
        seen += got
    assert (data / "__cluster_metadata-0").is_dir()
