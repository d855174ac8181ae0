"""ListOffsets (2): earliest (-2), latest (-1), max timestamp (-3), earliest local (-4),
latest tiered (-5), or the first offset whose timestamp is >= a given time; answered by the
replica manager (:meth:`~strom.server.replica_manager.ReplicaManager.fetch_offset`)."""

from __future__ import annotations

from typing import Any

from ...protocol.errors import ErrorCode
from ..authz import AclOperation, ResourceType, authorized
from ..context import RequestContext
from . import handler


@handler(2)
async def handle_list_offsets(ctx: RequestContext, request: Any) -> dict[str, Any]:
    rm = ctx.broker.replica_manager
    isolation = getattr(request, "isolation_level", 0)
    topics = []
    for t in request.topics:
        name = str(t.name)
        parts = []
        # Kafka: DESCRIBE on the topic, else TOPIC_AUTHORIZATION_FAILED for its partitions
        allowed = authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name)
        for p in t.partitions:
            idx = p.partition_index
            if not allowed:
                parts.append(
                    {"partition_index": idx, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                     "timestamp": -1, "offset": -1, "leader_epoch": -1}
                )
                continue
            r = rm.fetch_offset(name, idx, p.timestamp, isolation,
                                current_leader_epoch=int(getattr(p, "current_leader_epoch", -1)))
            if r.error_code != ErrorCode.NONE:
                parts.append(
                    {"partition_index": idx, "error_code": r.error_code, "timestamp": -1, "offset": -1,
                     "leader_epoch": -1}
                )
                continue
            parts.append(
                {
                    "partition_index": idx,
                    "error_code": 0,
                    "timestamp": r.timestamp,
                    "offset": r.offset,
                    "leader_epoch": r.leader_epoch,
                    "old_style_offsets": [r.offset],
                }
            )
        topics.append({"name": name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
