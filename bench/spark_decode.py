"""Decode throughput of fetched record batches into Arrow: the numpy column decoder of
strom.spark.arrow_decode vs a per-record Python loop (strom.protocol.records.decode_records, then
pyarrow arrays). Same bytes for both; 100-byte values, 8-byte keys.

    python bench/spark_decode.py [--records 200000] [--batch 500] [--compression none]
"""

from __future__ import annotations

import argparse
import time

import pyarrow as pa

from strom.protocol import records as rec
from strom.spark.arrow_decode import KAFKA_ARROW_SCHEMA, decode_to_arrow


def make_data(n: int, per_batch: int, compression: int, headers: bool = False) -> bytes:
    out = bytearray()
    ts = 1_700_000_000_000
    off = 0
    while off < n:
        k = min(per_batch, n - off)
        recs = [
            (f"key{(off + i) % 1000:05d}".encode(), b"v" * 100, [("h", b"x")] if headers else [], ts + i)
            for i in range(k)
        ]
        out += rec.build_batch(recs, base_offset=off, compression=compression)
        off += k
    return bytes(out)


def python_loop(data: bytes, topic: str, partition: int) -> pa.RecordBatch:
    keys, values, offsets, tss, types = [], [], [], [], []
    for r in rec.decode_records(data):
        keys.append(r.key)
        values.append(r.value)
        offsets.append(r.offset)
        tss.append(r.timestamp * 1000)
        types.append(r.timestamp_type)
    n = len(keys)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array([topic] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array(tss, pa.timestamp("us", tz="UTC")),
            pa.array(types, pa.int32()),
        ],
        schema=KAFKA_ARROW_SCHEMA,
    )


def best(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=500, help="records per record batch")
    ap.add_argument("--compression", default="none", choices=list(rec.COMPRESSION_NAMES))
    args = ap.parse_args()
    comp = rec.COMPRESSION_NAMES[args.compression]
    data = make_data(args.records, args.batch, comp)
    # a fetch answer is at most a few MB: decode in 1 MiB-ish slices on batch boundaries
    chunks: list[bytes] = []
    pos = 0
    start = 0
    for p, h in rec.iter_batches(data):
        if p - start >= 1 << 20:
            chunks.append(data[start:p])
            start = p
        pos = p + h.size
    chunks.append(data[start:pos])

    def numpy_path() -> int:
        return sum(decode_to_arrow(c, "t", 0, 0, 1 << 62).rows for c in chunks)

    def loop_path() -> int:
        return sum(python_loop(c, "t", 0).num_rows for c in chunks)

    a = decode_to_arrow(chunks[0], "t", 0, 0, 1 << 62).batch
    b = python_loop(chunks[0], "t", 0)
    assert a is not None and a.equals(b), "decoders disagree"
    t_np = best(numpy_path)
    t_py = best(loop_path)
    n = args.records
    print(f"records={n} per_batch={args.batch} compression={args.compression} bytes={len(data)}")
    print(f"numpy column decoder : {n / t_np / 1e6:6.2f} M rows/s")
    print(f"per-record Python    : {n / t_py / 1e6:6.2f} M rows/s")
    print(f"ratio                : {t_py / t_np:6.1f}x")


if __name__ == "__main__":
    main()
