"""Produce requests (v3..12) decoded by hand: the hot path of every producer.

Through kio, a Produce request is walked twice (:mod:`strom.protocol.request_bounds`, then kio's
decoder) and its records are copied out of the frame into new ``bytes``: ~70 µs for a 1 MiB
request, one more copy of every produced byte. Here the request is read once, bounds-checked as
it goes, and each partition's records are a ``memoryview`` slice of the request frame.

The result has kio's field names and shapes (``transactional_id``, ``acks``, ``timeout`` as a
``timedelta``, ``topic_data`` tuples of ``name`` and ``partition_data`` tuples of ``index`` and
``records``), so the Produce handler and :mod:`strom.protocol.error_responses` read it as they
read kio's entity.

Checked as Kafka's generated ``read`` and :func:`~strom.protocol.request_bounds.check_request`
check: every length and count against the bytes left (an array of ``n`` elements needs ``n``
times the smallest element), null refused where the schema does not allow it (the arrays and a
topic's name), strings valid UTF-8. Unknown tagged fields are skipped, as Kafka skips them.
Error contract: :class:`~strom.protocol.errors.ProtocolError` only.
``tests/property/test_produce_request_codec.py`` compares it with kio.
"""

from __future__ import annotations

import datetime
import struct
from dataclasses import dataclass

from .errors import ProtocolError
from .framing import read_uvarint, skip_tagged_fields

__all__ = [
    "FIRST_VERSION", "LAST_VERSION", "PartitionProduceData", "ProduceRequest", "TopicProduceData",
    "decode_produce_request",
]

FIRST_VERSION = 3
LAST_VERSION = 12
FLEXIBLE_FROM = 9

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class PartitionProduceData:
    index: int
    records: memoryview | None


@dataclass(frozen=True, slots=True)
class TopicProduceData:
    name: str
    partition_data: tuple[PartitionProduceData, ...]


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout: datetime.timedelta
    topic_data: tuple[TopicProduceData, ...]


class _Reader:
    __slots__ = ("buf", "flexible", "pos")

    def __init__(self, buf: memoryview, pos: int, flexible: bool) -> None:
        self.buf = buf
        self.pos = pos
        self.flexible = flexible

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > len(self.buf):
            raise ProtocolError(
                f"{what} ({n} bytes) exceeds the {len(self.buf) - self.pos} bytes left"
            )

    def _compact(self) -> int:
        n, self.pos = read_uvarint(self.buf, self.pos)
        return n - 1

    def _fixed(self, st: struct.Struct, what: str) -> int:
        self.need(st.size, what)
        (n,) = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return n if n >= -1 else self._bad(what, n)

    def string_length(self, what: str) -> int:
        """-1: null."""
        return self._compact() if self.flexible else self._fixed(_I16, what)

    def array_length(self, what: str) -> int:
        return self._compact() if self.flexible else self._fixed(_I32, what)

    def bytes_length(self, what: str) -> int:
        return self._compact() if self.flexible else self._fixed(_I32, what)

    @staticmethod
    def _bad(what: str, n: int) -> int:
        raise ProtocolError(f"invalid length {n} of {what}")

    def string(self, what: str, nullable: bool) -> str | None:
        n = self.string_length(what)
        if n < 0:
            if not nullable:
                raise ProtocolError(f"non-nullable field {what} was serialized as null")
            return None
        self.need(n, what)
        raw = self.buf[self.pos:self.pos + n]
        self.pos += n
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError:
            raise ProtocolError(f"{what} is not valid UTF-8") from None

    def count(self, what: str, min_size: int) -> int:
        n = self.array_length(what)
        if n < 0:
            raise ProtocolError(f"non-nullable field {what} was serialized as null")
        if n * min_size > len(self.buf) - self.pos:
            raise ProtocolError(f"{n} {what} declared in {len(self.buf) - self.pos} bytes")
        return n

    def tags(self) -> None:
        if self.flexible:
            self.pos = skip_tagged_fields(self.buf, self.pos)


def decode_produce_request(frame: memoryview, body_pos: int, version: int) -> ProduceRequest:
    """The Produce request in ``frame[body_pos:]`` (after the header's client id; a flexible
    header's tagged fields included), version 3..12."""
    if not FIRST_VERSION <= version <= LAST_VERSION:
        raise ValueError(f"Produce is decoded here for v{FIRST_VERSION}..{LAST_VERSION}, not v{version}")
    flexible = version >= FLEXIBLE_FROM
    r = _Reader(frame, body_pos, flexible)
    r.tags()  # the request header's
    txn_id = r.string("ProduceRequest.transactional_id", nullable=True)
    r.need(_ACKS_TIMEOUT.size, "ProduceRequest.acks and timeout")
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, r.pos)
    r.pos += _ACKS_TIMEOUT.size
    # the smallest topic: an empty name and no partitions (flexible: 1 + 1 + 1 tag byte)
    ntopics = r.count("ProduceRequest.topic_data", 3 if flexible else 6)
    topics: list[TopicProduceData] = []
    for _ in range(ntopics):
        name = r.string("TopicProduceData.name", nullable=False)
        assert name is not None
        # the smallest partition: an index and null records (flexible: 4 + 1 + 1 tag byte)
        nparts = r.count("TopicProduceData.partition_data", 6 if flexible else 8)
        parts: list[PartitionProduceData] = []
        for _ in range(nparts):
            r.need(4, "PartitionProduceData.index")
            (index,) = _I32.unpack_from(frame, r.pos)
            r.pos += 4
            size = r.bytes_length("PartitionProduceData.records")
            records: memoryview | None = None
            if size >= 0:
                r.need(size, "PartitionProduceData.records")
                records = frame[r.pos:r.pos + size]
                r.pos += size
            r.tags()
            parts.append(PartitionProduceData(index, records))
        r.tags()
        topics.append(TopicProduceData(name, tuple(parts)))
    r.tags()
    # (bytes after the last field are ignored, as kio's decoder and Kafka's parser ignore them)
    return ProduceRequest(txn_id, acks, datetime.timedelta(milliseconds=timeout_ms), tuple(topics))
