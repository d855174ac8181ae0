"""One partition's storage, in Kafka's vocabulary (see the module docstrings for the theory).

``PartitionLog`` (UnifiedLog) over ``LocalLog`` (ordered segments) over ``LogSegment``
(``.log`` + ``OffsetIndex`` + ``TimeIndex``), with ``ProducerStateManager`` for idempotence.
"""

from strom.log.errors import (
    CorruptRecordError,
    CorruptReplicaRecordsError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaStorageError,
    LogError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    OffsetsOutOfOrderError,
    OutOfOrderSequenceError,
    RecordListTooLargeError,
    UnexpectedAppendOffsetError,
    UnknownProducerIdError,
)
from strom.log.local_log import FetchData, FileRegion
from strom.log.partition_log import AppendInfo, PartitionLog, SegmentInfo, partition_dir

__all__ = [
    "AppendInfo",
    "CorruptRecordError",
    "CorruptReplicaRecordsError",
    "FetchData",
    "FileRegion",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "KafkaStorageError",
    "LogError",
    "MessageTooLargeError",
    "OffsetOutOfRangeError",
    "OffsetsOutOfOrderError",
    "OutOfOrderSequenceError",
    "PartitionLog",
    "RecordListTooLargeError",
    "SegmentInfo",
    "UnexpectedAppendOffsetError",
    "UnknownProducerIdError",
    "partition_dir",
]
