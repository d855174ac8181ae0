"""Several log directories (``log.dirs``), as Kafka's LogManager keeps them.

Theory of operation
-------------------
* Every directory has its own ``meta.properties`` (KIP-858, Kafka 3.7+): the same ``cluster.id``
  and ``node.id`` in all of them, and a ``directory.id`` of its own (a random UUID written in
  Kafka's base64 form). A directory that disagrees on the cluster or node id, or two with one
  directory id, fail the start (Kafka's rules); a directory that cannot be created or read is
  *offline* from the start (Kafka's ``log.dir.failure`` at startup). The first directory holds
  the broker-level files (see :mod:`strom.server.broker`): if it is unusable the broker does not
  start, as Kafka stops when its ``metadata.log.dir`` fails. A separate ``metadata.log.dir``
  gets a ``meta.properties`` of its own too and must be usable.
* The file is Kafka 4's v1 (``version=1``, ``cluster.id``, ``node.id``, ``directory.id``, after
  the ``#`` and date lines ``java.util.Properties.store`` writes). Kafka's v0 files and strom's
  earlier ones (a ``#strom`` line, ``directory.id`` maybe missing) are read too.
* Formatting: a node with ``controller.quorum.voters`` set (one of a multi-node quorum) starts
  only on dirs ``strom storage format`` (:func:`format_dirs`) has formatted, as every Kafka node
  does. The zero set-up node (no voters: a quorum of itself) formats its dirs at first start.
  A refused start writes nothing.
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
import binascii
import os
import re
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from strom.config import ConfigError, parse_properties
from strom.durable_file import replace_file

__all__ = [
    "META_FILE",
    "Discovery",
    "FormatResult",
    "LogDirMeta",
    "MetaProperties",
    "delete_dir_name",
    "discover",
    "format_dirs",
    "format_uuid",
    "future_dir_name",
    "load_meta",
    "next_log_dirs",
    "parse_partition_dir",
    "parse_uuid",
    "random_uuid",
    "read_meta_properties",
    "write_meta_properties",
]

META_FILE = "meta.properties"
FUTURE_SUFFIX = "-future"
DELETE_SUFFIX = "-delete"
_SPECIAL = re.compile(
    r"^(?P<topic>.+)-(?P<partition>\d+)\.(?P<uid>[0-9a-f]{32})-(?P<kind>future|delete|stray)$"
)
_METADATA_PARTITION = "__cluster_metadata-0"
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


@dataclass(frozen=True)
class MetaProperties:
    """One ``meta.properties`` (Kafka's ``MetaProperties``). Version 1 (KRaft) always has
    ``cluster.id`` and ``node.id``; version 0 (ZooKeeper-era) may lack both and calls the node
    id ``broker.id``. ``directory.id`` (KIP-858) is optional in both."""

    version: int
    cluster_id: str | None
    node_id: int | None
    directory_id: uuid.UUID | None = None

    @classmethod
    def parse(cls, text: str, path: Path | str = META_FILE) -> MetaProperties:
        """Parse a file's text; ``ValueError`` naming the file and the key for bad content.

        Readable: Kafka's v0 and v1 files, and strom's earlier ones (``#strom`` then v1 keys,
        ``directory.id`` possibly missing)."""
        props = parse_properties(text)
        version_text = props.get("version", "0")
        if version_text not in ("0", "1"):
            raise ValueError(f"unknown version {version_text!r} in {path} (Kafka writes 0 or 1)")
        version = int(version_text)
        id_key = "node.id" if version == 1 else "broker.id"
        node_id: int | None = None
        if id_key in props:
            try:
                node_id = int(props[id_key])
            except ValueError:
                raise ValueError(
                    f"Unable to read {id_key} in {path} as a base-10 number: {props[id_key]!r}"
                ) from None
        directory_id: uuid.UUID | None = None
        if "directory.id" in props:
            try:
                directory_id = parse_uuid(props["directory.id"])
            except ValueError as e:
                raise ValueError(f"Unable to read directory.id in {path} as a Uuid: {e}") from None
        return cls(version, props.get("cluster.id") or None, node_id, directory_id)

    def properties(self) -> dict[str, str]:
        """The keys and values of the file, sorted by key."""
        props: dict[str, str] = {"version": str(self.version)}
        if self.cluster_id is not None:
            props["cluster.id"] = self.cluster_id
        if self.node_id is not None:
            props["node.id" if self.version == 1 else "broker.id"] = str(self.node_id)
        if self.directory_id is not None:
            props["directory.id"] = format_uuid(self.directory_id)
        return dict(sorted(props.items()))

    def to_text(self, now: float | None = None) -> str:
        """Kafka's layout (``java.util.Properties.store`` with an empty comment: a ``#`` line,
        then the date, then the keys)."""
        stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime(now))
        return "#\n#" + stamp + "\n" + "".join(f"{k}={v}\n" for k, v in self.properties().items())


def read_meta_properties(path: Path) -> MetaProperties | None:
    """The ``meta.properties`` at ``path``; None when there is none. ``OSError`` (and
    ``UnicodeDecodeError``) for a file that cannot be read, ``ValueError`` for bad content."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    return MetaProperties.parse(text, path)


