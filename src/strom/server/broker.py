"""The broker process: owns the logs, the topic registry, coordinators and listeners.

Startup: read ``meta.properties`` in every log dir (or write it), load the topic registry, find
and open (and recover) every partition log in whichever log dir holds it, start the group
coordinator (which replays ``__consumer_offsets``), then listen.

Log dirs (``log.dirs``, :mod:`strom.log.log_dirs`): the first holds the broker-level files;
partitions are spread over the dirs (fewest first); AlterReplicaLogDirs moves them
(:mod:`strom.server.log_dir_mover`). A dir that fails (:meth:`Broker.check_log_dir`, every
``strom.log.dir.check.interval.ms`` and at a device error) is offline until a restart: its
partitions leave ``logs`` for ``offline_partitions`` and answer KAFKA_STORAGE_ERROR.

Shutdown (SIGTERM/SIGINT): stop accepting, close connections, stop coordinators, flush
and close every log cleanly so the next start skips recovery.

Creating partitions (CreateTopics, CreatePartitions: :meth:`Broker.create_topic_async`,
:meth:`Broker.add_partitions_async`) is file-system work, about a millisecond per partition:
it runs in a worker thread so other clients are served meanwhile, and is atomic. A topic being
created is invisible (metadata, produce and fetch do not know it) but its name is taken (a
second creation gets TOPIC_ALREADY_EXISTS); it is published in the registry and ``logs`` only
once every partition exists. A creation that fails midway (ENOSPC, EMFILE ...) deletes what it
made and answers KAFKA_STORAGE_ERROR; a partition directory the registry does not know is the
leftover of a creation interrupted by a crash, and is removed before the partition is made
again. ``strom.broker.max.partitions`` caps the partitions of the broker (POLICY_VIOLATION).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import shutil
import signal
import threading
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..clock import Clock, RealClock
from ..config import BrokerConfig, ConfigError, LogConfig
from ..coordinator.storage import StoredEntry
from ..durable_file import fsync_dir, replace_file
from ..log.errors import KafkaStorageError, LogError
from ..log.file_cache import FILE_CACHE, default_capacity
from ..log.log_dirs import META_FILE, discover, load_meta, next_log_dirs, parse_partition_dir
from ..log.partition_log import PartitionLog
from ..metadata.configs import (
    ConfigResourceError,
    DynamicBrokerConfigs,
    apply_dynamic_broker_configs,
    normalize_topic_value,
)
from ..metadata.group_configs import GroupConfigStore, group_effective
from ..metadata.topics import INTERNAL_TOPICS, TopicError, TopicInfo, TopicRegistry, validate_topic_name
from ..protocol.errors import ErrorCode, KafkaError
from ..protocol.framing import RequestMemoryPool
from ..protocol.records import (
    CONTROL_COMMIT,
    build_batch,
    build_control_batch,
    control_type,
    decode_batch_records,
    iter_batches,
)
from ..rate_limited_log import RateLimitedLog
from ..security.sasl import SaslState
from .log_dir_mover import LogDirMover, remove_tree
from .purgatory import FetchPurgatory

if TYPE_CHECKING:
    from .listener import Listener
    from .network import KafkaProtocol

log = logging.getLogger("strom.broker")

OFFSETS_TOPIC = "__consumer_offsets"
# errors of the device under a log dir: the dir goes offline (not ENOSPC, EMFILE: see check_log_dir)
_DEVICE_ERRNOS = frozenset({errno.EIO, errno.EROFS, errno.ENODEV, errno.ENXIO})
# what the periodic check takes for a failed dir: the above, or the dir gone or unreadable
_DIR_FAILURE_ERRNOS = _DEVICE_ERRNOS | {errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.ESTALE}
TXN_TOPIC = "__transaction_state"
SHARE_STATE_TOPIC = "__share_group_state"


class ProducerIdManager:
    """Hands out producer ids; blocks of ids are reserved on disk before use, so a restart never
    hands out an id twice."""

    BLOCK = 1000

    def __init__(self, path: Path, storage_log: RateLimitedLog | None = None) -> None:
        self.path = path
        self.storage_log = storage_log
        self._next = 0
        self._limit = 0
        if path.exists():
            self._next = self._limit = int(json.loads(path.read_text())["next_block"])

    def allocate(self) -> int:
        if self._next >= self._limit:
            new_limit = self._next + self.BLOCK
            try:
                replace_file(self.path, json.dumps({"next_block": new_limit}).encode())
            except OSError as e:
                if self.storage_log is not None:
                    self.storage_log.failed("reserving producer ids in", str(self.path), e,
                                            "answering COORDINATOR_LOAD_IN_PROGRESS (clients retry)")
                raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "cannot reserve producer ids") from e
            if self.storage_log is not None:
                self.storage_log.ok("reserving producer ids in", str(self.path))
            self._limit = new_limit
        pid = self._next
        self._next += 1
        return pid


class InternalTopicStorage:
    """Key/value record storage of a coordinator over an internal compacted topic
    (``__consumer_offsets``, ``__transaction_state``), on the real partition logs."""

    def __init__(self, broker: Broker, topic: str = OFFSETS_TOPIC) -> None:
        self.broker = broker
        self.topic = topic

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        now = self.broker.clock.time_ms()
        batch = build_batch([(k, v, [], now) for k, v in records])
        self.broker.append(self.topic, partition, batch, flush=True)

    async def append_txn(
        self, partition: int, records: list[tuple[bytes, bytes | None]], producer_id: int, producer_epoch: int
    ) -> None:
        now = self.broker.clock.time_ms()
        batch = build_batch(
            [(k, v, [], now) for k, v in records],
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            transactional=True,
        )
        self.broker.append(self.topic, partition, batch, flush=True, from_coordinator=True)

    def read_entries(self, partition: int) -> Iterator[StoredEntry]:
        """Every record from the log start, with transactional records and markers marked."""
        plog = self.broker.logs.get((self.topic, partition))
        if plog is None:
            return
        offset = plog.log_start_offset
        while offset < plog.log_end_offset:
            data = plog.read_bytes(offset, 1 << 20, max_offset=plog.log_end_offset)
            if not data:
                break
            for pos, h in iter_batches(data):
                if h.is_control:
                    if h.records_count:  # (the cleaner empties a marker it keeps for its epoch)
                        commit = control_type(data, pos, h) == CONTROL_COMMIT
                        yield StoredEntry(None, None, h.producer_id, True, commit)
                else:
                    for rec in decode_batch_records(data, pos, h):
                        if rec.offset >= offset and rec.key is not None:
                            yield StoredEntry(rec.key, rec.value, h.producer_id, h.is_transactional)
                offset = h.next_offset

    def read_all(self, partition: int) -> Iterable[tuple[bytes, bytes | None]]:
        """Non-transactional records only (what the transaction coordinator's topic holds)."""
        for e in self.read_entries(partition):
            if e.key is not None and not e.transactional:
                yield e.key, e.value


class BrokerLogView:
    """The data partitions as the share coordinator sees them (by topic id)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def _plog(self, topic_id: uuid.UUID, partition: int) -> PartitionLog:
        info = self.broker.topics.by_id.get(topic_id)
        if info is None:
            raise KeyError(topic_id)
        return self.broker.logs[(info.name, partition)]

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        info = self.broker.topics.by_id.get(topic_id)
        return info.name if info is not None else None

    def partitions(self, topic_id: uuid.UUID) -> int | None:
        info = self.broker.topics.by_id.get(topic_id)
        return info.partitions if info is not None else None

    def log_start_offset(self, topic_id: uuid.UUID, partition: int) -> int:
        return self._plog(topic_id, partition).log_start_offset

    def initial_offset(self, topic_id: uuid.UUID, partition: int, strategy: str) -> int:
        """Kafka's share.auto.offset.reset: earliest, latest or by_duration:<ISO-8601>."""
        plog = self._plog(topic_id, partition)
        low = strategy.lower()
        if low == "earliest":
            return plog.log_start_offset
        if low.startswith("by_duration:"):
            ms = _iso_duration_ms(strategy.split(":", 1)[1])
            found = plog.offset_for_timestamp(self.broker.clock.time_ms() - ms)
            return found[0] if found is not None else plog.high_watermark
        return plog.high_watermark


def _iso_duration_ms(text: str) -> int:
    import re

    m = re.match(
        r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$", text.strip(), re.IGNORECASE
    )
    if m is None:
        return 0
    d, h, mi, sec = (float(x) if x else 0.0 for x in m.groups())
    return int((((d * 24 + h) * 60 + mi) * 60 + sec) * 1000)


class Broker:
    def __init__(self, config: BrokerConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock: Clock = clock or RealClock()
        self.node_id = config.node_id
        self.advertised = config.advertised()
        # log.dirs: the first holds the broker-level files (topic registry, producer id blocks,
        # SCRAM credentials, dynamic configs, cleaner checkpoint): what Kafka keeps in its
        # metadata log, which by default (metadata.log.dir unset) is in the first log dir too
        self.log_dirs = config.log_dirs
        self.log_dir = self.log_dirs[0]
        # disk faults (ENOSPC, EIO): one line per operation and partition or file per minute
        self.storage_log = RateLimitedLog(logging.getLogger("strom.storage"), self.clock)
        meta = load_meta(self.log_dirs, self.node_id, str(config["cluster.id"]))
        self.cluster_id = meta.cluster_id
        self.directory_ids: dict[Path, uuid.UUID] = meta.directory_ids
        # failed log dirs (Kafka's offline dirs) -> why; their partitions are offline until restart
        self.offline_dirs: dict[Path, str] = dict(meta.offline)
        # partitions of the registry that are on a failed dir (None: not found, maybe there)
        self.offline_partitions: dict[tuple[str, int], Path | None] = {}
        # AlterReplicaLogDirs for a partition not created yet (Kafka's preferred log dir)
        self.preferred_dirs: dict[tuple[str, int], Path] = {}
        self.mover = LogDirMover(self)
        self.fatal = asyncio.Event()  # the first log dir failed: the broker must stop
        self.topics = TopicRegistry(self.log_dir)
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        self.purgatory = FetchPurgatory()
        self.producer_ids = ProducerIdManager(self.log_dir / "strom-producer-ids.json", self.storage_log)
        self.connections: set[KafkaProtocol] = set()
        self.servers: list[Listener] = []
        self.request_pool = RequestMemoryPool(config["queued.max.request.bytes"])
        self.native_sendfile = False
        self.group_coordinator: Any = None
        self.txn_coordinator: Any = None
        self.share_coordinator: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        self._creating: dict[str, int] = {}  # topics being created or grown -> partitions being made
        self._creation_abort = threading.Event()  # set by stop(): creation workers give up
        self._grow_lock = asyncio.Lock()  # one CreatePartitions at a time
        # Record-by-record validation of produced batches (compressed, or for a compacted topic)
        # runs here, off the event loop (Kafka does it on its num.io.threads request handlers).
        # Each walk holds a few MB at most (strom.protocol.batch_validation), so the pool's size
        # bounds that memory; more threads than cores would only contend for the GIL.
        self.validation_executor = ThreadPoolExecutor(
            max_workers=max(1, min(config["num.io.threads"], os.cpu_count() or 1, 4)),
            thread_name_prefix="strom-validate",
        )
        # per partition, the completion of the last produce append waiting for its validation:
        # appends to a partition happen in the order the requests got here (see handlers.produce)
        self.append_chains: dict[tuple[str, int], asyncio.Future[None]] = {}
        # config and security state, in the first log dir: dynamic broker configs (applied to
        # config.values at once), group configs, SASL settings and SCRAM credentials
        self.dynamic_configs = DynamicBrokerConfigs.load(self.log_dir, self.node_id)
        apply_dynamic_broker_configs(self)
        self.group_configs = GroupConfigStore.open(self.log_dir)
        self.sasl = SaslState(config.values, self.log_dir)

    # ------------------------------------------------------------------ lifecycle
    # ------------------------------------------------------------------ log dirs
    def online_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if d not in self.offline_dirs]

    def dir_partition_counts(self) -> dict[Path, int]:
        """Partitions (current and future logs) per log dir, for placement."""
        counts = dict.fromkeys(self.log_dirs, 0)
        for plog in list(self.logs.values()):
            d = plog.directory.parent
            counts[d] = counts.get(d, 0) + 1
        for mv in list(self.mover.moves.values()):
            counts[mv.dest] = counts.get(mv.dest, 0) + 1
        return counts

    def partition_error(self, topic: str, partition: int) -> int:
        """The error for a partition without a log: KAFKA_STORAGE_ERROR if its dir failed."""
        if (topic, partition) in self.offline_partitions:
            return ErrorCode.KAFKA_STORAGE_ERROR
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    def check_log_dir(self, d: Path) -> bool:
        """Is the log dir ``d`` still usable? Gone, unreadable or read-only takes it offline
        (:meth:`mark_log_dir_offline`). A full disk is not a failure here: appends answer
        KAFKA_STORAGE_ERROR and succeed again once space is freed (Kafka instead takes the
        dir offline at ENOSPC too)."""
        if d in self.offline_dirs:
            return False
        try:
            if not os.path.isdir(d):
                raise FileNotFoundError(errno.ENOENT, "log dir is gone", str(d))
            os.listdir(d)
            with contextlib.suppress(FileNotFoundError):  # removed by hand: rewritten at start
                (d / META_FILE).read_bytes()
            if os.statvfs(d).f_flag & os.ST_RDONLY:
                raise OSError(errno.EROFS, "read-only file system", str(d))
        except OSError as e:
            if e.errno not in _DIR_FAILURE_ERRNOS:  # out of descriptors or memory: not the disk
                return True
            self.mark_log_dir_offline(d, f"{type(e).__name__}: {e}")
            return False
        return True

    def note_storage_error(self, plog: PartitionLog, exc: BaseException) -> None:
        """An I/O error on ``plog``: an error of the device (EIO, EROFS ...) takes its dir
        offline at once, as Kafka's LogDirFailureChannel does for any IOException; for the
        others (a full disk, out of descriptors) the dir is only checked."""
        d = plog.directory.parent
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, OSError):
            cause = cause.__cause__
        if isinstance(cause, OSError) and cause.errno in _DEVICE_ERRNOS:
            self.mark_log_dir_offline(d, f"{type(cause).__name__}: {cause}")
        else:
            self.check_log_dir(d)

    def mark_log_dir_offline(self, d: Path, reason: str) -> None:
        """Kafka's ``LogDirFailureChannel``/``handleLogDirFailure``: the dir's partitions go
        offline (KAFKA_STORAGE_ERROR for them), moves into it stop, every other dir keeps
        serving. The first dir holds the broker's metadata: its failure stops the broker, as
        Kafka halts when its metadata log dir fails."""
        if d in self.offline_dirs:
            return
        self.offline_dirs[d] = reason
        log.error("log dir %s failed (%s): its partitions are offline until a restart", d, reason)
        self.mover.cancel_into(d)
        for tp, plog in list(self.logs.items()):
            if plog.directory.parent != d:
                continue
            del self.logs[tp]
            self.mover.cancel(tp)
            with contextlib.suppress(Exception):
                plog.close_without_flush()
            self.offline_partitions[tp] = d
            self.purgatory.notify(tp)
        if d == self.log_dir:
            log.critical("the first log dir %s holds the broker's metadata: stopping the broker", d)
            self.fatal.set()

    async def _log_dir_checker(self) -> None:
        interval = max(10, int(self.config["strom.log.dir.check.interval.ms"])) / 1000
        while True:
            await asyncio.sleep(interval)
            for d in self.online_dirs():
                self.check_log_dir(d)

    def _load_partitions(self) -> None:
        """Find every partition of the registry in the online dirs (see
        :mod:`strom.log.log_dirs`), finish swaps a crash interrupted, open the logs."""
        online = self.online_dirs()
        found = discover(online)
        leftovers = found.deleted
        doomed_tps = {(p[0], p[1]) for p in map(parse_partition_dir, (x.name for x in leftovers)) if p}
        resume: list[tuple[str, int, Path]] = []
        for tp, path in sorted(found.future.items()):
            if tp in found.current:
                resume.append((tp[0], tp[1], path))
            elif self.topics.get(tp[0]) is not None and tp not in doomed_tps and self.offline_dirs:
                # the current log may be on the failed dir: keep the future log as it is
                self.offline_partitions[tp] = None
            elif self.topics.get(tp[0]) is not None:
                # the swap's second rename is missing (the first renamed the current log to
                # -delete): the future log was complete; it becomes the current log. Without
                # the -delete dir (the current log lost by hand) it is the best copy left
                final = path.parent / f"{tp[0]}-{tp[1]}"
                log.info("finishing the move of %s-%d into %s (interrupted%s)", tp[0], tp[1], path.parent,
                         " after the old copy was set aside" if tp in doomed_tps else ", no current log")
                os.rename(path, final)
                fsync_dir(path.parent)
                found.current[tp] = path.parent
            else:
                leftovers.append(path)
        for info in list(self.topics.topics.values()):
            for p in range(info.partitions):
                tp = (info.name, p)
                d = found.current.get(tp)
                if d is None:
                    if self.offline_dirs:  # it may be on the failed dir: do not make it empty
                        self.offline_partitions[tp] = None
                        continue
                    d = next_log_dirs(online, self.dir_partition_counts())[0]
                if d in self.offline_dirs:
                    self.offline_partitions[tp] = d
                    continue
                try:
                    self._open_partition(info, p, d)
                except KafkaStorageError as e:
                    if d == self.log_dir:
                        raise ConfigError(f"cannot open {info.name}-{p} in the first log dir: {e}") from e
                    self.mark_log_dir_offline(d, str(e))
        for topic, p, path in resume:
            if (topic, p) in self.logs and path.parent not in self.offline_dirs:
                self.mover.resume(topic, p, path)
        if leftovers:
            asyncio.get_running_loop().run_in_executor(None, _remove_trees, leftovers)

    def log_config(self, info: TopicInfo) -> LogConfig:
        defaults = self.config.topic_defaults()
        overrides: dict[str, Any] = dict(info.configs)
        if info.name == OFFSETS_TOPIC:
            overrides.setdefault("cleanup.policy", "compact")
            overrides.setdefault("segment.bytes", str(self.config["offsets.topic.segment.bytes"]))
        return LogConfig.from_topic_configs(defaults, overrides)

    def refresh_log_configs(self, topic: str | None = None) -> None:
        """Push the current effective log config into open partition logs (all, or one
        topic's): after a dynamic config change."""
        infos = [self.topics.get(topic)] if topic is not None else list(self.topics.topics.values())
        for info in infos:
            if info is None:
                continue
            lc = self.log_config(info)
            for p in range(info.partitions):
                plog = self.logs.get((info.name, p))
                if plog is not None:
                    plog.update_config(lc)

    def group_config(self, group: str) -> dict[str, str]:
        """The effective group configs of ``group`` (what its coordinator uses)."""
        return group_effective(self.config, self.group_configs, group)

    def _open_partition(self, info: TopicInfo, partition: int, log_dir: Path) -> PartitionLog:
        d = log_dir / f"{info.name}-{partition}"
        plog = PartitionLog.open(d, info.name, partition, self.log_config(info), self.clock)
        plog.update_high_watermark(plog.log_end_offset)
        self.logs[(info.name, partition)] = plog
        return plog

    def _ensure_internal_topic(self, name: str, partitions_key: str) -> None:
        """Create a compacted internal topic on first start (partition count from config)."""
        if name not in self.topics.topics:
            compact = {"cleanup.policy": "compact"}
            self.create_topic(name, self.config[partitions_key], compact)

    async def start(self) -> None:
        from .handlers import load_all
        from .log_tasks import start_log_tasks
        from .network import start_listeners

        load_all()
        if any(proto.startswith("SASL_") for _n, proto, _h, _p in self.config.listener_protocols()):
            try:  # a corrupt SCRAM credential store fails the start, not the first login
                self.sasl.credentials  # noqa: B018 (opens the store)
            except ValueError as e:
                raise ConfigError(str(e)) from None
        max_open = self.config["strom.log.max.open.files"]
        FILE_CACHE.resize(max_open if max_open > 0 else default_capacity())
        loop = asyncio.get_running_loop()
        self.native_sendfile = (
            bool(self.config["strom.fetch.sendfile"]) and "uvloop" not in type(loop).__module__
        )
        self._load_partitions()
        self._ensure_internal_topic(OFFSETS_TOPIC, "offsets.topic.num.partitions")
        from ..coordinator.group_coordinator import GroupCoordinator
        from ..coordinator.transaction_coordinator import TransactionCoordinator

        self.group_coordinator = GroupCoordinator(
            config=self.config, clock=self.clock, storage=InternalTopicStorage(self, OFFSETS_TOPIC)
        )
        self.group_coordinator.group_configs = self.group_config
        # consumer-group records name topics by id: let the coordinator resolve every known one
        for info in self.topics.topics.values():
            self.group_coordinator.topic_names[info.topic_id] = info.name
            self.group_coordinator.topic_ids[info.name] = info.topic_id
        await self.group_coordinator.start()
        self._ensure_internal_topic(TXN_TOPIC, "transaction.state.log.num.partitions")
        self.txn_coordinator = TransactionCoordinator(
            clock=self.clock,
            storage=InternalTopicStorage(self, TXN_TOPIC),
            markers=self,
            allocate_producer_id=self.producer_ids.allocate,
            num_partitions=self.topics.topics[TXN_TOPIC].partitions,
            max_timeout_ms=self.config["transaction.max.timeout.ms"],
            id_expiration_ms=self.config["transactional.id.expiration.ms"],
            abort_check_interval_ms=self.config[
                "transaction.abort.timed.out.transaction.cleanup.interval.ms"
            ],
        )
        await self.txn_coordinator.start()
        await self._start_share_coordinator()
        self.servers = await start_listeners(self)
        self._tasks.append(loop.create_task(self._flusher()))
        self._tasks.append(loop.create_task(self._log_dir_checker()))
        self._tasks.extend(start_log_tasks(self))
        log.info(
            "strom broker %d started (cluster %s), log dirs %s%s, %d partitions",
            self.node_id,
            self.cluster_id,
            ",".join(str(d) for d in self.log_dirs),
            f" (offline: {','.join(str(d) for d in self.offline_dirs)})" if self.offline_dirs else "",
            len(self.logs),
        )

    def on_connection_closed(self, connection_id: str) -> None:
        """A client connection closed: its share sessions close and release their records."""
        if self.share_coordinator is not None:
            self.share_coordinator.connection_closed(connection_id)

    async def _start_share_coordinator(self) -> None:
        """Share groups (KIP-932): the share coordinator over ``__share_group_state``."""
        from ..coordinator.classic import ClassicGroup, GroupState
        from ..coordinator.share_coordinator import ShareConfig, ShareCoordinator

        share_cfg = ShareConfig.from_broker(self.config)
        self._ensure_internal_topic(SHARE_STATE_TOPIC, "share.coordinator.state.topic.num.partitions")
        share_cfg.num_partitions = self.topics.topics[SHARE_STATE_TOPIC].partitions

        def notify(topic_id: uuid.UUID, partition: int) -> None:
            info = self.topics.by_id.get(topic_id)
            if info is not None:
                self.purgatory.notify((info.name, partition))

        def other_group_exists(group_id: str) -> bool:
            g = self.group_coordinator.groups.get(group_id) if self.group_coordinator else None
            if g is None:
                return False
            return not (isinstance(g, ClassicGroup) and g.state == GroupState.DEAD)

        self.share_coordinator = ShareCoordinator(
            InternalTopicStorage(self, SHARE_STATE_TOPIC),
            BrokerLogView(self),
            config=share_cfg,
            clock=self.clock,
            group_config=self.group_config,
            notify=notify,
        )
        self.share_coordinator.other_group_exists = other_group_exists
        await self.share_coordinator.start()

    async def _flusher(self) -> None:
        interval = 1.0
        fms = self.config["log.flush.interval.ms"]
        if 0 < fms < 1000:
            interval = fms / 1000
        while True:
            await asyncio.sleep(interval)
            storage_log = self.storage_log
            for plog in list(self.logs.values()):
                try:
                    plog.flush_if_due()
                except (KafkaStorageError, OSError) as e:
                    # before, a KafkaStorageError ended this task silently: no flush ever again
                    storage_log.failed("flush of", f"{plog.topic}-{plog.partition}", e,
                                       f"the data stays unflushed; retrying every {interval:g} s")
                    continue
                if storage_log.failing:
                    storage_log.ok("flush of", f"{plog.topic}-{plog.partition}")

    async def stop(self) -> None:
        self._creation_abort.set()
        for srv in self.servers:
            srv.close()
        for conn in list(self.connections):
            conn.close()
        for t in self._tasks:
            t.cancel()
        for coord in (self.share_coordinator, self.txn_coordinator, self.group_coordinator):
            if coord is not None:
                with contextlib.suppress(Exception):
                    await coord.stop()
        # every log unsynced, one sync, the clean-shutdown markers, one more sync: with ten
        # thousand partitions, ~8 fsyncs per log would take minutes
        closed: list[PartitionLog] = []
        self.validation_executor.shutdown(wait=False, cancel_futures=True)
        self.mover.close()
        for plog in self.logs.values():
            try:
                plog.close(sync=False)
                closed.append(plog)
            except Exception:
                log.exception("closing %s-%d failed", plog.topic, plog.partition)
        if closed:
            os.sync()
            for plog in closed:
                try:
                    plog.mark_clean_shutdown()
                except Exception:
                    log.exception("closing %s-%d failed", plog.topic, plog.partition)
            os.sync()
        log.info("strom broker %d stopped cleanly", self.node_id)

    # ------------------------------------------------------------------ topics
    def _check_new_topic(self, name: str, partitions: int, configs: dict[str, str] | None) -> dict[str, str]:
        """Validate a creation; returns the normalized configs. Raises TopicError."""
        validate_topic_name(name)
        if name in self.topics.topics or name in self._creating:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if partitions < 1:
            raise TopicError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        try:
            # the same names, types and ranges AlterConfigs enforces (Kafka's messages)
            configs = {k: normalize_topic_value(k, v) for k, v in (configs or {}).items()}
            LogConfig.from_topic_configs(self.config.topic_defaults(), configs)
        except ConfigResourceError as e:
            raise TopicError(e.code, str(e)) from e
        except ConfigError as e:
            raise TopicError(ErrorCode.INVALID_CONFIG, str(e)) from e
        self._check_partition_cap(partitions)
        return configs

    def is_being_created(self, name: str) -> bool:
        """A CreateTopics of ``name`` is in progress (the topic is not visible yet)."""
        return name in self._creating and name not in self.topics.topics

    def _check_partition_cap(self, more: int) -> None:
        cap = self.config["strom.broker.max.partitions"]
        have = len(self.logs) + sum(self._creating.values())
        if cap >= 0 and have + more > cap:
            raise TopicError(
                ErrorCode.POLICY_VIOLATION,
                f"Creating {more} partitions would exceed the broker's limit of {cap} partitions "
                f"(strom.broker.max.partitions); {have} exist.",
            )

    def _make_partition_logs(self, info: TopicInfo, partitions: range, abort: threading.Event | None = None
                             ) -> list[PartitionLog]:
        """Create the logs of ``partitions`` (in a worker thread); all or nothing."""
        made: list[PartitionLog] = []
        config = self.log_config(info)
        online = self.online_dirs()
        if not online:
            raise TopicError(ErrorCode.KAFKA_STORAGE_ERROR, "every log dir is offline")
        counts = self.dir_partition_counts()
        try:
            for p in partitions:
                if self._creation_abort.is_set() or (abort is not None and abort.is_set()):
                    raise TopicError(ErrorCode.REQUEST_TIMED_OUT, f"creating '{info.name}' was abandoned")
                for other in online:  # not in the registry: left by a creation a crash interrupted
                    stale = other / f"{info.name}-{p}"
                    if stale.exists():
                        shutil.rmtree(stale)
                pref = self.preferred_dirs.pop((info.name, p), None)
                log_dir = pref if pref in online else next_log_dirs(online, counts)[0]
                counts[log_dir] = counts.get(log_dir, 0) + 1
                plog = PartitionLog.open(log_dir / f"{info.name}-{p}", info.name, p, config, self.clock)
                made.append(plog)
            for used in {plog.directory.parent for plog in made}:
                fsync_dir(used)
        except BaseException as e:
            _delete_logs(made)
            if isinstance(e, OSError | LogError):
                raise TopicError(
                    ErrorCode.KAFKA_STORAGE_ERROR,
                    f"creating partitions of topic '{info.name}' failed: {e}",
                ) from e
            raise
        return made

    def _publish_logs(self, info: TopicInfo, first: int, logs: list[PartitionLog]) -> None:
        for p, plog in enumerate(logs, first):
            plog.update_high_watermark(plog.log_end_offset)
            self.logs[(info.name, p)] = plog

    async def _in_worker(self, fn: Any, *args: Any) -> list[PartitionLog]:
        """Run ``fn(*args, abort)`` in a thread. If the caller is cancelled (its client left),
        the worker stops at its next partition, what it made is deleted, and only then does the
        cancellation go on, so the name stays reserved until no thread touches its directories."""
        abort = threading.Event()
        fut = asyncio.get_running_loop().run_in_executor(None, fn, *args, abort)
        try:
            result: list[PartitionLog] = await asyncio.shield(fut)
            return result
        except asyncio.CancelledError:
            abort.set()
            try:
                made: list[PartitionLog] = await fut  # finished before it saw the abort
            except Exception:
                raise asyncio.CancelledError from None  # it stopped and removed its partitions
            await asyncio.to_thread(_delete_logs, made)
            raise

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> TopicInfo:
        """Create a topic on the event loop (the internal topics at start); CreateTopics and
        auto-creation use :meth:`create_topic_async`."""
        configs = self._check_new_topic(name, partitions, configs)
        pending = TopicInfo(name, uuid.UUID(int=0), partitions, configs)
        logs = self._make_partition_logs(pending, range(partitions))
        return self._register_topic(name, partitions, configs, logs)

    async def create_topic_async(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str] | None = None,
        *,
        validate_only: bool = False,
    ) -> TopicInfo:
        """CreateTopics: the partitions are made in a worker thread, then the topic is published
        (see the module docstring). Raises TopicError with Kafka's code."""
        configs = self._check_new_topic(name, partitions, configs)
        if validate_only:
            return TopicInfo(name, uuid.UUID(int=0), partitions, configs)
        self._creating[name] = partitions
        try:
            pending = TopicInfo(name, uuid.UUID(int=0), partitions, configs)
            logs = await self._in_worker(self._make_partition_logs, pending, range(partitions))
            info = self._register_topic(name, partitions, configs, logs)
        except TopicError as e:
            if e.code == ErrorCode.KAFKA_STORAGE_ERROR:
                self.storage_log.failed("creating topic", name, e, "answering KAFKA_STORAGE_ERROR")
            raise
        finally:
            self._creating.pop(name, None)
        self.storage_log.ok("creating topic", name)
        return info

    def _register_topic(self, name: str, partitions: int, configs: dict[str, str], logs: list[PartitionLog]
                        ) -> TopicInfo:
        try:
            info = self.topics.create(name, partitions, configs)
        except BaseException as e:
            _delete_logs(logs)
            if isinstance(e, OSError):
                raise TopicError(ErrorCode.KAFKA_STORAGE_ERROR, f"saving topic '{name}' failed: {e}") from e
            raise
        self._publish_logs(info, 0, logs)
        log.info("created topic %s with %d partitions", name, partitions)
        return info

    async def add_partitions_async(self, name: str, count: int) -> None:
        """CreatePartitions (validated by the caller): make partitions ``current..count-1`` in a
        worker thread, then publish them with the new count. Raises TopicError."""
        async with self._grow_lock:
            info = self.topics.get(name)
            if info is None:
                raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
            current = info.partitions
            if count <= current:
                raise TopicError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partitions.")
            self._check_partition_cap(count - current)
            self._creating[name] = count - current
            try:
                logs = await self._in_worker(self._make_partition_logs, info, range(current, count))
            finally:
                self._creating.pop(name, None)
            if self.topics.get(name) is not info:  # deleted meanwhile
                _delete_logs(logs)
                raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' was deleted.")
            try:
                self.topics.set_partitions(name, count)
            except OSError as e:
                _delete_logs(logs)
                raise TopicError(ErrorCode.KAFKA_STORAGE_ERROR, f"saving topic '{name}' failed: {e}") from e
            self._publish_logs(info, current, logs)

    def delete_topic(self, name: str) -> TopicInfo:
        info = self.topics.get(name)
        if info is None:
            raise TopicError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
            )
        if info.internal:
            raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot delete internal topic {name}")
        self.topics.delete(name)
        for p in range(info.partitions):
            self.mover.cancel((name, p))
            self.offline_partitions.pop((name, p), None)
            plog = self.logs.pop((name, p), None)
            if plog is not None:
                plog.delete()
        if self.share_coordinator is not None:  # share groups forget the topic's share-partitions
            self.share_coordinator.topic_deleted(info.topic_id)
        log.info("deleted topic %s", name)
        return info

    async def auto_create_async(self, name: str) -> TopicInfo | None:
        """Create a topic on first use when ``auto.create.topics.enable`` (Kafka's behaviour), off
        the event loop like CreateTopics (a Metadata request may name many new topics)."""
        if not self.config["auto.create.topics.enable"] or name in INTERNAL_TOPICS:
            return None
        try:
            return await self.create_topic_async(name, self.config["num.partitions"])
        except TopicError as e:
            if e.code == ErrorCode.TOPIC_ALREADY_EXISTS:
                return self.topics.get(name)
            raise

    def topic_partitions(self, topic: str) -> int | None:
        info = self.topics.get(topic)
        return info.partitions if info else None

    def log_end_offset(self, topic: str, partition: int) -> int:
        plog = self.logs.get((topic, partition))
        return plog.high_watermark if plog else -1

    # ------------------------------------------------------------------ data path
    async def write_markers(
        self, producer_id: int, producer_epoch: int, commit: bool, partitions: Iterable[tuple[str, int]]
    ) -> None:
        """Write a transaction marker (control batch) to each partition, durably; offsets
        partitions also complete the group coordinator's pending transactional offsets."""
        batch = build_control_batch(producer_id, producer_epoch, commit, 0, self.clock.time_ms())
        partitions = list(partitions)
        offline = [f"{t}-{p}" for t, p in partitions if (t, p) in self.offline_partitions]
        if offline:  # the markers wait for the partition (its dir failed), as Kafka's do for a leader
            raise KafkaStorageError(f"transaction markers cannot be written: {', '.join(offline)} offline")
        for topic, partition in partitions:
            if (topic, partition) not in self.logs:
                continue  # deleted since it joined the transaction
            self.append(topic, partition, batch, flush=True, from_coordinator=True)
            if topic == OFFSETS_TOPIC:
                await self.group_coordinator.complete_txn(partition, producer_id, commit)

    def append(
        self,
        topic: str,
        partition: int,
        records: bytes | bytearray | memoryview,
        leader_epoch: int = 0,
        flush: bool = False,
        from_coordinator: bool = False,
        prevalidated: bool = False,
    ) -> Any:
        plog = self.logs[(topic, partition)]
        try:
            info = plog.append_as_leader(
                records, leader_epoch, from_coordinator=from_coordinator, prevalidated=prevalidated
            )
        except KafkaStorageError as e:
            self.note_storage_error(plog, e)
            raise
        if flush:
            plog.flush()
        plog.update_high_watermark(plog.log_end_offset)
        self.purgatory.notify((topic, partition))
        return info


