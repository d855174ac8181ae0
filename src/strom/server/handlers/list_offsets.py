"""ListOffsets (2): earliest (-2), latest (-1), max timestamp (-3), earliest local (-4),
latest tiered (-5), or the first offset whose timestamp is >= a given time."""

from __future__ import annotations

from typing import Any

from ...protocol.errors import ErrorCode
from ..context import RequestContext
from . import handler

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5


@handler(2)
async def handle_list_offsets(ctx: RequestContext, request: Any) -> dict[str, Any]:
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
                        "error_code": broker.partition_error(name, idx),
                        "timestamp": -1,
                        "offset": -1,
                        "leader_epoch": -1,
                    }
                )
                continue
            ts = p.timestamp
            offset, found_ts = -1, -1
            if ts == LATEST:
                read_committed = getattr(request, "isolation_level", 0) == 1
                offset = plog.last_stable_offset if read_committed else plog.high_watermark
            elif ts in (EARLIEST, EARLIEST_LOCAL):
                offset = plog.log_start_offset
            elif ts == LATEST_TIERED:
                offset = -1
            elif ts == MAX_TIMESTAMP:
                offset, found_ts = plog.max_timestamp_offset()
            elif ts >= 0:
                hit = plog.offset_for_timestamp(ts)
                if hit is not None and hit[0] < plog.high_watermark:
                    offset, found_ts = hit
            else:
                parts.append(
                    {
                        "partition_index": idx,
                        "error_code": ErrorCode.INVALID_REQUEST,
                        "timestamp": -1,
                        "offset": -1,
                        "leader_epoch": -1,
                    }
                )
                continue
            parts.append(
                {
                    "partition_index": idx,
                    "error_code": 0,
                    "timestamp": found_ts,
                    "offset": offset,
                    "leader_epoch": 0 if offset >= 0 else -1,
                    "old_style_offsets": [offset],
                }
            )
        topics.append({"name": name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
