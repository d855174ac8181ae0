"""Several log dirs (log.dirs), on an in-process Broker: meta.properties per dir, placement on the
dir with the fewest partitions, discovery at start, AlterReplicaLogDirs' future logs (copy, swap,
restart midway, a crash between the swap's renames) and a failed dir. No network clients."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from strom.config import BrokerConfig, ConfigError
from strom.log.log_dirs import (
    delete_dir_name,
    discover,
    format_uuid,
    future_dir_name,
    load_meta,
    next_log_dirs,
    parse_partition_dir,
)
from strom.protocol.errors import ErrorCode
from strom.protocol.records import build_batch, iter_batches
from strom.server.broker import Broker


def dirs_of(tmp_path: Path, n: int = 3) -> list[Path]:
    return [tmp_path / f"d{i}" for i in range(n)]


def make_broker(dirs: list[Path], **overrides: str) -> Broker:
    base = {
        "log.dirs": ",".join(str(d) for d in dirs),
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1",
        "log.cleaner.enable": "false",
    }
    base.update(overrides)
    return Broker(BrokerConfig.from_sources(None, base))


def run_broker(dirs: list[Path], fn: Callable[[Broker], Awaitable[None]], **overrides: str) -> None:
    async def main() -> None:
        b = make_broker(dirs, **overrides)
        await b.start()
        try:
            await fn(b)
        finally:
            await b.stop()

    asyncio.run(main())


def produce(b: Broker, topic: str, p: int, n: int, tag: str = "v") -> None:
    for i in range(n):
        b.append(topic, p, build_batch([(f"k{i}".encode(), f"{tag}{i}".encode(), [], 0)]))


def values(b: Broker, topic: str, p: int) -> list[int]:
    plog = b.logs[(topic, p)]
    data = plog.read_bytes(plog.log_start_offset, 1 << 30, max_offset=plog.log_end_offset)
    return [h.base_offset for _pos, h in iter_batches(data)]


# ------------------------------------------------------------------ pure functions


def test_names_and_placement_order(tmp_path: Path) -> None:
    assert parse_partition_dir("my.topic-12") == ("my.topic", 12, "")
    assert parse_partition_dir(future_dir_name("a-b", 3)) == ("a-b", 3, "future")
    assert parse_partition_dir(delete_dir_name("t", 0)) == ("t", 0, "delete")
    assert parse_partition_dir("t-0.deleting") is None and parse_partition_dir("meta.properties") is None
    a, b, c = dirs_of(tmp_path)
    assert next_log_dirs([a, b, c], {a: 2, b: 1, c: 1}) == [b, c, a]


def test_meta_properties_per_dir(tmp_path: Path) -> None:
    dirs = dirs_of(tmp_path)
    meta = load_meta(dirs, 1, "cid")
    ids = [meta.directory_ids[d] for d in dirs]
    assert len(set(ids)) == 3 and not meta.offline
    for d, did in zip(dirs, ids, strict=True):
        text = (d / "meta.properties").read_text()
        assert "node.id=1" in text and "cluster.id=cid" in text and f"directory.id={format_uuid(did)}" in text
    again = load_meta(dirs, 1, "other")  # stored ids win
    assert again.cluster_id == "cid" and [again.directory_ids[d] for d in dirs] == ids
    with pytest.raises(ConfigError, match=r"node\.id"):
        load_meta(dirs, 2, "cid")
    (dirs[2] / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=else\n")
    with pytest.raises(ConfigError, match="different clusters"):
        load_meta(dirs, 1, "cid")
    shutil.copy(dirs[0] / "meta.properties", dirs[2] / "meta.properties")
    with pytest.raises(ConfigError, match=r"same directory\.id"):
        load_meta(dirs, 1, "cid")


def test_new_dir_gets_the_cluster_id_of_the_others(tmp_path: Path) -> None:
    dirs = dirs_of(tmp_path)
    load_meta(dirs[:1], 1, "first")
    meta = load_meta(dirs, 1, "config-default")
    assert meta.cluster_id == "first"
    assert "cluster.id=first" in (dirs[2] / "meta.properties").read_text()


def test_duplicate_partition_is_an_error(tmp_path: Path) -> None:
    a, b, _ = dirs_of(tmp_path)
    (a / "t-0").mkdir(parents=True)
    (b / "t-0").mkdir(parents=True)
    with pytest.raises(ConfigError, match="Duplicate log directories"):
        discover([a, b])
    shutil.rmtree(b / "t-0")
    (b / future_dir_name("t", 0)).mkdir()
    found = discover([a, b])
    assert found.current == {("t", 0): a} and list(found.future) == [("t", 0)]


# ------------------------------------------------------------------ the broker


def test_partitions_spread_and_found_again(tmp_path: Path) -> None:
    dirs = dirs_of(tmp_path)
    where: dict[tuple[str, int], Path] = {}

    async def first(b: Broker) -> None:
        await b.create_topic_async("t", 7)
        counts = b.replica_manager.dir_partition_counts()
        assert max(counts.values()) - min(counts.values()) <= 1  # the internal topics count too
        produce(b, "t", 3, 5)
        where.update({tp: plog.directory.parent for tp, plog in b.logs.items()})

    run_broker(dirs, first)

    async def second(b: Broker) -> None:
        assert {tp: plog.directory.parent for tp, plog in b.logs.items()} == where
        assert b.logs[("t", 3)].log_end_offset == 5
        assert b.topics.path.parent == dirs[0]  # broker-level files stay in the first dir

    run_broker(dirs, second)


def test_move_while_producing_then_swap(tmp_path: Path) -> None:
    dirs = dirs_of(tmp_path, 2)

    async def go(b: Broker) -> None:
        await b.create_topic_async("t", 1, {"segment.bytes": "2048"})
        plog = b.logs[("t", 0)]
        src = plog.directory.parent
        dest = next(d for d in dirs if d != src)
        produce(b, "t", 0, 200)
        b.replica_manager.mover.start_move("t", 0, dest)
        assert ("t", 0) in b.replica_manager.mover.moves
        for i in range(20):  # produce goes on while the future log copies
            produce(b, "t", 0, 5, tag=f"late{i}")
            await asyncio.sleep(0)
        while b.replica_manager.mover.moves:
            await asyncio.sleep(0.01)
        new = b.logs[("t", 0)]
        assert new.directory == dest / "t-0" and new.log_end_offset == 300 and new.high_watermark == 300
        assert values(b, "t", 0) == list(range(300))
        assert not (src / "t-0").exists()
        produce(b, "t", 0, 1)
        assert b.logs[("t", 0)].log_end_offset == 301

    run_broker(dirs, go)


def test_restart_midway_resumes_the_move(tmp_path: Path) -> None:
    dirs = dirs_of(tmp_path, 2)
    state: dict[str, Path] = {}

    async def first(b: Broker) -> None:
        await b.create_topic_async("t", 1)
        src = b.logs[("t", 0)].directory.parent
        state["dest"] = next(d for d in dirs if d != src)
        produce(b, "t", 0, 50)
        b.replica_manager.mover.start_move("t", 0, state["dest"])
        mv = b.replica_manager.mover.moves[("t", 0)]
        assert mv.task is not None
        mv.task.cancel()  # the broker stops with the copy half done
        cur = b.logs[("t", 0)]
        mv.future.append_as_follower(cur.read_bytes(0, 1 << 20, max_offset=20))
        assert mv.future.log_end_offset == 20

    run_broker(dirs, first)
    assert any(n.endswith("-future") for n in os.listdir(state["dest"]))

    async def second(b: Broker) -> None:
        while b.replica_manager.mover.moves:
            await asyncio.sleep(0.01)
        assert b.logs[("t", 0)].directory.parent == state["dest"]
        assert values(b, "t", 0) == list(range(50))

    run_broker(dirs, second)


def test_crash_between_the_swap_renames(tmp_path: Path) -> None:
    dirs = dirs_of(tmp_path, 2)
    state: dict[str, Path] = {}

    async def first(b: Broker) -> None:
        await b.create_topic_async("t", 1)
        src = b.logs[("t", 0)].directory.parent
        dest = next(d for d in dirs if d != src)
        state.update(src=src, dest=dest)
        produce(b, "t", 0, 30)
        b.replica_manager.mover.start_move("t", 0, dest)
        mv = b.replica_manager.mover.moves[("t", 0)]
        assert mv.task is not None
        mv.task.cancel()
        cur = b.logs[("t", 0)]
        mv.future.append_as_follower(cur.read_bytes(0, 1 << 20, max_offset=cur.log_end_offset))
        state["future"] = mv.future.directory

    run_broker(dirs, first)
    # the swap's first rename happened, the second did not
    os.rename(state["src"] / "t-0", state["src"] / delete_dir_name("t", 0))

    async def second(b: Broker) -> None:
        assert b.logs[("t", 0)].directory == state["dest"] / "t-0"
        assert values(b, "t", 0) == list(range(30))
        await asyncio.sleep(0.2)
        assert not [n for n in os.listdir(state["src"]) if n.startswith("t-0")]

    run_broker(dirs, second)


def test_failed_dir_takes_only_its_partitions_offline(tmp_path: Path) -> None:
    dirs = dirs_of(tmp_path, 2)

    async def go(b: Broker) -> None:
        await b.create_topic_async("t", 4)
        on_second = [tp for tp, plog in b.logs.items() if plog.directory.parent == dirs[1]]
        on_first = [tp for tp, plog in b.logs.items() if plog.directory.parent == dirs[0] and tp[0] == "t"]
        assert on_second and on_first
        shutil.rmtree(dirs[1])  # the disk is gone
        assert not b.replica_manager.check_log_dir(dirs[1])
        assert dirs[1] in b.replica_manager.offline_dirs and not b.fatal.is_set()
        for tp in on_second:
            assert tp not in b.logs
            assert b.replica_manager.partition_error(*tp) == ErrorCode.KAFKA_STORAGE_ERROR
        for tp in on_first:
            produce(b, *tp, 3)
            assert b.logs[tp].log_end_offset == 3
        from strom.log.errors import KafkaStorageError

        with pytest.raises(KafkaStorageError):  # markers wait for the partition to come back
            await b.write_markers(7, 0, True, [on_first[0], on_second[0]])
        assert b.logs[on_first[0]].log_end_offset == 3  # none written anywhere
        await b.create_topic_async("u", 2)  # new partitions go to the dirs still online
        assert all(b.logs[("u", p)].directory.parent == dirs[0] for p in range(2))

    run_broker(dirs, go)

    shutil.rmtree(dirs[1], ignore_errors=True)
    dirs[1].write_text("not a directory")  # still broken at the restart
    run_broker(dirs, _offline_at_start(dirs[1]))


def _offline_at_start(bad: Path) -> Callable[[Broker], Awaitable[None]]:
    async def check(b: Broker) -> None:
        assert bad in b.replica_manager.offline_dirs
        offline = [tp for tp in b.replica_manager.offline_partitions if tp[0] == "t"]
        rm = b.replica_manager
        assert offline and all(rm.partition_error(*tp) == ErrorCode.KAFKA_STORAGE_ERROR for tp in offline)
        assert all(("t", p) in b.logs or ("t", p) in b.replica_manager.offline_partitions for p in range(4))

    return check


def test_future_ahead_of_current_is_copied_again(tmp_path: Path) -> None:
    """After a crash the current log may have lost an unflushed tail the future log kept: the
    future does not fit any more and is made again from the current log."""
    dirs = dirs_of(tmp_path, 2)
    state: dict[str, Path] = {}

    async def first(b: Broker) -> None:
        await b.create_topic_async("t", 1)
        src = b.logs[("t", 0)].directory.parent
        state["dest"] = next(d for d in dirs if d != src)
        produce(b, "t", 0, 10)
        b.replica_manager.mover.start_move("t", 0, state["dest"])
        mv = b.replica_manager.mover.moves[("t", 0)]
        assert mv.task is not None
        mv.task.cancel()
        cur = b.logs[("t", 0)]
        mv.future.append_as_follower(cur.read_bytes(0, 1 << 20, max_offset=10))
        other = build_batch([(b"x", f"other{i}".encode(), [], 0) for i in range(5)])
        patched = bytearray(other)
        patched[0:8] = (10).to_bytes(8, "big")  # offsets 10..14, which the current log never gets
        mv.future.append_as_follower(patched)
        assert mv.future.log_end_offset == 15

    run_broker(dirs, first)

    async def second(b: Broker) -> None:
        while b.replica_manager.mover.moves:
            await asyncio.sleep(0.01)
        plog = b.logs[("t", 0)]
        assert plog.directory.parent == state["dest"] and plog.log_end_offset == 10
        assert values(b, "t", 0) == list(range(10))

    run_broker(dirs, second)


def test_first_dir_failure_stops_the_broker(tmp_path: Path) -> None:
    dirs = dirs_of(tmp_path, 2)

    async def go(b: Broker) -> None:
        shutil.rmtree(dirs[0])
        assert not b.replica_manager.check_log_dir(dirs[0])
        assert b.fatal.is_set()

    run_broker(dirs, go)
    dirs[0].write_text("not a directory")
    with pytest.raises(ConfigError, match="first log dir"):
        make_broker(dirs)


def test_device_error_on_append_takes_the_dir_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EIO from a write is the device failing (Kafka's LogDirFailureChannel); ENOSPC is not."""
    import errno

    from strom.log.errors import KafkaStorageError

    dirs = dirs_of(tmp_path, 2)

    async def go(b: Broker) -> None:
        await b.create_topic_async("t", 2)
        tps = {plog.directory.parent: tp for tp, plog in b.logs.items() if tp[0] == "t"}
        victim = b.logs[tps[dirs[1]]]

        def fail(code: int) -> None:
            def append(*_a: object, **_k: object) -> None:
                raise KafkaStorageError("append failed") from OSError(code, os.strerror(code))

            monkeypatch.setattr(victim, "append_as_leader", append)

        fail(errno.ENOSPC)
        with pytest.raises(KafkaStorageError):
            produce(b, *tps[dirs[1]], 1)
        assert not b.replica_manager.offline_dirs  # a full disk is not a failed one
        fail(errno.EIO)
        with pytest.raises(KafkaStorageError):
            produce(b, *tps[dirs[1]], 1)
        rm = b.replica_manager
        assert dirs[1] in rm.offline_dirs and tps[dirs[1]] in rm.offline_partitions
        produce(b, *tps[dirs[0]], 2)

    run_broker(dirs, go)


