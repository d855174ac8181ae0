"""The log cleaner reads compressed batches as a stream: a decompression bomb accepted into a
compacted topic (one valid record with a 1 GiB value, as Kafka accepts it) is mapped, kept whole
or dropped whole without ever being decompressed into memory."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import resource
    from strom.log.cleaner import CleanerStats, filter_batch, iter_streamed_records
    from strom.protocol.records import parse_header
    from strom.testing.hostile import bomb_payload, raw_batch

    batch = raw_batch(bomb_payload(4, 1 << 30, key=b"big"), 1, 4)  # zstd, 1 GiB of zeros
    h = parse_header(batch)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    records = [r for r, _ in iter_streamed_records(batch, h)]
    assert [(r.key, r.offset_delta, r.value_null) for r in records] == [(b"big", 0, False)]
    stats = CleanerStats()
    kept = filter_batch(h, memoryview(batch), {b"big": 0}, 0, -1, {}, stats)
    assert kept is not None and kept[0] == batch  # the latest value of its key: kept as it is
    dropped = filter_batch(h, memoryview(batch), {b"big": 5}, 0, -1, {}, stats)
    assert dropped is None  # superseded: dropped whole
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print((after - before) // 1024)
    """
)


@pytest.mark.slow
def test_cleaner_streams_a_decompression_bomb() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    growth_mb = int(out.stdout.strip())
    assert growth_mb < 64, growth_mb
