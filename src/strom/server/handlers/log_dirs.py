"""Log directories: DescribeLogDirs (35) and AlterReplicaLogDirs (34), as Kafka answers them.

DescribeLogDirs: one result per configured log dir, by absolute path, in ``log.dirs`` order. An
online dir lists its partitions (the requested ones, or all when ``topics`` is null) with their
size, and its total and usable bytes (v4); a future log (a move under way) is listed in its
destination dir with ``is_future_key`` and, as offset lag, how far it is behind the current log
end offset. A failed dir answers KAFKA_STORAGE_ERROR (56) with no partitions and -1 bytes.

AlterReplicaLogDirs, per partition (Kafka's ``ReplicaManager.alterReplicaLogDirs``):
LOG_DIR_NOT_FOUND (57) for a path that is not one of ``log.dirs``; KAFKA_STORAGE_ERROR (56) if the
destination or the partition's own dir is offline, or any dir is offline (Kafka creates no
future log then); REPLICA_NOT_AVAILABLE (9) for a partition this broker does not have, whose
destination is remembered for when it is created; otherwise NONE once the move has started
(:mod:`strom.server.log_dir_mover`), or at once if the partition is there already.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from ...protocol.errors import ErrorCode
from ..context import RequestContext
from . import handler

log = logging.getLogger("strom.log_dirs")


def _abs(d: Path) -> str:
    return os.path.abspath(d)  # Kafka: File.getAbsolutePath (symlinks not resolved)


def _find_dir(dirs: list[Path], path: str) -> Path | None:
    """The configured dir ``path`` names (Kafka compares absolute paths); string work only, so
    any bytes a client sends are safe."""
    want = os.path.normpath(path)
    for d in dirs:
        if want in (_abs(d), os.path.normpath(str(d))):
            return d
    return None


@handler(35)
async def handle_describe_log_dirs(ctx: RequestContext, request: Any) -> dict[str, Any]:
    rm = ctx.broker.replica_manager
    wanted: dict[str, set[int]] | None = None
    if request.topics is not None:
        wanted = {}
        for t in request.topics:
            wanted.setdefault(str(t.topic), set()).update(int(p) for p in t.partitions)
    per_dir: dict[Path, dict[str, list[dict[str, Any]]]] = {d: {} for d in rm.log_dirs}
    for r in rm.log_dir_replicas():
        if wanted is not None and r.partition not in wanted.get(r.topic, ()):
            continue
        per_dir.setdefault(r.log_dir, {}).setdefault(r.topic, []).append({
            "partition_index": r.partition,
            "partition_size": r.size,
            "offset_lag": r.offset_lag,
            "is_future_key": r.is_future,
        })
    results = []
    for d in rm.log_dirs:
        usage = rm.log_dir_usage(d)
        if usage is None:
            results.append({"error_code": ErrorCode.KAFKA_STORAGE_ERROR, "log_dir": _abs(d), "topics": [],
                            "total_bytes": -1, "usable_bytes": -1})
            continue
        total, usable = usage
        results.append({
            "error_code": ErrorCode.KAFKA_STORAGE_ERROR if d in rm.offline_dirs else 0,
            "log_dir": _abs(d),
            "topics": [{"name": t, "partitions": parts} for t, parts in sorted(per_dir.get(d, {}).items())],
            "total_bytes": total,
            "usable_bytes": usable,
        })
    return {"throttle_time": 0, "error_code": 0, "results": results}


@handler(34)
async def handle_alter_replica_log_dirs(ctx: RequestContext, request: Any) -> dict[str, Any]:
    rm = ctx.broker.replica_manager
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for entry in request.dirs:
        dest = _find_dir(rm.log_dirs, str(entry.path))
        for t in entry.topics:
            name = str(t.name)
            for p in t.partitions:
                if dest is None:
                    code: int = ErrorCode.LOG_DIR_NOT_FOUND
                else:
                    code = rm.alter_replica_log_dir(name, int(p), dest)
                by_topic.setdefault(name, []).append({"partition_index": int(p), "error_code": code})
    return {
        "throttle_time": 0,
        "results": [{"topic_name": t, "partitions": parts} for t, parts in by_topic.items()],
    }
