"""DeleteRecords (21): move partitions' log start offsets forward (Kafka's
``kafka-delete-records.sh``). Segments wholly below the new start are removed at once (renamed,
unlinked after ``file.delete.delay.ms``). As in Kafka (``DelayedDeleteRecords``), the answer
waits until every live replica's log start offset has reached the new one (the partition's low
watermark, which it carries), so that a follower that becomes leader cannot bring deleted records
back; REQUEST_TIMED_OUT (7) with the low watermark reached after the request's timeout.

Per-partition errors: UNKNOWN_TOPIC_OR_PARTITION (3), OFFSET_OUT_OF_RANGE (1) for an offset
beyond the high watermark, POLICY_VIOLATION (44) if ``cleanup.policy`` lacks ``delete``,
KAFKA_STORAGE_ERROR (56) if the checkpoint cannot be written.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ...protocol.codec import duration_ms
from ...protocol.errors import ErrorCode
from ..authz import AclOperation, ResourceType, authorized
from ..context import RequestContext
from . import handler


@handler(21)
async def handle_delete_records(ctx: RequestContext, request: Any) -> dict[str, Any]:
    rm = ctx.broker.replica_manager
    timeout_ms = duration_ms(request.timeout)
    answers: list[tuple[str, list[Any]]] = []
    for t in request.topics:
        name = str(t.name)
        allowed = authorized(ctx, AclOperation.DELETE, ResourceType.TOPIC, name)  # Kafka: DELETE on the topic
        parts: list[Any] = []
        for p in t.partitions:
            idx = p.partition_index
            if not allowed:
                parts.append((idx, {"partition_index": idx, "low_watermark": -1,
                                    "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED}))
            else:  # every partition's records go now; the answers wait side by side
                parts.append((idx, rm.delete_records_and_wait(name, idx, int(p.offset), timeout_ms)))
        answers.append((name, parts))
    waiting = [a for _, parts in answers for _, a in parts if not isinstance(a, dict)]
    done = iter(await asyncio.gather(*waiting))
    topics = []
    for name, parts in answers:
        out = []
        for idx, a in parts:
            if not isinstance(a, dict):
                low, error = next(done)
                a = {"partition_index": idx, "low_watermark": low, "error_code": error}
            out.append(a)
        topics.append({"name": name, "partitions": out})
    return {"throttle_time": 0, "topics": topics}
