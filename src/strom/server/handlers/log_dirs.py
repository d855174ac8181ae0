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

from ...log.errors import LogError
from ...metadata.topics import TopicError, validate_topic_name
from ...protocol.errors import ErrorCode
from ..context import RequestContext
from ..replica_manager import ReplicaManager
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


MAX_PREFERRED = 10_000  # remembered destinations of partitions not created yet (hostile clients)


@handler(35)
async def handle_describe_log_dirs(ctx: RequestContext, request: Any) -> dict[str, Any]:
    rm = ctx.broker.replica_manager
    wanted: dict[str, set[int]] | None = None
    if request.topics is not None:
        wanted = {}
        for t in request.topics:
            wanted.setdefault(str(t.topic), set()).update(int(p) for p in t.partitions)
    per_dir: dict[Path, dict[str, list[dict[str, Any]]]] = {d: {} for d in rm.log_dirs}

    def add(d: Path, topic: str, p: int, size: int, lag: int, future: bool) -> None:
        if wanted is not None and p not in wanted.get(topic, ()):
            return
        per_dir.setdefault(d, {}).setdefault(topic, []).append(
            {"partition_index": p, "partition_size": size, "offset_lag": lag, "is_future_key": future}
        )

    for (topic, p), plog in sorted(rm.logs.items()):
        lag = max(plog.high_watermark - plog.log_end_offset, 0)  # Kafka's: 0 for a leader
        add(plog.directory.parent, topic, p, plog.size_bytes, lag, False)
    for (topic, p), mv in sorted(rm.mover.moves.items()):
        cur = rm.logs.get((topic, p))
        lag = max(cur.log_end_offset - mv.future.log_end_offset, 0) if cur is not None else 0
        add(mv.dest, topic, p, mv.future.size_bytes, lag, True)
    results = []
    for d in rm.log_dirs:
        if d in rm.offline_dirs:
            results.append({"error_code": ErrorCode.KAFKA_STORAGE_ERROR, "log_dir": _abs(d), "topics": [],
                            "total_bytes": -1, "usable_bytes": -1})
            continue
        total = usable = -1
        try:
            st = os.statvfs(d)
            total = st.f_blocks * st.f_frsize
            usable = st.f_bavail * st.f_frsize
        except OSError:
            rm.check_log_dir(d)
        results.append({
            "error_code": ErrorCode.KAFKA_STORAGE_ERROR if d in rm.offline_dirs else 0,
            "log_dir": _abs(d),
            "topics": [{"name": t, "partitions": parts} for t, parts in sorted(per_dir.get(d, {}).items())],
            "total_bytes": total,
            "usable_bytes": usable,
        })
    return {"throttle_time": 0, "error_code": 0, "results": results}


def _alter_one(rm: ReplicaManager, dest: Path | None, topic: str, p: int) -> int:
    if dest is None:
        return ErrorCode.LOG_DIR_NOT_FOUND
    if dest in rm.offline_dirs:
        return ErrorCode.KAFKA_STORAGE_ERROR
    tp = (topic, p)
    if tp in rm.offline_partitions:
        return ErrorCode.KAFKA_STORAGE_ERROR
    if tp not in rm.logs:
        try:
            validate_topic_name(topic)
            if p >= 0 and (tp in rm.preferred_dirs or len(rm.preferred_dirs) < MAX_PREFERRED):
                rm.preferred_dirs[tp] = dest  # Kafka's maybeUpdatePreferredLogDir
        except TopicError:
            pass
        return ErrorCode.REPLICA_NOT_AVAILABLE
    if rm.offline_dirs and rm.logs[tp].directory.parent != dest:
        return ErrorCode.KAFKA_STORAGE_ERROR
    try:
        rm.mover.start_move(topic, p, dest)
    except KeyError:
        return ErrorCode.REPLICA_NOT_AVAILABLE
    except (LogError, OSError) as e:
        rm.storage_log.failed("starting the move of", f"{topic}-{p}", e, "answering KAFKA_STORAGE_ERROR")
        rm.check_log_dir(dest)
        return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.NONE


@handler(34)
async def handle_alter_replica_log_dirs(ctx: RequestContext, request: Any) -> dict[str, Any]:
    rm = ctx.broker.replica_manager
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for entry in request.dirs:
        dest = _find_dir(rm.log_dirs, str(entry.path))
        for t in entry.topics:
            name = str(t.name)
            for p in t.partitions:
                code = _alter_one(rm, dest, name, int(p))
                by_topic.setdefault(name, []).append({"partition_index": int(p), "error_code": code})
    return {
        "throttle_time": 0,
        "results": [{"topic_name": t, "partitions": parts} for t, parts in by_topic.items()],
    }