def write_meta_properties(path: Path, meta: MetaProperties) -> None:
    """Atomically and durably (Kafka's ``writePropertiesFile`` with fsync): a power cut must not
    leave a torn file that fails the next start or silently changes the cluster id."""
    replace_file(path, meta.to_text().encode())


def parse_uuid(text: str) -> uuid.UUID:
    """Kafka's ``Uuid.fromString``: URL-safe base64 of 16 bytes, without padding."""
    text = text.strip()
    if len(text) > 24:
        raise ValueError(f"Input string with prefix `{text[:24]}` is too long to be decoded as a base64 UUID")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise ValueError(f"Input string `{text}` is not valid base64") from None
    if len(raw) != 16:
        raise ValueError(
            f"Input string `{text}` decoded as {len(raw)} bytes, which is not equal to the expected "
            f"16 bytes of a base64-encoded UUID"
        )
    return uuid.UUID(bytes=raw)


def _reserved(u: uuid.UUID) -> bool:
    """Kafka's ``DirectoryId.reserved``: the first 100 ids (UNASSIGNED, LOST, MIGRATING ...)."""
    return u.int >> 64 == 0 and (u.int & ((1 << 64) - 1)) < 100


def random_uuid(new_id: Callable[[], uuid.UUID] = uuid.uuid4) -> str:
    """Kafka's ``Uuid.randomUuid().toString()``: 22 characters of URL-safe base64, never a
    reserved id and never starting with ``-`` (it would read as a command-line flag)."""
    return format_uuid(_new_directory_id(new_id, set()))


def _new_directory_id(new_id: Callable[[], uuid.UUID], taken: set[uuid.UUID]) -> uuid.UUID:
    """Kafka's ``Copier.generateValidDirectoryId``: not reserved, not taken, and its string
    form does not start with ``-``."""
    while True:
        did = new_id()
        if did not in taken and not _reserved(did) and not format_uuid(did).startswith("-"):
            taken.add(did)
            return did


@dataclass
class LogDirMeta:
    """The directories after :func:`load_meta`: ids of the online ones, errors of the others.
    ``directory_ids`` covers ``log.dirs``; a separate ``metadata.log.dir`` has its id in
    ``metadata_directory_id``."""

    cluster_id: str
    dirs: list[Path]
    directory_ids: dict[Path, uuid.UUID] = field(default_factory=dict)
    offline: dict[Path, str] = field(default_factory=dict)
    metadata_directory_id: uuid.UUID | None = None


@dataclass
class _Ensemble:
    """What is on disk (Kafka's ``MetaPropertiesEnsemble``): per dir its meta.properties, or
    none yet (empty), or why it cannot be used (offline)."""

    props: dict[Path, MetaProperties] = field(default_factory=dict)
    empty: list[Path] = field(default_factory=list)
    offline: dict[Path, str] = field(default_factory=dict)


def _scan(dirs: Iterable[Path], create: bool) -> _Ensemble:
    """Read every dir's meta.properties. ``create``: make missing dirs (the zero set-up start);
    otherwise a missing dir is only *empty* and nothing is written."""
    out = _Ensemble()
    for d in dirs:
        try:
            if create:
                d.mkdir(parents=True, exist_ok=True)
            elif not d.exists():
                out.empty.append(d)
                continue
            os.listdir(d)
            meta = read_meta_properties(d / META_FILE)
        except (OSError, ValueError) as e:  # UnicodeDecodeError is a ValueError
            out.offline[d] = f"{type(e).__name__}: {e}"
            continue
        if meta is None:
            out.empty.append(d)
        else:
            out.props[d] = meta
    return out


