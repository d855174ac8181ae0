"""Metadata answers that a broker keeps encoded per topic (strom.server.handlers.metadata) stay
right as topics change: a real ``strom serve`` on both metadata paths (the single-node registry
and the KRaft quorum), unchanged clients that ask with different Metadata versions
(librdkafka's confluent-kafka, kafka-python), and every change that must reach them:
partitions added, a topic deleted, a topic deleted and created again under its name with
another id and partition count."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

TOPICS = 5
PARTITIONS = 100  # 500 partitions in all


@pytest.fixture(scope="module", params=["registry", "quorum"])
def broker(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    quorum = "true" if request.param == "quorum" else "false"
    b = BrokerProcess(tmp_path_factory.mktemp(f"md-{request.param}") / "data",
                      overrides=[f"strom.metadata.quorum.enable={quorum}"])
    b.start()
    try:
        yield b
    finally:
        b.stop()


def _rdkafka_view(admin: AdminClient) -> dict[str, dict[int, tuple[int, list[int], list[int]]]]:
    md = admin.list_topics(timeout=30)
    return {
        name: {p.id: (p.leader, list(p.replicas), list(p.isrs)) for p in t.partitions.values()}
        for name, t in md.topics.items() if not name.startswith("__") and t.error is None
    }


def _kafka_python_view(bootstrap: str) -> dict[str, int]:
    from kafka import KafkaConsumer

    c = KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        return {t: len(c.partitions_for_topic(t) or ()) for t in c.topics() if not t.startswith("__")}
    finally:
        c.close()


def _wait(check: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_answers_follow_topic_changes(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    names = [f"many-{i}" for i in range(TOPICS)]
    for f in admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in names]).values():
        f.result(120)
    view = _rdkafka_view(admin)
    assert sorted(view) == names
    for n in names:  # every partition, led by the only broker, which is its replica and ISR
        assert view[n] == {p: (1, [1], [1]) for p in range(PARTITIONS)}
    assert _rdkafka_view(admin) == view  # asked again: the kept answer, the same
    assert _kafka_python_view(broker.bootstrap) == dict.fromkeys(names, PARTITIONS)

    # partitions added to one topic: that topic's entry is encoded again, in every version
    admin.create_partitions([NewPartitions("many-1", PARTITIONS + 7)])["many-1"].result(60)
    _wait(lambda: len(_rdkafka_view(admin).get("many-1", {})) == PARTITIONS + 7, "the new partitions")
    assert _kafka_python_view(broker.bootstrap)["many-1"] == PARTITIONS + 7
    assert len(_rdkafka_view(admin)["many-2"]) == PARTITIONS

    # a topic deleted, another deleted and created again with another partition count
    for f in admin.delete_topics(["many-3", "many-4"]).values():
        f.result(60)
    _wait(lambda: not {"many-3", "many-4"} & set(_rdkafka_view(admin)), "the deletions")
    admin.create_topics([NewTopic("many-4", 3, 1)])["many-4"].result(60)
    _wait(lambda: len(_rdkafka_view(admin).get("many-4", {})) == 3, "the new many-4")
    view = _rdkafka_view(admin)
    assert sorted(view) == ["many-0", "many-1", "many-2", "many-4"]
    assert view["many-4"] == {p: (1, [1], [1]) for p in range(3)}
    assert _kafka_python_view(broker.bootstrap) == {
        "many-0": PARTITIONS, "many-1": PARTITIONS + 7, "many-2": PARTITIONS, "many-4": 3}
