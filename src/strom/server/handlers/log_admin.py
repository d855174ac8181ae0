"""DeleteRecords (21): move partitions' log start offsets forward (Kafka's
``kafka-delete-records.sh``). Segments wholly below the new start are removed at once (renamed,
unlinked after ``file.delete.delay.ms``); the answer's ``low_watermark`` is the new log start.

Per-partition errors: UNKNOWN_TOPIC_OR_PARTITION (3), OFFSET_OUT_OF_RANGE (1) for an offset
beyond the high watermark, POLICY_VIOLATION (44) if ``cleanup.policy`` lacks ``delete``,
KAFKA_STORAGE_ERROR (56) if the checkpoint cannot be written.
"""

from __future__ import annotations

from typing import Any

from ...protocol.errors import ErrorCode
from ..authz import AclOperation, ResourceType, authorized
from ..context import RequestContext
from . import handler


@handler(21)
async def handle_delete_records(ctx: RequestContext, request: Any) -> dict[str, Any]:
    rm = ctx.broker.replica_manager
    topics = []
    for t in request.topics:
        name = str(t.name)
        parts = []
        allowed = authorized(ctx, AclOperation.DELETE, ResourceType.TOPIC, name)  # Kafka: DELETE on the topic
        for p in t.partitions:
            idx = p.partition_index
            if not allowed:
                parts.append({"partition_index": idx, "low_watermark": -1,
                              "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED})
                continue
            low, error = rm.delete_records(name, idx, int(p.offset))
            parts.append({"partition_index": idx, "low_watermark": low, "error_code": error})
        topics.append({"name": name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
