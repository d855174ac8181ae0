"""The bounded LRU of log file descriptors (strom.log.file_cache) and the logs on top of it."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_log_support import T0, batch, offsets_of, open_log, read_all

from strom.clock import ManualClock
from strom.log import KafkaStorageError
from strom.log import file_cache as fc
from strom.log.file_cache import FILE_CACHE, CachedFile, FileCache


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def small_global_cache() -> Iterator[FileCache]:
    before = FILE_CACHE.capacity
    FILE_CACHE.resize(8)
    try:
        yield FILE_CACHE
    finally:
        FILE_CACHE.resize(before)


def test_open_descriptors_stay_bounded_and_files_reopen(tmp_path: Path) -> None:
    cache = FileCache(8)
    files = [CachedFile(tmp_path / f"f{i}", cache) for i in range(50)]
    base = open_fds()
    for i, f in enumerate(files):
        f.pwrite(f"file {i}".encode(), 0)
        assert cache.open_count <= 8
        assert open_fds() - base <= 8
    assert not files[0].is_open and files[-1].is_open  # least recently used went first
    for i, f in enumerate(files):  # every evicted file reopens on access
        assert f.pread(100, 0) == f"file {i}".encode()
    assert cache.evictions >= 42 and cache.open_count == 8
    for f in files:
        f.close()
    assert cache.open_count == 0 and open_fds() == base


def test_pinned_descriptor_is_never_evicted(tmp_path: Path) -> None:
    cache = FileCache(8)
    pinned = CachedFile(tmp_path / "pinned", cache)
    pinned.pwrite(b"keep me", 0)
    fd = pinned.acquire()
    others = [CachedFile(tmp_path / f"o{i}", cache) for i in range(30)]
    for f in others:
        f.pwrite(b"x", 0)
    assert pinned.is_open and os.pread(fd, 7, 0) == b"keep me"
    pinned.release()
    others[0].pread(1, 0)
    others[1].pread(1, 0)
    assert not pinned.is_open  # unpinned: the next opens evict it like any other
    for f in [pinned, *others]:
        f.close()


def test_dup_outlives_eviction_rename_and_unlink(tmp_path: Path) -> None:
    cache = FileCache(8)
    f = CachedFile(tmp_path / "seg.log", cache)
    f.pwrite(b"payload", 0)
    dup = f.dup()
    for i in range(20):
        CachedFile(tmp_path / f"o{i}", cache).pwrite(b"x", 0)
    assert not f.is_open
    os.rename(tmp_path / "seg.log", tmp_path / "seg.log.deleted")
    os.unlink(tmp_path / "seg.log.deleted")
    assert os.pread(dup, 7, 0) == b"payload"
    os.close(dup)


def test_deleted_or_closed_files_are_not_recreated(tmp_path: Path) -> None:
    cache = FileCache(8)
    f = CachedFile(tmp_path / "a.log", cache)
    f.pwrite(b"x", 0)
    cache.resize(8)
    for i in range(10):
        CachedFile(tmp_path / f"o{i}", cache).pwrite(b"x", 0)
    os.unlink(tmp_path / "a.log")
    with pytest.raises(FileNotFoundError):
        f.pread(1, 0)
    assert not (tmp_path / "a.log").exists()
    g = CachedFile(tmp_path / "b.log", cache)
    g.pwrite(b"x", 0)
    g.close()
    with pytest.raises(OSError) as e:
        g.pread(1, 0)
    assert e.value.errno == errno.EBADF


def test_flush_fsyncs_only_written_files_even_after_eviction(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    cache = FileCache(8)
    files = [CachedFile(tmp_path / f"f{i}", cache) for i in range(20)]
    for f in files:
        f.pread(1, 0)  # created, never written
    files[3].pwrite(b"dirty", 0)
    for f in files[10:]:
        f.pread(1, 0)  # evicts files[3] while dirty
    assert not files[3].is_open
    for f in files:
        f.flush()
    assert len(synced) == 1  # only the written one, reopened for its fsync
    files[3].flush()
    assert len(synced) == 1


def test_emfile_on_open_evicts_half_and_retries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = FileCache(16)
    files = [CachedFile(tmp_path / f"f{i}", cache) for i in range(16)]
    for f in files:
        f.pwrite(b"x", 0)
    real_open = os.open
    fails = [1]

    def flaky_open(path: object, flags: int, mode: int = 0o777) -> int:
        if fails[0]:
            fails[0] -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, flags, mode)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", flaky_open)
    new = CachedFile(tmp_path / "new", cache)
    new.pwrite(b"y", 0)
    assert cache.open_count <= 9  # half given back, then the new one
    fails[0] = 2
    other = CachedFile(tmp_path / "other", cache)
    with pytest.raises(OSError) as e:
        other.pread(1, 0)
    assert e.value.errno == errno.EMFILE
    assert other.pread(1, 0) == b""  # descriptors are back: it just works


def test_concurrent_threads_never_see_a_closed_descriptor(tmp_path: Path) -> None:
    cache = FileCache(8)
    files = [CachedFile(tmp_path / f"f{i}", cache) for i in range(40)]
    for i, f in enumerate(files):
        f.pwrite(i.to_bytes(4, "big") * 256, 0)
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for n in range(3000):
                i = (n * 7 + k) % len(files)
                assert files[i].pread(4, 4 * (n % 256)) == i.to_bytes(4, "big")
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert cache.open_count <= 8


def test_many_partition_logs_hold_few_descriptors(tmp_path: Path, small_global_cache: FileCache) -> None:
    base = open_fds()
    logs = [open_log(tmp_path / f"t-{i}") for i in range(60)]
    for i, log in enumerate(logs):
        log.append_as_leader(batch(2, tag=i), 0)
        log.update_high_watermark(log.log_end_offset)
    assert open_fds() - base <= 8
    for i, log in enumerate(logs):  # every log reopens its files as it is read
        assert offsets_of(read_all(log)) == [0, 1]
        assert str(i).encode() + b":0:" in read_all(log)
    assert open_fds() - base <= 8
    for log in logs:
        log.close()
    assert open_fds() <= base
    reopened = [open_log(tmp_path / f"t-{i}") for i in range(60)]  # clean shutdown: data intact
    assert all(offsets_of(read_all(log)) == [0, 1] for log in reopened)
    for log in reopened:
        log.close()


def test_fetch_region_survives_eviction_and_segment_deletion(tmp_path: Path,
                                                              small_global_cache: FileCache) -> None:
    clock = ManualClock(T0)
    log = open_log(tmp_path / "t-0", clock, retention_ms=1000, file_delete_delay_ms=0)
    for _ in range(3):
        log.append_as_leader(batch(3), 0)
        log.roll()
    log.update_high_watermark(log.log_end_offset)
    fetched = log.read(0, 1 << 20)  # a fetch response's regions: duplicated descriptors
    expected = fetched.read_bytes()
    others = [open_log(tmp_path / f"o-{i}") for i in range(20)]  # evict everything of t-0
    for o in others:
        o.append_as_leader(batch(1), 0)
    clock.advance(10_000)
    assert log.delete_old_segments() == 3
    assert log.delete_expired_segments() == 3  # renamed and unlinked
    assert fetched.read_bytes() == expected
    fetched.close()
    for o in [log, *others]:
        o.close()


def test_storage_error_when_out_of_descriptors_then_recovery(tmp_path: Path, small_global_cache: FileCache,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    logs = [open_log(tmp_path / f"t-{i}") for i in range(20)]
    for log in logs:
        log.append_as_leader(batch(1), 0)
    assert not logs[0].log_segments[0].log_file.is_open
    real_open = os.open

    def exhausted(path: object, flags: int, mode: int = 0o777) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    logged: list[str] = []
    monkeypatch.setattr(fc.fd_exhausted_log, "_last", -1e18)
    monkeypatch.setattr(fc.log, "error", lambda *a, **k: logged.append(str(a)))
    monkeypatch.setattr(fc.log, "log", lambda lvl, msg, *a: logged.append(msg % a))
    monkeypatch.setattr(os, "open", exhausted)
    for _ in range(5):
        with pytest.raises(KafkaStorageError):
            logs[0].append_as_leader(batch(1), 0)
    assert len(logged) == 1 and "Too many open files" in logged[0]  # one line, not one per failure
    monkeypatch.setattr(os, "open", real_open)
    logs[0].append_as_leader(batch(1), 0)  # recovers by itself
    logs[0].update_high_watermark(logs[0].log_end_offset)
    assert offsets_of(read_all(logs[0])) == [0, 1]
    for log in logs:
        log.close()
