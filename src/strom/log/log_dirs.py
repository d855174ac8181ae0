"""Several log directories (``log.dirs``), as Kafka's LogManager keeps them.

Theory of operation
-------------------
* Every directory has its own ``meta.properties`` (KIP-858, Kafka 3.7+): the same ``cluster.id``
  and ``node.id`` in all of them, and a ``directory.id`` of its own (a random UUID written in
  Kafka's base64 form). A directory that disagrees on the cluster or node id, or two with one
  directory id, fail the start (Kafka's rules); a directory that cannot be created or read is
  *offline* from the start (Kafka's ``log.dir.failure`` at startup). The first directory holds
  the broker-level files (see :mod:`strom.server.broker`): if it is unusable the broker does not
  start, as Kafka stops when its ``metadata.log.dir`` fails.
* A partition lives in ``<dir>/<topic>-<partition>``; :func:`discover` finds every one in every
  online directory at start. The same partition in two directories is an error (Kafka's
  "Duplicate log directories"), except for a *future* copy
  ``<topic>-<partition>.<uuid>-future`` (AlterReplicaLogDirs, :mod:`strom.server.log_dir_mover`)
  and the leftovers ``<topic>-<partition>.<uuid>-delete`` of a finished move, removed at start.
* A new partition goes to the online directory holding the fewest partitions, counting future
  copies (Kafka's ``LogManager.nextLogDirs``); ties go to the directory listed first.

Error contract: :func:`load_meta` raises ``ConfigError`` for an inconsistent set of directories;
:func:`discover` raises ``ConfigError`` for a duplicate partition.
"""

from __future__ import annotations

import base64
import os
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from strom.config import ConfigError
from strom.durable_file import replace_file

__all__ = [
    "META_FILE",
    "Discovery",
    "LogDirMeta",
    "delete_dir_name",
    "discover",
    "format_uuid",
    "future_dir_name",
    "load_meta",
    "next_log_dirs",
    "parse_partition_dir",
]

META_FILE = "meta.properties"
FUTURE_SUFFIX = "-future"
DELETE_SUFFIX = "-delete"
_SPECIAL = re.compile(
    r"^(?P<topic>.+)-(?P<partition>\d+)\.(?P<uid>[0-9a-f]{32})-(?P<kind>future|delete|stray)$"
)
_CURRENT = re.compile(r"^(?P<topic>[a-zA-Z0-9._-]+)-(?P<partition>\d+)$")


