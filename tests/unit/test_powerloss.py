"""The power-cut model (strom.testing.powerloss) and the recovery bugs it found."""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path

from test_log_support import T0, batch, open_log

from strom.config import BrokerConfig
from strom.durable_file import fsync_dir, replace_file
from strom.server.broker import Broker
from strom.testing.powerloss import PowerLossFS


def test_only_fsynced_content_and_directory_entries_survive(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "old").mkdir(parents=True)
    (root / "old" / "kept").write_bytes(b"before")
    with PowerLossFS(root) as fs:
        (root / "old" / "kept").write_bytes(b"changed, never fsynced")
        (root / "old" / "new-unsynced-dir-entry").write_bytes(b"x")
        fd = os.open(root / "old" / "synced", os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"abc")
        os.fsync(fd)
        os.write(fd, b"def")  # after the fsync: lost
        os.close(fd)
        fsync_dir(root / "old")  # "synced" (and "new-unsynced-dir-entry", empty) now have names
        replace_file(root / "old" / "atomic", b"v1")  # fsyncs the file and the directory
        replace_file(root / "old" / "atomic", b"v2", sync_dir=False)  # rename not durable
        (root / "gone").mkdir()  # its entry in root is never fsynced
        tree = fs.cut()
    assert tree == {
        "old/": b"",
        "old/kept": b"before",
        "old/new-unsynced-dir-entry": b"",
        "old/synced": b"abc",
        "old/atomic": b"v1",
    }
    assert (root / "old" / "atomic").read_bytes() == b"v1"
    assert not (root / "gone").exists()


def test_torn_cut_mixes_durable_and_live_sectors(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    seen = set()
    for seed in range(30):
        f = root / "f"
        f.write_bytes(b"A" * 1024)
        with PowerLossFS(root, torn=True, rng=random.Random(seed)) as fs:
            with f.open("r+b") as fh:
                fh.write(b"B" * 2048)
            seen.add(fs.cut()["f"])
    assert b"A" * 1024 in seen and b"B" * 2048 in seen  # whole drop, fully written back
    assert any(len(s) not in (1024, 2048) or s not in (b"A" * 1024, b"B" * 2048) for s in seen)
    assert all(set(s) <= {ord("A"), ord("B"), 0} for s in seen)


def test_flush_messages_1_survives_a_cut_of_a_new_partition(tmp_path: Path) -> None:
    """Regression: the first segment of a new log and the partition directory were created
    without a directory fsync, so a power cut lost every fsynced record."""
    root = tmp_path / "data"
    root.mkdir()
    d = root / "t-0"
    with PowerLossFS(root) as fs:
        log = open_log(d, flush_messages=1)
        log.append_as_leader(batch(2), 0)
        log.close_without_flush()
        fs.cut()
        log = open_log(d, flush_messages=1)
        assert log.log_end_offset == 2
        log.close()


def test_recovered_inactive_segment_keeps_its_timestamps(tmp_path: Path) -> None:
    """Regression: LogSegment.recover did not end the time index with the segment's largest
    timestamp (Kafka's recover does); once such a recovered inactive segment was trusted, a
    lookup by time skipped it."""
    d = tmp_path / "t-0"
    log = open_log(d, index_interval_bytes=1 << 20)
    log.append_as_leader(batch(1, ts=T0), 0)
    log.roll()
    log.append_as_leader(batch(1, ts=T0 + 100), 0)
    log.close_without_flush()
    (d / "recovery-point-offset-checkpoint").unlink()  # e.g. its rename was not durable
    log = open_log(d, index_interval_bytes=1 << 20)  # recovers both segments
    log.close_without_flush()
    log = open_log(d, index_interval_bytes=1 << 20)  # trusts the first (below the recovery point)
    assert log.offset_for_timestamp(T0) == (0, T0)
    log.close()


def _broker(data: Path) -> Broker:
    return Broker(BrokerConfig.from_sources(None, [
        f"log.dir={data}", "listeners=PLAINTEXT://127.0.0.1:0", "log.cleaner.enable=false",
        "offsets.topic.num.partitions=1", "transaction.state.log.num.partitions=1",
    ]))


async def _kill(broker: Broker) -> None:
    """Stop the broker as a power cut would: tasks and sockets gone, logs not flushed."""
    for srv in broker.servers:
        srv.close()
    broker.scheduler.close()  # every timer and periodic task
    broker.coordinator_writer.close()
    # the roll flusher's queued fsyncs and checkpoint writes finish before the cut (a job running
    # during PowerLossFS.cut would change the model while it is rebuilt)
    for worker in (broker.roll_flusher, broker.page_cache_releaser):
        if worker is not None:
            worker.close()
    for plog in broker.logs.values():
        plog.close_without_flush()


def test_broker_starts_after_power_cuts(tmp_path: Path) -> None:
    """meta.properties, the topic registry, checkpoints, producer snapshots and the internal
    topics under repeated power cuts (torn writes too): the broker starts, flushed data stays.
    Regression: meta.properties was written without fsync, so a torn one could fail the start
    (``node.id=``) or silently change the cluster id."""

    async def scenario(root: Path, seed: int) -> None:
        with PowerLossFS(root, torn=True, rng=random.Random(seed)) as fs:
            broker = _broker(root)
            await broker.start()
            meta = (root / "meta.properties").read_bytes()
            if "t" not in broker.topics.topics:
                await broker.create_topic_async("t", 1, {"flush.messages": "1", "segment.bytes": "600"})
            for i in range(5):
                broker.append("t", 0, batch(2, tag=i, ts=T0 + 10 * i))
            leo = broker.logs[("t", 0)].log_end_offset
            broker.producer_ids.allocate()
            errors = await broker.group_coordinator.commit_offsets(
                "g", member_id="", generation_id=-1, offsets={("t", 0): (leo, -1, None)})
            assert set(errors.values()) == {0}
            err, pid, epoch = await broker.txn_coordinator.init_producer_id("tx", 60_000)
            assert err == 0
            await _kill(broker)
            fs.cut()
            assert (root / "meta.properties").read_bytes() == meta
            broker = _broker(root)
            await broker.start()
            assert broker.logs[("t", 0)].log_end_offset == leo
            # acknowledged coordinator writes survive: the committed offset, the producer epoch
            _, committed = broker.group_coordinator.fetch_offsets("g", [("t", [0])])
            got = committed["t"][0]
            assert got is not None and got.offset == leo
            err, pid2, epoch2 = await broker.txn_coordinator.init_producer_id("tx", 60_000)
            assert (err, pid2, epoch2) == (0, pid, epoch + 1)
            await broker.stop()

    for seed in range(8):
        root = tmp_path / f"data-{seed}"
        root.mkdir()
        asyncio.run(scenario(root, seed))
        asyncio.run(scenario(root, seed + 100))  # a second life on what the first cut left
