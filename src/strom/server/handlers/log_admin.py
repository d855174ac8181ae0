"""DeleteRecords (21): move partitions' log start offsets forward (Kafka's
``kafka-delete-records.sh``). Segments wholly below the new start are removed at once (renamed,
unlinked after ``file.delete.delay.ms``); the answer's ``low_watermark`` is the new log start.

Per-partition errors: UNKNOWN_TOPIC_OR_PARTITION (3), OFFSET_OUT_OF_RANGE (1) for an offset
beyond the high watermark, POLICY_VIOLATION (44) if ``cleanup.policy`` lacks ``delete``,
KAFKA_STORAGE_ERROR (56) if the checkpoint cannot be written.
"""

from __future__ import annotations

import logging
from typing import Any

from ...log.errors import KafkaStorageError, LogError
from ...protocol.errors import ErrorCode
from ..context import RequestContext
from . import handler

log = logging.getLogger("strom.delete_records")


@handler(21)
async def handle_delete_records(ctx: RequestContext, request: Any) -> dict[str, Any]:
    broker = ctx.broker
    topics = []
    for t in request.topics:
        name = str(t.name)
        parts = []
        for p in t.partitions:
            idx = p.partition_index
            plog = broker.logs.get((name, idx))
            if plog is None:
                parts.append(
                    {
                        "partition_index": idx,
                        "low_watermark": -1,
                        "error_code": broker.partition_error(name, idx),
                    }
                )
                continue
            try:
                low = plog.delete_records(int(p.offset))
            except (KafkaStorageError, OSError) as e:
                broker.storage_log.failed("DeleteRecords on", f"{name}-{idx}", e,
                                          "answering KAFKA_STORAGE_ERROR; the client may retry")
                parts.append(
                    {"partition_index": idx, "low_watermark": -1, "error_code": ErrorCode.KAFKA_STORAGE_ERROR}
                )
                continue
            except LogError as e:
                parts.append({"partition_index": idx, "low_watermark": -1, "error_code": e.error_code})
                continue
            broker.storage_log.ok("DeleteRecords on", f"{name}-{idx}")
            parts.append({"partition_index": idx, "low_watermark": low, "error_code": 0})
        topics.append({"name": name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