def test_preferred_dir_for_a_partition_not_created_yet(tmp_path: Path) -> None:
    dirs = dirs_of(tmp_path, 3)

    async def go(b: Broker) -> None:
        b.replica_manager.preferred_dirs[("later", 0)] = dirs[2]
        b.replica_manager.preferred_dirs[("later", 1)] = dirs[2]
        await b.create_topic_async("later", 2)
        assert all(b.logs[("later", p)].directory.parent == dirs[2] for p in range(2))

    run_broker(dirs, go)


def test_future_log_kept_while_its_current_dir_is_offline(tmp_path: Path) -> None:
    dirs = dirs_of(tmp_path, 3)
    state: dict[str, Path] = {}

    async def first(b: Broker) -> None:
        await b.create_topic_async("t", 1)
        src = b.logs[("t", 0)].directory.parent
        assert src != dirs[0]  # the internal topics sit in the first dir
        dest = next(d for d in dirs if d not in (src, dirs[0]))
        state.update(src=src, dest=dest)
        produce(b, "t", 0, 10)
        b.replica_manager.mover.start_move("t", 0, dest)
        mv = b.replica_manager.mover.moves[("t", 0)]
        assert mv.task is not None
        mv.task.cancel()
        state["future"] = mv.future.directory

    run_broker(dirs, first)
    shutil.rmtree(state["src"])
    state["src"].write_text("the disk is gone")

    async def second(b: Broker) -> None:
        assert state["src"] in b.replica_manager.offline_dirs
        assert b.replica_manager.partition_error("t", 0) == ErrorCode.KAFKA_STORAGE_ERROR
        assert ("t", 0) not in b.logs
        assert state["future"].is_dir()  # not promoted (incomplete), not deleted

    run_broker(dirs, second)


def test_out_of_descriptors_is_not_a_failed_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    dirs = dirs_of(tmp_path, 2)

    async def go(b: Broker) -> None:
        def listdir(_path: object) -> list[str]:
            raise OSError(errno.EMFILE, "Too many open files")

        monkeypatch.setattr(os, "listdir", listdir)
        assert b.replica_manager.check_log_dir(dirs[1])
        monkeypatch.undo()
        assert not b.replica_manager.offline_dirs

    run_broker(dirs, go)


def test_a_dir_given_twice_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "d"
    with pytest.raises(ConfigError, match="Duplicate log directory"):
        BrokerConfig.from_sources(None, {"log.dirs": f"{d},{tmp_path}/x/../d"})
    config = BrokerConfig.from_sources(None, {"log.dirs": f" {d} , {tmp_path / 'e'} "})
    assert config.log_dirs == [d, tmp_path / "e"]
