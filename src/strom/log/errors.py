"""Errors raised by the partition log, each carrying its Kafka error code as ``error_code``.

The server maps ``exc.error_code`` straight into the response's error field.
:class:`CorruptRecordError` is the protocol package's own class (code 2, a ``ValueError``), re-exported
so that callers catch one type whether the bytes failed framing in ``protocol.records`` or here.
"""

from __future__ import annotations

from strom.protocol.records import CorruptRecordError, InvalidRecordError

__all__ = [
    "CorruptIndexError",
    "CorruptRecordError",
    "CorruptReplicaRecordsError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "KafkaStorageError",
    "LogError",
    "MessageTooLargeError",
    "OffsetOutOfRangeError",
    "OffsetsOutOfOrderError",
    "OutOfOrderSequenceError",
    "PolicyViolationError",
    "RecordListTooLargeError",
    "UnexpectedAppendOffsetError",
    "UnknownProducerIdError",
]


class LogError(Exception):
    """Base of the log's own errors. ``error_code`` is the Kafka protocol error code."""

    error_code: int = -1  # UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(LogError):
    error_code = 1


class MessageTooLargeError(LogError):
    """One batch is larger than max.message.bytes (MESSAGE_TOO_LARGE)."""

    error_code = 10


class RecordListTooLargeError(LogError):
    """The whole append is larger than segment.bytes (RECORD_LIST_TOO_LARGE)."""

    error_code = 18


class InvalidTimestampError(LogError):
    error_code = 32


class OutOfOrderSequenceError(LogError):
    error_code = 45


class InvalidProducerEpochError(LogError):
    error_code = 47


class TransactionCoordinatorFencedError(LogError):
    """A transaction marker from a coordinator older than the one whose marker the partition
    already has for the producer (Kafka's TransactionCoordinatorFencedException)."""

    error_code = 52


class PolicyViolationError(LogError):
    """E.g. DeleteRecords on a topic whose cleanup.policy does not include delete."""

    error_code = 44


class KafkaStorageError(LogError):
    """An I/O error on the log directory (KAFKA_STORAGE_ERROR)."""

    error_code = 56


class UnknownProducerIdError(LogError):
    error_code = 59


class CorruptIndexError(LogError):
    """An index file failed its sanity check. Internal: the log rebuilds the index."""

    error_code = 2


class UnexpectedAppendOffsetError(LogError):
    """A follower append whose first batch does not start at the log end offset (Kafka's
    UnexpectedAppendOffsetException; internal, the replica fetcher handles it). ``first_offset``
    and ``last_offset`` are the offsets of the first batch."""

    def __init__(self, message: str, first_offset: int, last_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset


class OffsetsOutOfOrderError(LogError):
    """A follower append whose batches do not follow one another (Kafka's
    OffsetsOutOfOrderException; internal)."""


class CorruptReplicaRecordsError(LogError, CorruptRecordError):
    """Replicated bytes that fail framing or their CRC32C (Kafka's CorruptRecordException on the
    follower path). Both a :class:`LogError` and a :class:`CorruptRecordError`."""

    error_code = 2