def _verify(ens: _Ensemble, node_id: int, cluster_id: str | None, strict: bool) -> str | None:
    """Kafka's ``MetaPropertiesEnsemble.verify``: one cluster id in every file (and, if given,
    ``cluster_id``: the one the config or the command line names), ``node_id`` in every file,
    no directory id twice or reserved. ``strict``: a v1 file must have cluster.id and node.id
    (strom's auto-formatted dirs may lack them and get them written). Returns the cluster id
    the files agree on (None if no file names one); raises ``ConfigError``."""
    seen_cluster: tuple[str, Path] | None = None
    seen_ids: dict[uuid.UUID, Path] = {}
    for d, meta in ens.props.items():
        path = d / META_FILE
        if meta.cluster_id is None:
            if strict and meta.version == 1:
                raise ConfigError(f"cluster.id was not specified in the v1 file: {path}")
        elif cluster_id is not None and meta.cluster_id != cluster_id:
            raise ConfigError(
                f"cluster.id {cluster_id} does not match cluster.id {meta.cluster_id} stored in {path}: "
                f"the directory belongs to another cluster"
            )
        elif seen_cluster is not None and meta.cluster_id != seen_cluster[0]:
            raise ConfigError(
                f"the log dirs belong to different clusters: cluster.id {seen_cluster[0]} in "
                f"{seen_cluster[1] / META_FILE}, cluster.id {meta.cluster_id} in {path}"
            )
        elif seen_cluster is None:
            seen_cluster = (meta.cluster_id, d)
        if meta.node_id is None:
            if strict and meta.version == 1:
                raise ConfigError(f"node.id was not specified in {path}")
        elif meta.node_id != node_id:
            raise ConfigError(
                f"node.id {node_id} does not match node.id {meta.node_id} stored in {path}: the "
                f"directory was formatted for another node. If you moved your data, make sure your "
                f"configured node.id matches; to make a new node, use empty directories"
            )
        did = meta.directory_id
        if did is not None:
            if _reserved(did):
                raise ConfigError(f"Invalid reserved directory.id {format_uuid(did)} found in {path}")
            if did in seen_ids:
                raise ConfigError(
                    f"{d} and {seen_ids[did]} have the same directory.id {format_uuid(did)}: "
                    f"was a meta.properties copied from one to the other?"
                )
            seen_ids[did] = d
    if cluster_id is not None:
        return cluster_id
    return seen_cluster[0] if seen_cluster is not None else None


def _with_metadata_dir(dirs: list[Path], metadata_dir: Path | None) -> list[Path]:
    """``dirs`` plus ``metadata_dir`` when it is not one of them (compared as real paths)."""
    if metadata_dir is None:
        return list(dirs)
    real = {os.path.realpath(d) for d in dirs}
    return list(dirs) if os.path.realpath(metadata_dir) in real else [*dirs, metadata_dir]


