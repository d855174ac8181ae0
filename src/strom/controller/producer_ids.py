"""Producer id blocks for brokers: Kafka's ``ProducerIdControlManager``.

Replicated state: the next producer id not yet handed out (``ProducerIdsRecord.next_producer_id``;
0 on a new cluster). AllocateProducerIds gives the asking broker the block
``[next, next + 1000)``: the broker epoch is checked first (STALE_BROKER_EPOCH), and the record
carries the new next id, so a block is never handed out twice, even across failovers.
"""

from __future__ import annotations

from ..metadata.records import ProducerIdsRecord
from ..protocol.errors import ErrorCode, KafkaError
from .cluster_control import ClusterControlManager

PRODUCER_ID_BLOCK_SIZE = 1000
LONG_MAX = 2**63 - 1


class ProducerIdControlManager:
    def __init__(self, cluster: ClusterControlManager) -> None:
        self.cluster = cluster
        self.next_producer_id = 0

    def generate_next_producer_id(self, broker_id: int, broker_epoch: int) -> tuple[ProducerIdsRecord, int]:
        """The record and the first id of the block; raises KafkaError."""
        self.cluster.check_broker_epoch(broker_id, broker_epoch)
        start = self.next_producer_id
        if start > LONG_MAX - PRODUCER_ID_BLOCK_SIZE:
            raise KafkaError(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                "Exhausted all producerIds as the next block's end "
                "producerId has exceeded the int64 type limit",
            )
        record = ProducerIdsRecord(
            broker_id=broker_id, broker_epoch=broker_epoch, next_producer_id=start + PRODUCER_ID_BLOCK_SIZE
        )
        return record, start

    def replay(self, record: ProducerIdsRecord) -> None:
        """Raises ValueError for a record that would hand out ids again (Kafka refuses it too);
        an equal value (a migrated reservation of 0) changes nothing."""
        if record.next_producer_id < self.next_producer_id:
            raise ValueError(
                f"Next producer ID from replayed record ({record.next_producer_id}) is not greater than "
                f"the current next producer ID ({self.next_producer_id})"
            )
        self.next_producer_id = record.next_producer_id

    def to_records(self) -> list[ProducerIdsRecord]:
        if self.next_producer_id == 0:
            return []
        return [ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=self.next_producer_id)]
