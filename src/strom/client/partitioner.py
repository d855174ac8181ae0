"""Kafka's default partitioner for keyed records: ``toPositive(murmur2(key)) % partitions``.

Used by the CLI producer and the Spark sink so keys land where Java clients would put them
(checked against Kafka's test vectors in the tests)."""

from __future__ import annotations

__all__ = ["murmur2", "partition_for_key"]


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (seed 0x9747b28c) as a signed 32-bit int."""
    m = 0x5BD1E995
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail = length & ~3
    extra = length % 4
    if extra == 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """``Utils.toPositive(murmur2(key)) % numPartitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions
