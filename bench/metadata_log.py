"""The on-disk metadata log (strom.raft.metadata_log): leader appends with a flush per batch (what
a one-voter quorum does before it commits), follower appends, and open times (clean and after
a crash). Run: ``PYTHONPATH=src python bench/metadata_log.py [batches] [records per batch]``."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from strom.config import LogConfig
from strom.protocol.records import iter_batches
from strom.raft.metadata_log import MetadataLog


def main() -> None:
    batches = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    per = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    record = b"r" * 100  # about a PartitionRecord
    config = LogConfig(segment_bytes=8 * 1024 * 1024)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        log = MetadataLog.open(root / "leader", config=config)
        t = time.perf_counter()
        for i in range(batches):
            log.append_as_leader([record] * per, 1 + i // 1000, 0)
            log.flush()
        lead = time.perf_counter() - t
        data = log.read(0, 1 << 31)
        log.close()
        follower = MetadataLog.open(root / "follower", config=config)
        byte_end = {h.next_offset: p + h.size for p, h in iter_batches(data)}
        t = time.perf_counter()
        pos = 0
        chunk = 64 * 1024
        while pos < len(data):  # fetch-sized pieces, a partial batch at the end of each
            follower.append_as_follower(data[pos:pos + chunk])
            pos = byte_end[follower.end_offset]
        follower.flush()
        follow = time.perf_counter() - t
        follower.close_without_flush()  # as after a crash: the next open recovers
        t = time.perf_counter()
        MetadataLog.open(root / "follower", config=config).close()
        unclean = time.perf_counter() - t
        t = time.perf_counter()
        MetadataLog.open(root / "follower", config=config).close()
        clean = time.perf_counter() - t
    n = batches * per
    mb = len(data) / 1e6
    print(f"{batches} batches x {per} records ({mb:.1f} MB)")
    each = lead * 1e6 / batches
    print(f"leader append + fsync per batch: {batches / lead:,.0f} batches/s ({each:.0f} us each)")
    print(f"follower append (64 KiB fetches): {n / follow:,.0f} records/s, {mb / follow:.1f} MB/s")
    print(f"open after a crash (recovery, CRC of every batch): {unclean * 1000:.0f} ms; "
          f"clean open: {clean * 1000:.0f} ms")


if __name__ == "__main__":
    main()