def _delete_logs(logs: list[PartitionLog]) -> None:
    """Remove partitions that were never published (best effort)."""
    for plog in logs:
        try:
            plog.delete()
        except Exception as e:
            log.warning("removing unpublished partition %s-%d failed: %s", plog.topic, plog.partition, e)


def _remove_trees(paths: list[Path]) -> None:
    """Delete leftover directories (``-delete``, abandoned ``-future``) in a worker thread."""
    for path in paths:
        remove_tree(path)


def _install_signals(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)


async def serve(config: BrokerConfig) -> None:
    try:
        broker = Broker(config)
    except (OSError, ConfigError) as e:  # log dirs that disagree on the cluster, unusable ...
        log.error("cannot start broker: %s", e)
        raise SystemExit(1) from None
    stop = asyncio.Event()
    _install_signals(asyncio.get_running_loop(), stop)
    try:
        await broker.start()
    except (OSError, ConfigError) as e:  # ports in use, unreadable TLS key material ...
        log.error("cannot start broker: %s", e)
        await broker.stop()
        raise SystemExit(1) from None
    try:
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(broker.fatal.wait())]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()
    finally:
        await broker.stop()
    if broker.fatal.is_set():  # the first log dir failed: exit as Kafka halts, with an error
        raise SystemExit(1)


def _raise_open_file_limit() -> None:
    """Lift the soft limit on open files to the hard limit: more sockets fit, and the log file
    cache (``strom.log.max.open.files``, by default half the soft limit) keeps more files open."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = hard if hard != resource.RLIM_INFINITY else 1 << 20
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ImportError, ValueError, OSError):
        pass


def run(config: BrokerConfig) -> None:
    """Run a broker until SIGTERM/SIGINT (the ``strom serve`` entry point)."""
    _raise_open_file_limit()
    logging.basicConfig(
        level=os.environ.get("STROM_LOG_LEVEL", "INFO"),
        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s",
    )
    use_uvloop = os.environ.get("STROM_EVENT_LOOP", "auto")
    if use_uvloop in ("auto", "uvloop") and not config["strom.fetch.sendfile"]:
        try:
            import uvloop

            uvloop.run(serve(config))
            return
        except ImportError:
            pass
    asyncio.run(serve(config))
