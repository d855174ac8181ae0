"""strom.log.page.cache.window.bytes: a segment keeps only its freshly written tail in the page
cache and hands the pages behind it back to the kernel (posix_fadvise DONTNEED), without
changing what is read back."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_log_support import open_log, read_all

from strom.log.segment import PAGE_CACHE, set_page_cache_window
from strom.protocol.records import build_batch, decode_records

MIB = 1 << 20


@pytest.fixture(autouse=True)
def restore_window() -> Iterator[None]:
    saved = (PAGE_CACHE.window, PAGE_CACHE.step, PAGE_CACHE.recheck)
    yield
    PAGE_CACHE.window, PAGE_CACHE.step, PAGE_CACHE.recheck = saved


def resident_bytes(path: Path) -> int | None:
    """Bytes of ``path`` in the page cache (util-linux fincore), None without the tool."""
    tool = shutil.which("fincore")
    if tool is None:
        return None
    out = subprocess.run([tool, "--bytes", "--noheadings", "--output", "RES", str(path)],
                         capture_output=True, text=True, check=True).stdout.strip()
    return int(out)


def write_log(d: Path, total: int) -> tuple[Path, int | None]:
    """Appends ~64 KiB batches of random values, each synced at once (so every page behind the
    window is clean when it is advised), then reads them back; returns the segment file and how
    much of it was in the page cache before the read."""
    log = open_log(d, segment_bytes=1 << 30)
    values: list[bytes] = []
    fd = None
    written = 0
    i = 0
    while written < total:
        vals = [os.urandom(4096) for _ in range(16)]
        b = build_batch([(b"k%d" % i, v, [], 1_700_000_000_000 + i) for v in vals])
        log.append_as_leader(b, 0)
        values += vals
        written += len(b)
        seg = log.log_segments[-1]
        if fd is None:
            fd = os.open(seg.log_path, os.O_RDONLY)
        os.fsync(fd)
        i += 1
    assert fd is not None
    os.close(fd)
    path = log.log_segments[-1].log_path
    res = resident_bytes(path)
    data = read_all(log)
    assert [r.value for r in decode_records(data)] == values  # nothing changed by the advice
    log.close()
    return path, res


def test_window_bounds_the_cached_tail(tmp_path: Path) -> None:
    set_page_cache_window(4 * MIB)
    assert PAGE_CACHE.step == 1 * MIB and PAGE_CACHE.recheck == 16 * MIB
    path, res = write_log(tmp_path / "small", 16 * MIB)
    if res is None:
        pytest.skip("no fincore to count cached pages (the data check above passed)")
    size = path.stat().st_size
    # the window, one step not yet released and the last batch: far below the 16 MiB written
    assert size >= 16 * MIB and res <= 6 * MIB, (res, size)


def test_zero_leaves_the_page_cache_to_the_kernel(tmp_path: Path) -> None:
    set_page_cache_window(0)
    assert PAGE_CACHE.window == 0
    path, res = write_log(tmp_path / "all", 4 * MIB)
    if res is None:
        pytest.skip("no fincore to count cached pages (the data check above passed)")
    assert res >= path.stat().st_size - 64 * 1024, res  # all of it still cached (a fresh file)


def test_small_windows_use_small_steps() -> None:
    set_page_cache_window(64 * MIB)
    assert (PAGE_CACHE.window, PAGE_CACHE.step, PAGE_CACHE.recheck) == (64 * MIB, 2 * MIB, 16 * MIB)
    set_page_cache_window(64 * MIB, 16 * MIB)
    assert (PAGE_CACHE.step, PAGE_CACHE.recheck) == (16 * MIB, 64 * MIB)
    set_page_cache_window(4096)
    assert PAGE_CACHE.step == MIB  # at least a MiB between two system calls
    set_page_cache_window(-1)
    assert PAGE_CACHE.window == 0


def test_the_releaser_advises_off_the_callers_thread(tmp_path: Path) -> None:
    """With a PageCacheReleaser installed (the broker's), the advice runs on its worker thread
    on a duplicate descriptor: the same pages go, the appending thread never calls fadvise,
    and the segment may be closed and deleted while advice is queued."""
    import threading

    from strom.server.page_cache_releaser import PageCacheReleaser

    set_page_cache_window(4 * MIB)
    releaser = PageCacheReleaser()
    releaser.install()
    callers: set[int] = set()
    real = os.posix_fadvise

    def spy(fd: int, offset: int, length: int, advice: int) -> None:
        callers.add(threading.get_ident())
        real(fd, offset, length, advice)

    os.posix_fadvise = spy  # type: ignore[assignment]
    try:
        path, res = write_log(tmp_path / "bg", 16 * MIB)
        releaser.close()  # the queued advice is done
    finally:
        os.posix_fadvise = real  # type: ignore[assignment]
        releaser.close()
    assert PAGE_CACHE.releaser is None
    assert releaser.submitted >= 8  # a range every MiB past the first 4
    assert callers and threading.get_ident() not in callers
    if res is not None:
        # advised later than inline, so a step or two more may still be cached at the count
        assert res <= 8 * MIB, res
    # after close, advice is inline again, and a descriptor that is gone is no error
    fd = os.open(path, os.O_RDONLY)
    os.close(fd)
    releaser(fd, 0, MIB)
    path.unlink()


def test_release_step_config() -> None:
    """strom.log.page.cache.release.bytes: 2 MiB by default (bigger steps stalled appends: the
    writeback a release starts holds up the next write to the file); at least 64 KiB."""
    from strom.config import BrokerConfig, ConfigError

    assert BrokerConfig.from_sources().values["strom.log.page.cache.release.bytes"] == 2 * MIB
    ok = BrokerConfig.from_sources(overrides={"strom.log.page.cache.release.bytes": str(16 * MIB)})
    assert ok.values["strom.log.page.cache.release.bytes"] == 16 * MIB
    with pytest.raises(ConfigError):
        BrokerConfig.from_sources(overrides={"strom.log.page.cache.release.bytes": "4096"})


def test_reads_behind_the_window_are_asked_for_at_once(tmp_path: Path) -> None:
    """A read of a range the window released (a consumer catching up) is asked of the kernel in
    one piece before it is sent (posix_fadvise WILLNEED); reads of the cached tail are not."""
    set_page_cache_window(4 * MIB)
    log = open_log(tmp_path / "t-0", segment_bytes=1 << 30)
    fd = None
    i = 0
    while log.log_end_offset == 0 or log.log_segments[-1].size < 40 * MIB:
        vals = [os.urandom(4096) for _ in range(16)]
        log.append_as_leader(build_batch([(b"k%d" % i, v, [], 1_700_000_000_000 + i) for v in vals]), 0)
        if fd is None:
            fd = os.open(log.log_segments[-1].log_path, os.O_RDONLY)
        os.fsync(fd)  # (clean pages: the advice behind the window drops them)
        i += 1
    assert fd is not None
    os.close(fd)
    path = log.log_segments[-1].log_path
    end = log.log_end_offset
    before = PAGE_CACHE.prefetched
    data = log.read(end - 16, 64 * 1024)  # the tail: in the window
    data.close()
    assert PAGE_CACHE.prefetched == before
    first = resident_bytes(path)
    data = log.read(0, 1 * MIB)  # the head: released long ago
    try:
        assert PAGE_CACHE.prefetched == before + 1
        assert data.size >= 1 * MIB - 70 * 1024
        if first is not None:  # (fincore) the whole range is on its way in, not just its headers
            deadline = time.monotonic() + 5
            while (resident_bytes(path) or 0) < first + data.size * 3 // 4:
                assert time.monotonic() < deadline, (first, resident_bytes(path), data.size)
                time.sleep(0.01)
        got = data.read_bytes()
    finally:
        data.close()
    assert [r.key for r in decode_records(got)][:1] == [b"k0"]  # what was asked is what is read
    log.close()


def _released_log(tmp_path: Path, total: int) -> object:
    """A one-segment log of ``total`` bytes whose head the 4 MiB window has released (clean
    pages, so the advice dropped them)."""
    set_page_cache_window(4 * MIB)
    log = open_log(tmp_path / "t-0", segment_bytes=1 << 30)
    fd = None
    i = 0
    while log.log_end_offset == 0 or log.log_segments[-1].size < total:
        vals = [os.urandom(4096) for _ in range(16)]
        log.append_as_leader(build_batch([(b"k%d" % i, v, [], 1_700_000_000_000 + i) for v in vals]), 0)
        if fd is None:
            fd = os.open(log.log_segments[-1].log_path, os.O_RDONLY)
        os.fsync(fd)
        i += 1
    assert fd is not None
    os.close(fd)
    return log


def test_a_reader_catching_up_is_asked_for_ahead_of_its_reads(tmp_path: Path) -> None:
    """Sequential reads of released pages: after the first, every read's range was asked of the
    kernel by an earlier read (so the disk works ahead of the reader instead of each read
    waiting for its own), in pieces of a few MiB, not once per read."""
    log = _released_log(tmp_path, 40 * MIB)
    seg = log.log_segments[-1]  # type: ignore[attr-defined]
    before = PAGE_CACHE.prefetched
    offset, reads, covered = 0, 0, 0
    while True:
        asked = seg._prefetched_upto
        data = log.read(offset, 1 * MIB)  # type: ignore[attr-defined]
        try:
            end = data.regions[0][1] + data.size if data.size else 0
            if not data.size or end > seg._released_upto:
                break
            got = list(decode_records(data.read_bytes()))
        finally:
            data.close()
        if reads:
            assert end <= asked, (reads, end, asked)  # asked before this read
            covered += 1
        reads += 1
        offset = got[-1].offset + 1
    assert reads >= 20 and covered == reads - 1
    advices = PAGE_CACHE.prefetched - before
    assert 1 < advices <= reads // 3, (advices, reads)
    log.close()  # type: ignore[attr-defined]


def test_the_releaser_asks_released_pages_back_off_the_callers_thread(tmp_path: Path) -> None:
    """With the broker's PageCacheReleaser installed, a read of released pages is asked for
    (posix_fadvise WILLNEED) on its worker thread, on a duplicate descriptor; the pages come in
    and the read returns what was written."""
    import threading

    from strom.server.page_cache_releaser import PageCacheReleaser

    log = _released_log(tmp_path, 24 * MIB)
    releaser = PageCacheReleaser()
    releaser.install()
    callers: set[int] = set()
    real = os.posix_fadvise

    def spy(fd: int, offset: int, length: int, advice: int) -> None:
        if advice == os.POSIX_FADV_WILLNEED:
            callers.add(threading.get_ident())
        real(fd, offset, length, advice)

    path = log.log_segments[-1].log_path  # type: ignore[attr-defined]
    first = resident_bytes(path)
    os.posix_fadvise = spy  # type: ignore[assignment]
    try:
        data = log.read(0, 1 * MIB)  # type: ignore[attr-defined]
        try:
            releaser.close()  # the queued advice is done
            got = data.read_bytes()
        finally:
            data.close()
    finally:
        os.posix_fadvise = real  # type: ignore[assignment]
        releaser.close()
    assert PAGE_CACHE.prefetcher is None
    assert callers and threading.get_ident() not in callers
    assert [r.key for r in decode_records(got)][:1] == [b"k0"]
    if first is not None:
        deadline = time.monotonic() + 5
        while (resident_bytes(path) or 0) < first + 3 * MIB:  # the read and some of what follows
            assert time.monotonic() < deadline, (first, resident_bytes(path))
            time.sleep(0.01)
    log.close()  # type: ignore[attr-defined]
