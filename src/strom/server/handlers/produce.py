"""Produce (0): validate and append opaque record batches; answer per partition.

Hot path: batches are never decoded record by record; the log validates headers and CRCs,
patches offsets and appends. ``acks=0`` gets no response (Kafka's behaviour).
"""

from __future__ import annotations

import logging
from typing import Any

from ...log.errors import KafkaStorageError
from ...protocol.errors import ErrorCode
from ..context import NoResponse, RequestContext
from . import handler

log = logging.getLogger("strom.produce")


def _partition_error(index: int, code: int, message: str | None = None) -> dict[str, Any]:
    return {
        "index": index,
        "error_code": code,
        "base_offset": -1,
        "log_append_time": -1,
        "log_start_offset": -1,
        "error_message": message,
    }


@handler(0)
async def handle_produce(ctx: RequestContext, request: Any) -> dict[str, Any] | NoResponse:
    broker = ctx.broker
    acks = request.acks
    responses = []
    for topic in request.topic_data:
        name = str(topic.name)
        info = broker.topics.get(name)
        parts = []
        for pd in topic.partition_data:
            idx = pd.index
            if acks not in (0, 1, -1):
                parts.append(_partition_error(idx, ErrorCode.INVALID_REQUIRED_ACKS))
                continue
            if info is None or not (0 <= idx < info.partitions):
                parts.append(_partition_error(idx, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            if info.internal:  # written by the coordinators only (Kafka's rule)
                parts.append(
                    _partition_error(
                        idx, ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {name}"
                    )
                )
                continue
            records = pd.records
            if not records:
                parts.append(_partition_error(idx, ErrorCode.CORRUPT_MESSAGE, "empty record set"))
                continue
            try:
                res = broker.append(name, idx, records)
            except (KafkaStorageError, OSError) as e:
                broker.storage_log.failed(
                    "append to", f"{name}-{idx}", e,
                    "answering KAFKA_STORAGE_ERROR, nothing appended; every produce retries",
                )
                parts.append(_partition_error(idx, ErrorCode.KAFKA_STORAGE_ERROR, "storage error"))
                continue
            except Exception as e:  # log errors carry Kafka codes
                code: int | None = getattr(e, "error_code", None)
                if code is None:
                    log.exception("unexpected append failure on %s-%d", name, idx)
                    code = ErrorCode.UNKNOWN_SERVER_ERROR
                parts.append(_partition_error(idx, code, str(e)))
                continue
            if broker.storage_log.failing:
                broker.storage_log.ok("append to", f"{name}-{idx}")
            parts.append(
                {
                    "index": idx,
                    "error_code": 0,
                    "base_offset": res.first_offset,
                    "log_append_time": res.log_append_time,
                    "log_start_offset": res.log_start_offset,
                    "error_message": None,
                }
            )
        responses.append({"name": name, "partition_responses": parts})
    if acks == 0:
        return NoResponse()
    return {"responses": responses, "throttle_time": 0}
