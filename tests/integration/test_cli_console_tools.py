"""``strom produce`` creating a missing topic when the broker allows it (as Kafka's console
producer does), ``strom consume --isolation-level``, and the broker's warning for a supplied
config that is no known config -- against real broker processes."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration


def strom(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strom", *args], input=stdin, capture_output=True, text=True, timeout=60
    )


@pytest.fixture(scope="module")
def strict_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Topics are not auto-created; two supplied names are no config, one is a per-listener one."""
    b = BrokerProcess(
        tmp_path_factory.mktemp("strict") / "data",
        overrides=[
            "auto.create.topics.enable=false",
            "foo.bar=1",
            "log.retention.hourz=5",
            "listener.name.plaintext.ssl.keystore.type=PEM",
        ],
    )
    b.start()
    try:
        yield b
    finally:
        b.stop()


def test_produce_auto_creates_topic_when_allowed(shared_broker: BrokerProcess) -> None:
    bs = shared_broker.bootstrap
    topic = f"auto-{uuid.uuid4().hex[:8]}"
    r = strom("produce", "--bootstrap-server", bs, "--topic", topic, stdin="one\ntwo\n")
    assert r.returncode == 0, r.stderr
    r = strom(
        *("consume", "--bootstrap-server", bs, "--topic", topic, "--from-beginning"),
        *("--max-messages", "2", "--timeout-ms", "10000"),
    )
    assert r.returncode == 0 and sorted(r.stdout.split()) == ["one", "two"], r
    assert topic in strom("topics", "--bootstrap-server", bs, "list").stdout


def test_produce_refused_when_broker_does_not_create(strict_broker: BrokerProcess) -> None:
    r = strom("produce", "--bootstrap-server", strict_broker.bootstrap, "--topic", "nowhere", stdin="x\n")
    assert r.returncode == 1
    assert r.stderr.strip() == (
        "strom produce: error: topic 'nowhere' does not exist (the broker does not create topics)"
    )
    assert "nowhere" not in strom("topics", "--bootstrap-server", strict_broker.bootstrap, "list").stdout


def test_unknown_broker_config_warned_once(strict_broker: BrokerProcess) -> None:
    log = Path(strict_broker.log_path).read_text(errors="replace")
    for name in ("foo.bar", "log.retention.hourz"):
        line = f"The configuration '{name}' was supplied but isn't a known config."
        assert log.count(line) == 1, log[:3000]
        assert f"WARNING strom.config: {line}" in log
    assert "'listener.name.plaintext.ssl.keystore.type' was supplied" not in log
    assert "'auto.create.topics.enable' was supplied" not in log


def test_consume_isolation_level(shared_broker: BrokerProcess) -> None:
    ck = pytest.importorskip("confluent_kafka")
    bs = shared_broker.bootstrap
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    assert strom("topics", "--bootstrap-server", bs, "create", "--topic", topic).returncode == 0
    p = ck.Producer({"bootstrap.servers": bs, "transactional.id": f"t-{topic}"})
    p.init_transactions(30)
    for values, commit in ((["c1", "c2"], True), (["a1", "a2"], False), (["c3"], True)):
        p.begin_transaction()
        for v in values:
            p.produce(topic, value=v.encode(), partition=0)
        p.flush(30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)

    def consume(*extra: str) -> list[str]:
        r = strom(
            *("consume", "--bootstrap-server", bs, "--topic", topic, "--from-beginning"),
            *("--timeout-ms", "3000", *extra),
        )
        assert r.returncode == 0, r.stderr
        return r.stdout.split()

    assert consume() == ["c1", "c2", "a1", "a2", "c3"]
    assert consume("--isolation-level", "read_uncommitted") == ["c1", "c2", "a1", "a2", "c3"]
    assert consume("--isolation-level", "read_committed") == ["c1", "c2", "c3"]
    bad = strom("consume", "--bootstrap-server", bs, "--topic", topic, "--isolation-level", "dirty")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