def load_meta(dirs: list[Path], node_id: int, default_cluster_id: str,
              new_id: Callable[[], uuid.UUID] = uuid.uuid4, *,
              metadata_dir: Path | None = None, require_formatted: bool = False,
              config_cluster_id: str | None = None) -> LogDirMeta:
    """Check ``meta.properties`` in every log dir (and ``metadata_dir``, Kafka's
    ``metadata.log.dir``, when it is not one of them) and write what is missing.

    ``require_formatted`` (a node of a multi-node quorum, as every Kafka node is): every usable
    dir must have been formatted (``strom storage format``); nothing is created. Otherwise
    (strom's zero set-up node) a dir without the file gets one, with the cluster id of the
    others, or ``default_cluster_id``. ``config_cluster_id`` (``cluster.id`` set in the config)
    must match every stored one. A refused start (``ConfigError`` naming the setting and the
    file) has written nothing: every check runs before the first write. Files strom wrote
    before (``#strom`` header) are read as they are and rewritten only if incomplete."""
    all_dirs = _with_metadata_dir(dirs, metadata_dir)
    separate_metadata_dir = all_dirs[-1] if len(all_dirs) > len(dirs) else None
    ens = _scan(all_dirs, create=not require_formatted)
    for vital in (dirs[0], separate_metadata_dir):
        if vital is not None and vital in ens.offline:
            what = "the first log dir" if vital == dirs[0] else "metadata.log.dir"
            raise ConfigError(f"{what} {vital} (the broker's metadata) is unusable: {ens.offline[vital]}")
    stored = _verify(ens, node_id, config_cluster_id, strict=require_formatted)
    if require_formatted and ens.empty:
        raise ConfigError(
            f"No meta.properties found in {ens.empty[0]} (have you run `strom storage format` to "
            f"format the directory?): with controller.quorum.voters set, a node starts only on "
            f"formatted log.dirs and metadata.log.dir"
        )
    if metadata_dir is not None:
        for d in ens.props:
            found = d / _METADATA_PARTITION
            if os.path.realpath(d) != os.path.realpath(metadata_dir) and found.exists():
                raise ConfigError(
                    f"Found unexpected metadata location in data directory `{found}` "
                    f"(the configured metadata.log.dir is {metadata_dir})."
                )
    cluster_id = stored or default_cluster_id
    meta = LogDirMeta(cluster_id, list(dirs), offline={d: e for d, e in ens.offline.items() if d in dirs})
    taken = {m.directory_id for m in ens.props.values() if m.directory_id is not None}
    for d in all_dirs:
        if d in ens.offline:
            continue
        current = ens.props.get(d)
        did = current.directory_id if current is not None else None
        if current is None or did is None or current.cluster_id is None or current.node_id is None:
            did = did or _new_directory_id(new_id, taken)
            try:
                write_meta_properties(d / META_FILE, MetaProperties(1, cluster_id, node_id, did))
            except OSError as e:
                if d in (dirs[0], separate_metadata_dir):
                    raise ConfigError(f"cannot write {d / META_FILE}: {e}") from None
                meta.offline[d] = f"{type(e).__name__}: {e}"
                continue
        if d == separate_metadata_dir:
            meta.metadata_directory_id = did
        else:
            meta.directory_ids[d] = did
    return meta


@dataclass
class FormatResult:
    """What :func:`format_dirs` did: the dirs it formatted, and lines to print."""

    formatted: list[Path] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)


def format_dirs(dirs: list[Path], metadata_dir: Path, node_id: int, cluster_id: str, *,
                ignore_formatted: bool = False,
                new_id: Callable[[], uuid.UUID] = uuid.uuid4) -> FormatResult:
    """``strom storage format`` (Kafka's ``Formatter``): write a v1 ``meta.properties`` with
    ``cluster_id``, ``node_id`` and a fresh ``directory.id`` in every empty dir of ``dirs`` and
    ``metadata_dir``. A dir formatted already fails the command unless ``ignore_formatted``
    (then it is left as it is, but must belong to the same cluster and node). Raises
    ``ConfigError``; writes nothing when a check fails."""
    if not cluster_id:
        raise ConfigError("You must specify the cluster id.")
    if node_id < 0:
        raise ConfigError("You must specify a valid non-negative node ID (node.id).")
    all_dirs = sorted(_with_metadata_dir(dirs, metadata_dir), key=str)  # Kafka: a TreeSet
    ens = _scan(all_dirs, create=False)
    _verify(ens, node_id, cluster_id, strict=True)
    if ens.props and not ignore_formatted:
        first = next(iter(ens.props))
        raise ConfigError(
            f"Log directory {first} is already formatted. Use --ignore-formatted to ignore this "
            f"directory and format the others."
        )
    out = FormatResult()
    for d in ens.offline:
        out.messages.append(f"I/O error trying to read log directory {d}. Ignoring...")
    if ens.offline and not ens.empty and not ens.props:
        raise ConfigError("No available log directories to format.")
    if not ens.empty:
        out.messages.append("All of the log directories are already formatted.")
        return out
    taken = {m.directory_id for m in ens.props.values() if m.directory_id is not None}
    real_metadata_dir = os.path.realpath(metadata_dir)
    for d in ens.empty:
        kind = "metadata directory" if os.path.realpath(d) == real_metadata_dir else "data directory"
        out.messages.append(f"Formatting {kind} {d} with cluster.id {cluster_id} and node.id {node_id}.")
        try:
            d.mkdir(parents=True, exist_ok=True)
            did = _new_directory_id(new_id, taken)
            write_meta_properties(d / META_FILE, MetaProperties(1, cluster_id, node_id, did))
        except OSError as e:
            raise ConfigError(f"Error while writing meta.properties file {d}: {e}") from None
        out.formatted.append(d)
    return out


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
            if entry.name == _METADATA_PARTITION:
                continue  # the metadata log (strom.raft.metadata_log), never a data partition
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
