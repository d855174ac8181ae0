"""KIP-858 on real processes: a broker with two log dirs loses one (its disk fills up) and keeps
running; the controller, told by the broker's heartbeat (``offline_log_dirs``), moves exactly the
replicas recorded in that dir (AssignReplicasToDirs) out of their ISRs and elects other leaders
for the partitions it led, at once rather than after ``replica.lag.time.max.ms`` (30 s here);
its partitions in the other dir stay in sync, and acks=all producers keep being acknowledged."""

from __future__ import annotations

import errno
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.testing.cluster_process import ClusterProcess

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.integration

OVERRIDES = (
    "broker.heartbeat.interval.ms=300",
    "broker.session.timeout.ms=2500",
    "replica.lag.time.max.ms=30000",  # a follower's ISR place must not go by the lag time here
    "controller.quorum.election.timeout.ms=500",
    "controller.quorum.fetch.timeout.ms=1000",
)
PARTITIONS = 6


def fill(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            try:
                if os.write(fd, b"\0" * 65536) == 0:
                    return
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                return
    finally:
        os.close(fd)


@pytest.fixture
def jbod_cluster(tmp_path: Path) -> Iterator[tuple[ClusterProcess, Path]]:
    c = ClusterProcess(tmp_path / "dc", 3, overrides=OVERRIDES)
    c.dev.plan()
    node3 = Path(c.spec(3).dir)
    second = node3 / "data2"
    second.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(second)],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {r.stderr.strip()}")
    cfg = c.spec(3).config_path
    first = f"log.dirs={node3 / 'data'}"
    cfg.write_text(cfg.read_text().replace(first, f"{first},{second}"))
    try:
        c.dev.format()
        c.start()
        c.wait_ready(90)
        yield c, second
    finally:
        c.close()
        subprocess.run(["umount", "-l", str(second)], check=False)
        print(f"node logs: {c.root}/node-<id>/server.log")


def test_a_full_second_log_dir_moves_only_its_replicas(jbod_cluster: tuple[ClusterProcess, Path]) -> None:
    c, second = jbod_cluster
    topic = f"jbod-{uuid.uuid4().hex[:8]}"
    res = c.create_topics(1, {topic: (PARTITIONS, 3)}, configs={"min.insync.replicas": "2"})
    assert res[topic][0] == 0, res
    c.wait_topic(topic, timeout=60)
    on_second = {int(d.name.rsplit("-", 1)[1]) for d in second.iterdir() if d.name.startswith(topic + "-")}
    on_first = set(range(PARTITIONS)) - on_second
    assert on_second and on_first, f"node 3 placed {sorted(on_second)} in {second}: need both dirs used"

    def parts() -> dict[int, tuple[int, tuple[int, ...]]]:
        md = c.metadata(1, [topic])
        return {p.partition: (p.leader, tuple(p.isr)) for p in md.topics[topic].partitions.values()}

    deadline = time.monotonic() + 30
    while any(len(isr) != 3 for _l, isr in parts().values()):
        assert time.monotonic() < deadline, parts()
        time.sleep(0.2)
    led_before = {p for p, (leader, _isr) in parts().items() if leader == 3}
    time.sleep(1.5)  # a few heartbeats: node 3's AssignReplicasToDirs reached the controller

    producer = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap, "acks": "all",
                                         "enable.idempotence": True, "linger.ms": 2, "log_level": 0})
    acked: list[int] = []
    failed: list[str] = []

    def cb(err: object, msg: object) -> None:
        if err is None:
            acked.append(msg.partition())  # type: ignore[attr-defined]
        else:
            failed.append(str(err))

    def produce(n: int) -> None:
        for i in range(n):
            producer.produce(topic, value=b"v%d:" % i + b"x" * 500, partition=i % PARTITIONS, on_delivery=cb)
        producer.flush(30)

    produce(60)
    assert len(acked) == 60 and not failed
    fill(second / "ballast")
    t0 = time.monotonic()
    produce(300)  # node 3's next appends in the full dir fail (past the pages it has): offline
    moved = None
    while time.monotonic() - t0 < 10:
        now = parts()
        if all(3 not in now[p][1] and now[p][0] != 3 for p in on_second):
            moved = time.monotonic() - t0
            break
        time.sleep(0.1)
    assert moved is not None, \
        f"node 3's replicas in the failed dir {sorted(on_second)} still in ISRs: {parts()}\n{c.log(3, 4000)}"
    print(f"node 3's replicas in the failed dir {sorted(on_second)} (it led "
          f"{sorted(led_before & on_second)}) out of their ISRs {moved:.1f}s after the disk filled")
    now = parts()
    assert all(3 in now[p][1] for p in on_first), f"partitions in the healthy dir lost node 3: {now}"
    assert c.is_running(3), "a failed second dir must not stop the broker"
    acked.clear()
    failed.clear()
    produce(120)  # every partition still takes acks=all writes (min.insync.replicas=2)
    assert len(acked) == 120 and not failed, failed[:5]
    log = c.log(3, 200_000)
    assert f"log dir {second} failed" in log and "Traceback" not in log, log[-3000:]
