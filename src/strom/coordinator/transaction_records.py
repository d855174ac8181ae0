"""``__transaction_state`` records: Kafka's TransactionLogKey (version 0) and
TransactionLogValue (version 0 layout, with strom's ``last_producer_epoch`` appended so KIP-360
recovery survives a restart, then the KIP-890 fields Kafka keeps in tags of TransactionLogValue
v1: ``client_transaction_version`` (int8), ``previous_producer_id`` and ``next_producer_id``
(int64); records without them, written before, decode with the defaults). Status bytes are
Kafka's (Empty 0 ... PrepareEpochFence 7)."""

from __future__ import annotations

import struct

from .transaction import TxnMetadata, TxnState

_KEY_VERSION = 0
_VALUE_VERSION = 0


class TxnRecordError(ValueError):
    pass


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def encode_key(transactional_id: str) -> bytes:
    return struct.pack(">h", _KEY_VERSION) + _string(transactional_id)


def decode_key(data: bytes) -> str:
    try:
        (version, n) = struct.unpack_from(">hh", data, 0)
        if version != _KEY_VERSION:
            raise TxnRecordError(f"unknown transaction log key version {version}")
        return data[4 : 4 + n].decode()
    except (struct.error, UnicodeDecodeError) as e:
        raise TxnRecordError(f"corrupt transaction log key: {e}") from e


def encode_value(m: TxnMetadata) -> bytes:
    out = bytearray(
        struct.pack(">hqhib", _VALUE_VERSION, m.producer_id, m.producer_epoch, m.timeout_ms, m.state.value)
    )
    by_topic: dict[str, list[int]] = {}
    for topic, p in sorted(m.partitions):
        by_topic.setdefault(topic, []).append(p)
    out += struct.pack(">i", len(by_topic))
    for topic, parts in by_topic.items():
        out += _string(topic) + struct.pack(">i", len(parts)) + b"".join(struct.pack(">i", p) for p in parts)
    out += struct.pack(">qqh", m.last_update_ms, m.start_ms, m.last_producer_epoch)
    out += struct.pack(">bqq", m.client_transaction_version, m.previous_producer_id, m.next_producer_id)
    return bytes(out)


def decode_value(transactional_id: str, data: bytes) -> TxnMetadata:
    try:
        version, pid, epoch, timeout, status = struct.unpack_from(">hqhib", data, 0)
        if version != _VALUE_VERSION:
            raise TxnRecordError(f"unknown transaction log value version {version}")
        pos = 17
        (ntopics,) = struct.unpack_from(">i", data, pos)
        pos += 4
        parts: set[tuple[str, int]] = set()
        for _ in range(max(ntopics, 0)):
            (n,) = struct.unpack_from(">h", data, pos)
            topic = data[pos + 2 : pos + 2 + n].decode()
            pos += 2 + n
            (np_,) = struct.unpack_from(">i", data, pos)
            pos += 4
            for _p in range(np_):
                parts.add((topic, struct.unpack_from(">i", data, pos)[0]))
                pos += 4
        last_update, start = struct.unpack_from(">qq", data, pos)
        pos += 16
        last_epoch = struct.unpack_from(">h", data, pos)[0] if len(data) >= pos + 2 else -1
        pos += 2
        tv, prev_pid, next_pid = 0, -1, -1
        if len(data) >= pos + 17:
            tv, prev_pid, next_pid = struct.unpack_from(">bqq", data, pos)
        return TxnMetadata(
            transactional_id,
            pid,
            epoch,
            timeout,
            TxnState(status),
            frozenset(parts),
            start,
            last_update,
            last_epoch,
            tv,
            prev_pid,
            next_pid,
        )
    except (struct.error, UnicodeDecodeError, ValueError) as e:
        if isinstance(e, TxnRecordError):
            raise
        raise TxnRecordError(f"corrupt transaction log value: {e}") from e