def format_uuid(u: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def future_dir_name(topic: str, partition: int, uid: uuid.UUID | None = None) -> str:
    """Kafka's ``UnifiedLog.logFutureDirName``: ``<topic>-<partition>.<uuid>-future``."""
    return f"{topic}-{partition}.{(uid or uuid.uuid4()).hex}{FUTURE_SUFFIX}"


def delete_dir_name(topic: str, partition: int, uid: uuid.UUID | None = None) -> str:
    """Kafka's ``UnifiedLog.logDeleteDirName``: ``<topic>-<partition>.<uuid>-delete``."""
    return f"{topic}-{partition}.{(uid or uuid.uuid4()).hex}{DELETE_SUFFIX}"


def parse_partition_dir(name: str) -> tuple[str, int, str] | None:
    """``(topic, partition, kind)`` of a directory name, kind ``""`` (the current log),
    ``"future"``, ``"delete"`` or ``"stray"``; None for anything else."""
    m = _SPECIAL.match(name)
    if m is not None:
        return m["topic"], int(m["partition"]), m["kind"]
    m = _CURRENT.match(name)
    if m is not None:
        return m["topic"], int(m["partition"]), ""
    return None


@dataclass
class LogDirMeta:
    """The directories after :func:`load_meta`: ids of the online ones, errors of the others."""

    cluster_id: str
    dirs: list[Path]
    directory_ids: dict[Path, uuid.UUID] = field(default_factory=dict)
    offline: dict[Path, str] = field(default_factory=dict)


def _read_props(path: Path) -> dict[str, str]:
    return dict(
        line.split("=", 1)
        for line in path.read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )


def _write_props(path: Path, node_id: int, cluster_id: str, directory_id: uuid.UUID) -> None:
    # atomically and durably (Kafka's atomic meta.properties write): a power cut must not
    # leave a torn file that fails the next start or silently changes the cluster id
    text = (f"#strom\nversion=1\nnode.id={node_id}\ncluster.id={cluster_id}\n"
            f"directory.id={format_uuid(directory_id)}\n")
    replace_file(path, text.encode())


def _parse_uuid(text: str) -> uuid.UUID:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    return uuid.UUID(bytes=raw)


def load_meta(dirs: list[Path], node_id: int, default_cluster_id: str,
              new_id: Callable[[], uuid.UUID] = uuid.uuid4) -> LogDirMeta:
    """Read (or write) ``meta.properties`` in every directory; see the module docstring."""
    found: dict[Path, dict[str, str]] = {}
    offline: dict[Path, str] = {}
    for d in dirs:
        try:
            d.mkdir(parents=True, exist_ok=True)
            path = d / META_FILE
            found[d] = _read_props(path) if path.exists() else {}
            os.listdir(d)
        except (OSError, UnicodeDecodeError) as e:
            offline[d] = f"{type(e).__name__}: {e}"
    if dirs[0] in offline:
        raise ConfigError(f"the first log dir {dirs[0]} (the broker's metadata) is unusable: "
                          f"{offline[dirs[0]]}")
    cluster_ids = {p["cluster.id"] for p in found.values() if "cluster.id" in p}
    if len(cluster_ids) > 1:
        raise ConfigError(f"the log dirs belong to different clusters: {sorted(cluster_ids)}")
    cluster_id = cluster_ids.pop() if cluster_ids else default_cluster_id
    meta = LogDirMeta(cluster_id, list(dirs), offline=offline)
    seen: dict[uuid.UUID, Path] = {}
    for d, props in found.items():
        stored = int(props.get("node.id", node_id))
        if stored != node_id:
            raise ConfigError(f"node.id {node_id} does not match node.id {stored} stored in {d / META_FILE}")
        did: uuid.UUID | None = None
        if "directory.id" in props:
            try:
                did = _parse_uuid(props["directory.id"].strip())
            except ValueError as e:
                raise ConfigError(f"bad directory.id in {d / META_FILE}: {e}") from None
            if did in seen:
                raise ConfigError(f"{d} and {seen[did]} have the same directory.id {format_uuid(did)}")
        if did is None or "cluster.id" not in props:
            did = did or new_id()
            try:
                _write_props(d / META_FILE, node_id, cluster_id, did)
            except OSError as e:
                if d == dirs[0]:
                    raise ConfigError(f"cannot write {d / META_FILE}: {e}") from None
                offline[d] = f"{type(e).__name__}: {e}"
                continue
        seen[did] = d
        meta.directory_ids[d] = did
    return meta


@dataclass
class Discovery:
    """What :func:`discover` found: the directory of each current log, the path of each future
    log, and the leftover directories to delete."""

    current: dict[tuple[str, int], Path] = field(default_factory=dict)
    future: dict[tuple[str, int], Path] = field(default_factory=dict)
    deleted: list[Path] = field(default_factory=list)


def discover(dirs: Iterable[Path]) -> Discovery:
    """Scan the (online) log directories; raises ConfigError for a partition found twice."""
    out = Discovery()
    for d in dirs:
        for entry in os.scandir(d):
            if not entry.is_dir(follow_symlinks=False):
                continue
            parsed = parse_partition_dir(entry.name)
            if parsed is None:
                continue
            topic, partition, kind = parsed
            tp = (topic, partition)
            if kind == "":
                other = out.current.get(tp)
                if other is not None:
                    raise ConfigError(
                        f"Duplicate log directories for {topic}-{partition} are found in both {other} "
                        f"and {d}; remove the one of the directory known to have failed (Kafka's rule)"
                    )
                out.current[tp] = d
            elif kind == "future":
                prev = out.future.get(tp)
                if prev is not None:  # only one move at a time: keep the first, drop the other
                    out.deleted.append(Path(entry.path))
                else:
                    out.future[tp] = Path(entry.path)
            else:
                out.deleted.append(Path(entry.path))
    return out


def next_log_dirs(online: list[Path], counts: dict[Path, int]) -> list[Path]:
    """Kafka's ``nextLogDirs``: the online directories, fewest partitions first (stable)."""
    return sorted(online, key=lambda d: counts.get(d, 0))
