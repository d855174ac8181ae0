"""``strom share-groups`` (kafka-share-groups.sh) and ``strom configs --entity-type groups``
against a real broker, with confluent-kafka's ShareConsumer as the group's member."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from strom.testing.broker_process import BrokerProcess

ck = pytest.importorskip("confluent_kafka")
if not hasattr(ck, "ShareConsumer"):
    pytest.skip("this confluent-kafka has no ShareConsumer", allow_module_level=True)

pytestmark = pytest.mark.integration


def strom(b: BrokerProcess, *argv: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "strom", argv[0], "--bootstrap-server", b.bootstrap, *argv[1:]]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def ok(b: BrokerProcess, *argv: str) -> str:
    r = strom(b, *argv)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def table(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line.strip()]


def test_share_groups_cli(broker: BrokerProcess) -> None:
    b = broker
    ok(b, "topics", "--create", "--topic", "sq", "--partitions", "2")
    ok(
        b,
        "configs",
        "--entity-type",
        "groups",
        "--entity-name",
        "sg",
        "--alter",
        "--add-config",
        "share.auto.offset.reset=earliest,share.delivery.count.limit=4",
    )
    out = ok(b, "configs", "--entity-type", "groups", "--entity-name", "sg", "--describe")
    assert (
        "share.delivery.count.limit=4 sensitive=false synonyms={GROUP_CONFIG:share.delivery.count.limit=4"
        in out
    )
    bad = strom(
        b,
        "configs",
        "--entity-type",
        "groups",
        "--entity-name",
        "sg",
        "--alter",
        "--add-config",
        "share.delivery.count.limit=11",
    )
    assert bad.returncode != 0 and "share.delivery.count.limit must be less than or equal to" in bad.stderr
    p = ck.Producer({"bootstrap.servers": b.bootstrap})
    for i in range(10):
        p.produce("sq", value=f"v{i}".encode(), key=str(i).encode())
    p.flush(30)
    c = ck.ShareConsumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": "sg",
            "client.id": "cli-member",
            "share.acknowledgement.mode": "explicit",
        }
    )
    c.subscribe(["sq"])
    got = 0
    end = time.monotonic() + 30
    while got < 10 and time.monotonic() < end:
        for m in c.poll(1.0):
            if m.error() is None:
                c.acknowledge(m)
                got += 1
        c.commit_sync()
    assert got == 10
    try:
        assert ok(b, "share-groups", "list").split() == ["sg"]
        assert table(ok(b, "share-groups", "list", "--state")) == [["GROUP", "STATE"], ["sg", "Stable"]]
        rows = table(ok(b, "share-groups", "describe", "--group", "sg"))
        assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
        assert [r[:3] for r in rows[1:]] == [["sg", "sq", "0"], ["sg", "sq", "1"]]
        assert all(r[4] == "0" for r in rows[1:])
        assert sum(int(r[3]) for r in rows[1:]) == 10
        members = table(ok(b, "share-groups", "describe", "--group", "sg", "--members"))
        assert members[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
        assert members[1][3:] == ["cli-member", "2", "sq:0,1"]
        busy = strom(b, "share-groups", "reset-offsets", "--group", "sg", "--all-topics", "--to-earliest")
        assert busy.returncode != 0 and "is not empty" in busy.stderr
    finally:
        c.close()
    state = table(ok(b, "share-groups", "describe", "--group", "sg", "--state"))
    assert state[1][0] == "sg" and state[1][-2:] == ["Empty", "0"]
    dry = table(ok(b, "share-groups", "reset-offsets", "--group", "sg", "--topic", "sq", "--to-earliest"))
    assert dry[1:] == [["sg", "sq", "0", "0"], ["sg", "sq", "1", "0"]]
    assert sum(int(r[3]) for r in table(ok(b, "share-groups", "describe", "--group", "sg"))[1:]) == 10
    ok(b, "share-groups", "reset-offsets", "--group", "sg", "--topic", "sq", "--to-earliest", "--execute")
    rows = table(ok(b, "share-groups", "describe", "--group", "sg"))
    assert [(r[3], r[4]) for r in rows[1:]] == [("0", r[4]) for r in rows[1:]]
    assert sum(int(r[4]) for r in rows[1:]) == 10  # everything is to be delivered again
    assert table(ok(b, "share-groups", "delete-offsets", "--group", "sg", "--topic", "sq")) == [
        ["TOPIC", "STATUS"],
        ["sq", "Successful"],
    ]
    assert "has no offset information" in ok(b, "share-groups", "describe", "--group", "sg")
    assert "was successful" in ok(b, "share-groups", "delete", "--group", "sg")
    assert ok(b, "share-groups", "list").split() == []
    gone = strom(b, "share-groups", "describe", "--group", "sg")
    assert gone.returncode == 1 and "Share group 'sg' does not exist." in gone.stdout
