"""The broker process, a composition root: it builds the components and wires them together.

* :class:`~strom.server.metadata_cache.MetadataCache` (``metadata_cache``): what handlers know
  of the cluster (topics, partition leadership, brokers): over the topic registry on a single
  node, over the metadata image on the quorum (``ImageMetadataCache``).
* :class:`~strom.server.replica_manager.ReplicaManager` (``replica_manager``): the partition
  logs, appends, reads, offsets, log dirs and their failures, the one answer for a partition
  that cannot be served here.
* the group, transaction and share coordinators, over internal topics of the replica manager;
  the listeners; the producer id blocks.
* topic lifecycle (create, grow, delete), kept here behind a few methods: the registry
  (``topics``) and the partitions' logs change together. With ``strom.metadata.quorum.enable``
  (default true; false keeps the JSON topic registry), and always when
  ``controller.quorum.voters`` names several voters, the node runs on the metadata quorum
  (:mod:`strom.server.kraft`): these methods go through the controller, the registry is kept
  in memory as the broker's view of the metadata image, and an older data dir's registry is
  migrated on the first start of a one-voter node.

Startup: read ``meta.properties`` in every log dir (or write it), load the topic registry, find
and open (and recover) every partition log in whichever log dir holds it, start the group
coordinator (which replays ``__consumer_offsets``), then listen. On the quorum, the controller
listeners serve first and the node waits until it caught up with the metadata log (the order
is in :mod:`strom.server.kraft`).

Log dirs (``log.dirs``, :mod:`strom.log.log_dirs`): the first holds the broker-level files;
partitions are spread over the dirs (fewest first); AlterReplicaLogDirs moves them
(:mod:`strom.server.log_dir_mover`). A dir that fails
(:meth:`ReplicaManager.check_log_dir <strom.server.replica_manager.ReplicaManager.check_log_dir>`,
every ``strom.log.dir.check.interval.ms`` and at a device error) is offline until a restart: its
partitions leave the replica manager's ``logs`` for ``offline_partitions`` and answer
KAFKA_STORAGE_ERROR; a failure of the first dir stops the broker (``fatal``).

Shutdown (SIGTERM/SIGINT): stop accepting, close connections, stop coordinators, flush
and close every log cleanly so the next start skips recovery.

Creating partitions (CreateTopics, CreatePartitions: :meth:`Broker.create_topic_async`,
:meth:`Broker.add_partitions_async`) is file-system work, about a millisecond per partition:
it runs in a worker thread so other clients are served meanwhile, and is atomic. A topic being
created is invisible (metadata, produce and fetch do not know it) but its name is taken (a
second creation gets TOPIC_ALREADY_EXISTS); it is published in the registry and the replica
manager only once every partition exists. A creation that fails midway (ENOSPC, EMFILE ...) deletes what it
made and answers KAFKA_STORAGE_ERROR; a partition directory the registry does not know is the
leftover of a creation interrupted by a crash, and is removed before the partition is made
again. ``strom.broker.max.partitions`` caps the partitions of the broker (POLICY_VIOLATION).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..clock import Clock, RealClock
from ..config import BrokerConfig, ConfigError, LogConfig
from ..coordinator.partition_writer import CoordinatorWriteError
from ..log.errors import KafkaStorageError
from ..log.file_cache import FILE_CACHE, default_capacity
from ..log.log_dirs import load_meta
from ..log.partition_log import AppendInfo, PartitionLog
from ..log.segment import set_page_cache_window
from ..metadata.configs import (
    DYNAMIC_CONFIG_FILE,
    ConfigResourceError,
    DynamicBrokerConfigs,
    apply_dynamic_broker_configs,
    normalize_topic_value,
)
from ..metadata.group_configs import GroupConfigStore, group_effective
from ..metadata.migration import PRODUCER_IDS_FILE
from ..metadata.topics import INTERNAL_TOPICS, TopicError, TopicInfo, TopicRegistry, validate_topic_name
from ..observability.gc_pauses import GcPauseMonitor
from ..observability.loop_lag import LoopLagMonitor, runqueue_wait_clock
from ..observability.metrics import BrokerMetrics
from ..protocol.errors import ErrorCode, KafkaError
from ..protocol.framing import RequestMemoryPool
from ..raft.metadata_log import METADATA_TOPIC
from ..rate_limited_log import RateLimitedLog
from ..scheduler import AsyncioScheduler, Scheduler, TaskHandle
from ..security.authorizer import StandardAuthorizer
from ..security.principal_mapping import SslPrincipalMapper
from ..security.sasl import SaslState
from .client_quotas import ClientQuotaManager, ConnectionRateQuotas, ControllerMutationQuotaManager
from .coordinator_writer import CoordinatorPartitionWriter, InternalTopicStorage
from .fetch_session import FetchSessionCache
from .kraft import QUORUM_ENABLE, BrokerQuorum
from .malloc_tuning import tune_malloc
from .metadata_cache import ImageMetadataCache, RegistryMetadataCache
from .page_cache_releaser import PageCacheReleaser
from .producer_id_manager import LocalProducerIdManager, ProducerIdManager, RPCProducerIdManager
from .replica_manager import ReplicaManager, delete_logs
from .roll_flusher import RollFlusher
from .txn_marker_sender import MarkersNotWritten, TxnMarkerSender

if TYPE_CHECKING:
    from ..observability.http import HttpListener
    from ..raft.manager import RaftManager
    from .listener import Listener
    from .network import KafkaProtocol

log = logging.getLogger("strom.broker")

OFFSETS_TOPIC = "__consumer_offsets"
# how long a transaction marker written here may wait for the ISR (Kafka: request.timeout.ms)
MARKER_REPLICATION_TIMEOUT_MS = 30000
TXN_TOPIC = "__transaction_state"
SHARE_STATE_TOPIC = "__share_group_state"
INTERNAL_TOPIC_PARTITIONS = (
    (OFFSETS_TOPIC, "offsets.topic.num.partitions"),
    (TXN_TOPIC, "transaction.state.log.num.partitions"),
    (SHARE_STATE_TOPIC, "share.coordinator.state.topic.num.partitions"),
)
INTERNAL_TOPIC_REPLICATION = {
    OFFSETS_TOPIC: "offsets.topic.replication.factor",
    TXN_TOPIC: "transaction.state.log.replication.factor",
    SHARE_STATE_TOPIC: "share.coordinator.state.topic.replication.factor",
}


class BrokerLogView:
    """The data partitions as the share coordinator sees them (by topic id)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def _plog(self, topic_id: uuid.UUID, partition: int) -> PartitionLog:
        info = self.broker.metadata_cache.topic_by_id(topic_id)
        if info is None:
            raise KeyError(topic_id)
        return self.broker.replica_manager.logs[(info.name, partition)]

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        info = self.broker.metadata_cache.topic_by_id(topic_id)
        return info.name if info is not None else None

    def partitions(self, topic_id: uuid.UUID) -> int | None:
        info = self.broker.metadata_cache.topic_by_id(topic_id)
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


def _default_listener(config: BrokerConfig) -> str:
    """The listener a client that names none means: the first that is not a controller listener
    (as :meth:`BrokerConfig.advertised`)."""
    controllers = config.kraft().controller_listener_names
    names = [name for name, _host, _port in config.listeners()]
    return next((n for n in names if n not in controllers), names[0])


def _inter_broker_listener(config: BrokerConfig) -> str:
    """Kafka's ``inter.broker.listener.name``, by default the default listener."""
    name = str(config["inter.broker.listener.name"] or "")
    names = {n for n, _host, _port in config.listeners()}
    return name if name in names else _default_listener(config)


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
    def __init__(self, config: BrokerConfig, clock: Clock | None = None, scheduler: Scheduler | None = None,
                 *, threaded_flush: bool = True) -> None:
        self.config = config
        self.clock: Clock = clock or RealClock()
        self.scheduler: Scheduler = scheduler if scheduler is not None else AsyncioScheduler()
        self.node_id = config.node_id
        self.advertised = config.advertised()
        # log.dirs: the first holds the broker-level files (topic registry, producer id blocks,
        # SCRAM credentials, dynamic configs, cleaner checkpoint): what Kafka keeps in its
        # metadata log, which by default (metadata.log.dir unset) is in the first log dir too
        self.log_dirs = config.log_dirs
        self.log_dir = self.log_dirs[0]
        # disk faults (ENOSPC, EIO): one line per operation and partition or file per minute
        self.storage_log = RateLimitedLog(logging.getLogger("strom.storage"), self.clock)
        set_page_cache_window(int(config["strom.log.page.cache.window.bytes"]),
                              int(config["strom.log.page.cache.release.bytes"]))
        # a node of a multi-voter quorum has no other path (the registry is one node's store)
        quorum = bool(config[QUORUM_ENABLE]) or len(config.kraft().voter_ids) > 1
        if not quorum:  # (before anything is written)
            _refuse_metadata_log(config.metadata_log_dir)
        # a node of a multi-node quorum (controller.quorum.voters set) starts only on dirs that
        # `strom storage format` formatted, as in Kafka; the zero set-up node formats its own
        meta = load_meta(
            self.log_dirs,
            self.node_id,
            str(config["cluster.id"]),
            metadata_dir=config.metadata_log_dir,
            require_formatted=bool(config.kraft().voters),
            config_cluster_id=config.explicit.get("cluster.id"),
        )
        self.cluster_id = meta.cluster_id
        self.directory_ids: dict[Path, uuid.UUID] = meta.directory_ids
        self.fatal = asyncio.Event()  # the first log dir failed: the broker must stop
        # on the metadata quorum (strom.metadata.quorum.enable) the metadata log is the store and
        # the registry, in memory, is the broker's view of the published image (server/kraft.py)
        self.topics = TopicRegistry(self.log_dir, persist=not quorum)  # (handlers: metadata_cache)
        # partitions on failed log dirs: the replica manager keeps them, the metadata cache
        # answers leader -1 for them (what a controller learns from log dir failure reports)
        offline_partitions: dict[tuple[str, int], Path | None] = {}
        # on the quorum, leadership and brokers come from the published metadata image
        self.metadata_cache: RegistryMetadataCache | ImageMetadataCache = (
            ImageMetadataCache(
                self.topics, self.node_id, self.cluster_id, _default_listener(config), offline_partitions
            )
            if quorum
            else RegistryMetadataCache(
                self.topics, self.node_id, self.cluster_id, config.advertised, offline_partitions
            )
        )
        self.replica_manager = ReplicaManager(
            node_id=self.node_id,
            config=config,
            clock=self.clock,
            metadata_cache=self.metadata_cache,
            log_dirs=self.log_dirs,
            offline_dirs=dict(meta.offline),
            offline_partitions=offline_partitions,
            log_config=self.log_config,
            storage_log=self.storage_log,
            halt=self.fatal.set,
            scheduler=self.scheduler,
        )
        # the coordinators' appends: durable off the event loop, answered at the HW
        self.coordinator_writer = CoordinatorPartitionWriter(self, threaded=threaded_flush)
        self.replica_manager.coordinator_hooks = self.coordinator_writer
        self.connections: set[KafkaProtocol] = set()
        # strom.observability's counters: kept only when the HTTP listener can show them
        self.metrics: BrokerMetrics | None = (
            BrokerMetrics() if str(config["strom.http.listener"]).strip() else None
        )
        self.http: HttpListener | None = None
        self.roll_flusher: RollFlusher | None = None  # see start()
        self.page_cache_releaser: PageCacheReleaser | None = None  # see start()
        self.loop_lag: LoopLagMonitor | None = None  # started by start() (strom.event.loop.lag.sample.ms)
        self.gc_pauses: GcPauseMonitor | None = None  # with the loop-lag monitor
        self.ready = False  # start() finished: logs recovered, coordinators loaded, listeners up
        self.servers: list[Listener] = []
        self.request_pool = RequestMemoryPool(config["queued.max.request.bytes"])
        # incremental fetch sessions (KIP-227)
        self.fetch_sessions = FetchSessionCache(int(config["max.incremental.fetch.session.cache.slots"]),
                                                self.clock.monotonic_ms)
        self.native_sendfile = False
        self.group_coordinator: Any = None
        self.txn_coordinator: Any = None
        self.share_coordinator: Any = None
        self._timers: list[TaskHandle] = []  # periodic tasks on the scheduler (cancelled by stop())
        self._stopping = asyncio.Event()
        self._creating: dict[str, int] = {}  # topics being created or grown -> partitions being made
        self._grow_lock = asyncio.Lock()  # one CreatePartitions at a time
        # config and security state, in the first log dir: dynamic broker configs (applied to
        # config.values at once), group configs, SASL settings and SCRAM credentials
        # (on the metadata quorum both are in the metadata log: filled from the published images)
        if quorum:
            self.dynamic_configs = DynamicBrokerConfigs(self.log_dir / DYNAMIC_CONFIG_FILE, self.node_id)
            self.group_configs = GroupConfigStore.in_memory()
        else:
            self.dynamic_configs = DynamicBrokerConfigs.load(self.log_dir, self.node_id)
            self.group_configs = GroupConfigStore.open(self.log_dir)
        apply_dynamic_broker_configs(self)
        self.sasl = SaslState(config.values, self.log_dir, from_image=quorum)  # (quorum: the image's SCRAM)
        # authorizer.class.name set: Kafka's StandardAuthorizer over the metadata image's ACLs
        # (loaded by the metadata publisher); None: no authorization, everything allowed
        self.authorizer: StandardAuthorizer | None = StandardAuthorizer.from_config(config.values)
        self.principal_mapper = SslPrincipalMapper(config["ssl.principal.mapping.rules"])
        # bandwidth quotas (the image's client quotas, set by the metadata publisher)
        windows, window_ms = config["quota.window.num"], config["quota.window.size.seconds"] * 1000
        self.produce_quotas = ClientQuotaManager("producer_byte_rate", windows, window_ms)
        self.fetch_quotas = ClientQuotaManager("consumer_byte_rate", windows, window_ms)
        self.client_quota_entities: Mapping[Any, Mapping[str, float]] = {}
        # request_percentage (KIP-124), controller_mutation_rate (KIP-599), connection creation
        # rates (KIP-612); request_quotas_active (set by the metadata publisher) keeps the
        # request-time accounting off the path of a broker with no request_percentage quota
        self.request_quotas = ClientQuotaManager("request_percentage", windows, window_ms)
        self.request_quotas_active = False
        self.mutation_quotas = ControllerMutationQuotaManager(windows, window_ms)
        self.connection_quotas = ConnectionRateQuotas(windows, window_ms)
        self.raft_manager: RaftManager | None = None  # set by the quorum (handlers/raft.py)
        self.quorum: BrokerQuorum | None = BrokerQuorum(self) if quorum else None
        # producer id blocks: from the controller on the quorum, else reserved in a local file
        q = self.quorum
        self.producer_ids: ProducerIdManager = (
            LocalProducerIdManager(self.log_dir / PRODUCER_IDS_FILE, self.storage_log)
            if q is None
            else RPCProducerIdManager(self.node_id, self.clock, lambda: q.broker_epoch, q.channel)
        )
        # transaction markers for partitions other brokers lead (a cluster)
        self.inter_broker_listener = _inter_broker_listener(config)
        self.marker_sender = TxnMarkerSender(self, self.inter_broker_listener)
        if self.quorum is not None:
            self.topics.on_set_configs = self._alter_topic_configs_on_quorum

    def connection_throttle(self, listener: str, ip: str) -> tuple[int, bool]:
        """KIP-612 for a new connection: ``(delay ms, close)``. Over its IP's
        ``connection_creation_rate`` it is closed after the delay (Kafka); over
        ``max.connection.creation.rate`` (broker-wide or its listener's) it is served after it."""
        q, now = self.connection_quotas, self.clock.monotonic_ms()
        delay = q.record_ip(self.client_quota_entities, ip, now)
        if delay > 0:
            return delay, True
        if listener == self.inter_broker_listener:
            return 0, False
        limit = self.config["max.connection.creation.rate"]
        if limit < 2147483647:
            delay = q.record_listener("", float(limit), now)
        per_listener = self.config.get(f"listener.name.{listener.lower()}.max.connection.creation.rate")
        if per_listener not in (None, ""):
            delay = max(delay, q.record_listener(listener, float(per_listener), now))
        return delay, False

    # ------------------------------------------------------------------ compatibility (tests)
    @property
    def logs(self) -> dict[tuple[str, int], PartitionLog]:
        """The replica manager's partition logs (tests read them here)."""
        return self.replica_manager.logs

    def append(
        self,
        topic: str,
        partition: int,
        records: bytes | bytearray | memoryview,
        flush: bool = False,
        from_coordinator: bool = False,
    ) -> AppendInfo:
        """One partition's append (tests): :meth:`ReplicaManager.append_to_leader`."""
        return self.replica_manager.append_to_leader(
            topic, partition, records, flush=flush, from_coordinator=from_coordinator
        )

    # ------------------------------------------------------------------ lifecycle

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
                plog = self.replica_manager.get_log(info.name, p)
                if plog is not None:
                    plog.update_config(lc)

    def group_config(self, group: str) -> dict[str, str]:
        """The effective group configs of ``group`` (what its coordinator uses)."""
        return group_effective(self.config, self.group_configs, group)

    def _ensure_internal_topic(self, name: str, partitions_key: str) -> None:
        """Create a compacted internal topic on first start (partition count from config)."""
        if name not in self.topics.topics:
            compact = {"cleanup.policy": "compact"}
            self.create_topic(name, self.config[partitions_key], compact)

    def _preload_codecs(self) -> None:
        """Every accepted version's decoder, bounds check and encoder, before anything is served:
        loaded lazily, the first request of each version held the event loop 2-20 ms (README,
        "Event-loop stalls"). Runs before the quorum starts, so no Raft timer waits behind it."""
        from ..protocol.api_versions import KAFKA_API_RANGES
        from ..protocol.codec import preload
        from .handlers import REGISTRY

        t0 = time.perf_counter()
        n = preload((k, lo, hi) for k, (_n, lo, hi) in sorted(KAFKA_API_RANGES.items()) if k in REGISTRY)
        log.info("loaded the codecs of %d API versions in %.2f s", n, time.perf_counter() - t0)

    async def start(self, *, listen: bool = True) -> None:
        """Open everything and serve; ``listen=False``: no sockets (clients come through
        :mod:`strom.testing.network`)."""
        from .handlers import load_all
        from .log_tasks import start_log_tasks
        from .network import start_listeners

        load_all()
        if listen and self.config["strom.protocol.preload.schemas"]:
            self._preload_codecs()
        self.replica_manager.metrics = self.metrics
        if isinstance(self.scheduler, AsyncioScheduler):  # segment rolls flush off the event loop
            rm = self.replica_manager
            self.roll_flusher = RollFlusher(asyncio.get_running_loop(), rm.note_storage_error)
            self.roll_flusher.install()
            self.page_cache_releaser = PageCacheReleaser()
            self.page_cache_releaser.install()
        if listen:  # first: /healthz answers and /readyz says why not ready while the logs load
            await self._start_http()
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
        controller_listeners: tuple[str, ...] = ()
        if self.quorum is not None:
            # Kafka's order (controller first): the quorum elects only once the voters answer
            # Vote, so the controller listeners serve before anything waits; then the image fills
            # the registry, the broker registers, and the internal topics exist before the logs
            # are loaded. The client listeners come up last, as on the registry path.
            await self.quorum.start_raft()
            if listen:
                controller_listeners = self.config.kraft().controller_listener_names
                self.servers = await start_listeners(self, only=controller_listeners)
            await self.quorum.wait_caught_up()
            await self.quorum.register()
            await self.producer_ids.start()  # the first block from the controller
            await self.quorum.create_internal_topics(
                [(name, int(self.config[key]), int(self.config[INTERNAL_TOPIC_REPLICATION[name]]))
                 for name, key in INTERNAL_TOPIC_PARTITIONS]
            )
        hosted = self.quorum.publisher.hosts if self.quorum is not None else None  # (its replicas)
        self.replica_manager.load_logs(self.topics.topics.values(), hosted=hosted)
        if self.quorum is not None:
            self.quorum.go_live()
        self._ensure_internal_topic(OFFSETS_TOPIC, "offsets.topic.num.partitions")
        from ..coordinator.group_coordinator import CoordinatorConfig, GroupCoordinator
        from ..coordinator.transaction_coordinator import TransactionCoordinator

        # groups map to the partitions the topic has, as FindCoordinator maps them (Kafka's
        # partitionFor), not to this broker's offsets.topic.num.partitions, which may differ
        # from what the topic was created with (another node's config, or a changed one)
        gc_config = CoordinatorConfig.from_broker(self.config)
        gc_config.num_partitions = self.topics.topics[OFFSETS_TOPIC].partitions
        self.group_coordinator = GroupCoordinator(
            config=gc_config, clock=self.clock, storage=InternalTopicStorage(self, OFFSETS_TOPIC),
            scheduler=self.scheduler,
        )
        self.group_coordinator.group_configs = self.group_config
        if self.quorum is not None:  # a multi-node cluster: only the partitions led here
            self.group_coordinator.owns = self._leads(OFFSETS_TOPIC)
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
            scheduler=self.scheduler,
        )
        if self.quorum is not None:
            self.txn_coordinator.owns = self._leads(TXN_TOPIC)
        rm = self.replica_manager
        self.txn_coordinator.coordinator_epoch = lambda p: rm.leader_epoch_of((TXN_TOPIC, p))
        await self.txn_coordinator.start()
        await self._start_share_coordinator()
        if listen:
            self.servers += await start_listeners(self, skip=controller_listeners)
        fms = self.config["log.flush.interval.ms"]
        flush_ms = fms if 0 < fms < 1000 else 1000
        self._timers.append(self.scheduler.schedule_periodic(
            flush_ms, self._flush_due, name="log-flusher"))
        self._timers.append(self.scheduler.schedule_periodic(
            max(10, int(self.config["strom.log.dir.check.interval.ms"])), self.replica_manager.check_log_dirs,
            name="log-dir-checker"))
        lag_ms = int(self.config["strom.event.loop.lag.sample.ms"])
        if lag_ms > 0 and isinstance(self.scheduler, AsyncioScheduler):
            self.loop_lag = LoopLagMonitor(
                asyncio.get_running_loop().time, lag_ms / 1000, cpu=time.thread_time,
                waited=runqueue_wait_clock(),
            )
            self._timers.append(self.scheduler.schedule_periodic(lag_ms, self.loop_lag.tick, name="loop-lag"))
            self.loop_lag.start()
            self.gc_pauses = GcPauseMonitor()
            self.gc_pauses.install()
        self._timers.extend(start_log_tasks(self))
        if self.quorum is not None:  # Kafka's isr-expiration task
            self._timers.append(self.scheduler.schedule_periodic(
                max(10, int(self.config["replica.lag.time.max.ms"]) // 2),
                self.replica_manager.maybe_shrink_isrs, name="isr-expiration"))
        self.ready = True
        rm = self.replica_manager
        log.info(
            "strom broker %d started (cluster %s), log dirs %s%s, %d partitions",
            self.node_id,
            self.cluster_id,
            ",".join(str(d) for d in self.log_dirs),
            f" (offline: {','.join(str(d) for d in rm.offline_dirs)})" if rm.offline_dirs else "",
            len(rm.logs),
        )

    async def _start_http(self) -> None:
        """The HTTP listener (``strom.http.listener``). A port in use is logged and the broker
        serves on without it (its Kafka listeners matter more than its metrics)."""
        from ..observability.http import HttpListener, https_context, parse_http_listener

        where = parse_http_listener(str(self.config["strom.http.listener"]))
        if where is None:
            return
        scheme, host, port = where
        tls = https_context(self) if scheme == "https" else None  # bad key material: ConfigError
        http = HttpListener(self, host, port, tls)
        try:
            await http.start()
        except OSError as e:
            log.error("HTTP listener %s not started (no /metrics, /healthz, /readyz): %s",
                      self.config["strom.http.listener"], e)
            return
        self.http = http

    def not_ready_reasons(self) -> list[str]:
        """Why this broker is not ready to serve (``/readyz``); empty when it is."""
        reasons = []
        if self.fatal.is_set():
            reasons.append("a log dir failed: the broker is stopping")
        if self._stopping.is_set():
            reasons.append("shutting down")
        if not self.ready:
            reasons.append("starting: logs, coordinators or listeners not up yet")
        q = self.quorum
        if q is not None and q.loader.catching_up:
            reasons.append("catching up with the metadata log")
        if self.replica_manager.offline_dirs:
            reasons.append("offline log dirs: " + ",".join(str(d) for d in self.replica_manager.offline_dirs))
        return reasons

    def _leads(self, topic: str) -> Callable[[int], bool]:
        """Whether this broker leads a partition of ``topic`` (the coordinators' ownership)."""
        return lambda p: self.metadata_cache.leader_id(topic, p) == self.node_id

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
            info = self.metadata_cache.topic_by_id(topic_id)
            if info is not None:
                self.replica_manager.purgatory.notify((info.name, partition))

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
            scheduler=self.scheduler,
        )
        self.share_coordinator.other_group_exists = other_group_exists
        await self.share_coordinator.start()


    def _flush_due(self) -> None:
        """``log.flush.interval.ms``/``flush.ms``: flush the logs whose flush is due."""
        fms = self.config["log.flush.interval.ms"]
        self.replica_manager.flush_due_logs((fms if 0 < fms < 1000 else 1000) / 1000)

    async def stop(self) -> None:
        self._stopping.set()  # /readyz: not ready from now on
        if self.quorum is not None:  # leaderships move away while this node still serves
            await self.quorum.controlled_shutdown()
        self.replica_manager.stopping.set()  # partition creation workers give up
        for srv in self.servers:
            srv.close()
        for conn in list(self.connections):
            conn.close()
        for h in self._timers:
            h.cancel()
        for coord in (self.share_coordinator, self.txn_coordinator, self.group_coordinator):
            if coord is not None:
                with contextlib.suppress(Exception):
                    await coord.stop()
        self.coordinator_writer.close()
        if self.quorum is not None:
            await self.quorum.stop_replication()
        await self.marker_sender.close()
        await self.producer_ids.close()
        if self.quorum is not None:
            await self.quorum.stop()
        if self.roll_flusher is not None:
            self.roll_flusher.close()  # the queued flushes finish; the logs' close syncs the rest
        if self.page_cache_releaser is not None:
            self.page_cache_releaser.close()
        if self.gc_pauses is not None:
            self.gc_pauses.close()
        self.replica_manager.shutdown()
        if self.http is not None:
            await self.http.stop()
        if self.fatal.is_set():
            log.error("strom broker %d stopped: its first log dir failed (%s)", self.node_id,
                      self.replica_manager.offline_dirs.get(self.replica_manager.metadata_log_dir, "?"))
        else:
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
        have = len(self.replica_manager.logs) + sum(self._creating.values())
        if cap >= 0 and have + more > cap:
            raise TopicError(
                ErrorCode.POLICY_VIOLATION,
                f"Creating {more} partitions would exceed the broker's limit of {cap} partitions "
                f"(strom.broker.max.partitions); {have} exist.",
            )

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
            await asyncio.to_thread(delete_logs, made)
            raise

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> TopicInfo:
        """Create a topic on the event loop (the internal topics at start); CreateTopics and
        auto-creation use :meth:`create_topic_async`. Not on the metadata quorum (a topic made
        here would not be in the metadata log): RuntimeError."""
        if self.quorum is not None:
            raise RuntimeError("on the metadata quorum, topics are created with create_topic_async")
        configs = self._check_new_topic(name, partitions, configs)
        pending = TopicInfo(name, uuid.UUID(int=0), partitions, configs)
        logs = self.replica_manager.make_partition_logs(pending, range(partitions))
        return self._register_topic(name, partitions, configs, logs)

    async def create_topic_async(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str] | None = None,
        *,
        validate_only: bool = False,
        replication_factor: int = -1,
        assignments: list[list[int]] | None = None,
    ) -> TopicInfo:
        """CreateTopics: the partitions are made in a worker thread, then the topic is published
        (see the module docstring). Raises TopicError with Kafka's code. ``replication_factor``
        is the controller's to place (on the quorum; -1: its default), else it must be 1;
        ``assignments`` (replicas per partition, in order) go to the controller, which checks them."""
        configs = self._check_new_topic(name, partitions, configs)
        if validate_only:
            return TopicInfo(name, uuid.UUID(int=0), partitions, configs)
        self._creating[name] = partitions
        try:
            if self.quorum is not None:  # through the controller; applied here before the answer
                info = await self.quorum.create_topic(name, partitions, configs, replication_factor,
                                                      assignments=assignments)
            else:
                pending = TopicInfo(name, uuid.UUID(int=0), partitions, configs)
                make = self.replica_manager.make_partition_logs
                logs = await self._in_worker(make, pending, range(partitions))
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
            delete_logs(logs)
            if isinstance(e, OSError):
                raise TopicError(ErrorCode.KAFKA_STORAGE_ERROR, f"saving topic '{name}' failed: {e}") from e
            raise
        self.replica_manager.add_partitions(info, 0, logs)
        log.info("created topic %s with %d partitions", name, partitions)
        return info

    async def add_partitions_async(
        self, name: str, count: int, assignments: list[list[int]] | None = None
    ) -> None:
        """CreatePartitions (validated by the caller): make partitions ``current..count-1`` in a
        worker thread, then publish them with the new count. ``assignments`` (the client's
        replicas of the new partitions) go to the controller, which checks them. Raises
        TopicError."""
        async with self._grow_lock:
            info = self.topics.get(name)
            if info is None:
                raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
            current = info.partitions
            if count <= current:
                raise TopicError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partitions.")
            self._check_partition_cap(count - current)
            if self.quorum is not None:
                self._creating[name] = count - current
                try:
                    await self.quorum.create_partitions(name, count, assignments)
                finally:
                    self._creating.pop(name, None)
                return
            self._creating[name] = count - current
            try:
                make = self.replica_manager.make_partition_logs
                logs = await self._in_worker(make, info, range(current, count))
            finally:
                self._creating.pop(name, None)
            if self.topics.get(name) is not info:  # deleted meanwhile
                delete_logs(logs)
                raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' was deleted.")
            try:
                self.topics.set_partitions(name, count)
            except OSError as e:
                delete_logs(logs)
                raise TopicError(ErrorCode.KAFKA_STORAGE_ERROR, f"saving topic '{name}' failed: {e}") from e
            self.replica_manager.add_partitions(info, current, logs)

    async def delete_topic_async(self, name: str) -> TopicInfo:
        """DeleteTopics: :meth:`delete_topic`, through the controller on the metadata quorum."""
        if self.quorum is None:
            return self.delete_topic(name)
        info = self._deletable(name)
        await self.quorum.delete_topic(name)
        return info

    def _alter_topic_configs_on_quorum(self, name: str, configs: dict[str, str]) -> None:
        assert self.quorum is not None
        self.quorum.alter_topic_configs(name, configs)

    async def settle_topic_configs(self, names: Iterable[str]) -> dict[str, KafkaError]:
        """(Alter/IncrementalAlterConfigs, before answering) on the metadata quorum: until the
        config changes of these topics are committed and applied; the failed ones by topic."""
        if self.quorum is None:
            return {}
        return await self.quorum.settle_config_writes(names)

    def _deletable(self, name: str) -> TopicInfo:
        info = self.topics.get(name)
        if info is None:
            raise TopicError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
            )
        if info.internal:
            raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot delete internal topic {name}")
        return info

    def delete_topic(self, name: str) -> TopicInfo:
        info = self.topics.get(name)
        if info is None:
            raise TopicError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
            )
        if info.internal:
            raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot delete internal topic {name}")
        self.topics.delete(name)
        self.replica_manager.remove_partitions(name, info.partitions)
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

    # ------------------------------------------------------------------ data path
    async def write_markers(
        self, producer_id: int, producer_epoch: int, commit: bool, partitions: Iterable[tuple[str, int]],
        coordinator_epoch: int = 0,
    ) -> None:
        """Write a transaction marker (control batch) to each partition: those led here by
        :meth:`write_local_markers`, those another broker leads (a cluster) by that broker,
        through :class:`~strom.server.txn_marker_sender.TxnMarkerSender` (WriteTxnMarkers).
        ``coordinator_epoch``: the leader epoch of the transactional id's ``__transaction_state``
        partition here; a partition that has a newer coordinator's marker for the producer
        refuses it (TRANSACTION_COORDINATOR_FENCED, raised)."""
        partitions = list(partitions)
        cache, me = self.metadata_cache, self.node_id
        elsewhere = [tp for tp in partitions if (leader := cache.leader_id(*tp)) is not None and leader != me
                     and tp not in self.replica_manager.offline_partitions]
        if not elsewhere:
            await self._write_markers_here(producer_id, producer_epoch, commit, partitions, coordinator_epoch)
            return
        here = [tp for tp in partitions if tp not in set(elsewhere)]
        # both halves run to their end before a failure is raised: a half still retrying after
        # the coordinator wrote the markers again and completed the transaction could put a
        # stale marker in the producer's next transaction
        outcomes = await asyncio.gather(
            self._write_markers_here(producer_id, producer_epoch, commit, here, coordinator_epoch),
            self.marker_sender.write(producer_id, producer_epoch, commit, elsewhere, coordinator_epoch),
            return_exceptions=True,
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def _write_markers_here(
        self, producer_id: int, producer_epoch: int, commit: bool, partitions: list[tuple[str, int]],
        coordinator_epoch: int = 0,
    ) -> None:
        """:meth:`write_local_markers`; the markers of partitions whose leadership moved before
        they were replicated, or whose ISR is too small, go again through the sender (to
        whichever broker leads each now, retried until written)."""
        try:
            await self.write_local_markers(producer_id, producer_epoch, commit, partitions, coordinator_epoch)
        except MarkersNotWritten as e:
            if not e.retriable:
                raise
            await self.marker_sender.write(producer_id, producer_epoch, commit, sorted(e.failed),
                                           coordinator_epoch)

    async def write_local_markers(
        self, producer_id: int, producer_epoch: int, commit: bool, partitions: Iterable[tuple[str, int]],
        coordinator_epoch: int = 0,
    ) -> None:
        """Write a transaction marker (control batch) to each partition here, as Kafka appends
        them (acks=-1): refused while the partition's ISR is below ``min.insync.replicas``,
        durable (one flush round for all of them, :mod:`strom.server.coordinator_writer`) and
        replicated (the HW passes it; the partitions wait side by side). Raises
        :class:`~strom.server.txn_marker_sender.MarkersNotWritten` naming the partitions whose
        marker was refused, not replicated in time or whose leadership moved (the caller writes
        those again, where each is led); the others are written. Offsets partitions also complete
        the group coordinator's pending transactional offsets."""
        partitions = list(partitions)
        rm = self.replica_manager
        offline = [f"{t}-{p}" for t, p in partitions if (t, p) in rm.offline_partitions]
        if offline:  # the markers wait for the partition (its dir failed), as Kafka's do for a leader
            raise KafkaStorageError(f"transaction markers cannot be written: {', '.join(offline)} offline")
        writer = self.coordinator_writer
        failed: dict[tuple[str, int], int] = {}
        written: list[tuple[tuple[str, int], int]] = []
        for tp in partitions:
            if not rm.is_online(*tp):
                continue  # deleted since it joined the transaction
            if rm.isr_too_small(tp) is not None:
                failed[tp] = ErrorCode.NOT_ENOUGH_REPLICAS
                continue
            try:
                end = writer.append_marker(tp, producer_id, producer_epoch, commit, coordinator_epoch)
                written.append((tp, end))
            except CoordinatorWriteError as e:
                if e.code not in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.TRANSACTION_COORDINATOR_FENCED):
                    raise
                failed[tp] = e.code  # (moved since the caller looked; a newer coordinator's marker is here)
        for tp, end in written:
            await writer.await_offset(tp, end)
        # replicated too (Kafka appends markers with acks=-1): a marker only this leader had is
        # lost if another replica takes over, and the transaction would end without it
        codes = await asyncio.gather(
            *(rm.await_high_watermark(tp, end, MARKER_REPLICATION_TIMEOUT_MS) for tp, end in written)
        )
        for (tp, _end), code in zip(written, codes, strict=True):
            if code != ErrorCode.NONE:
                failed[tp] = code
            elif tp[0] == OFFSETS_TOPIC:
                await self.group_coordinator.complete_txn(tp[1], producer_id, commit)
        if failed:
            raise MarkersNotWritten(failed)


def _refuse_metadata_log(metadata_log_dir: Path) -> None:
    """The registry path (``strom.metadata.quorum.enable=false``) on a dir the metadata quorum
    wrote: its topics are in the metadata log, which the registry path cannot read; started, it
    would serve none of them and make new internal topics over the old ones' logs. Refused, as
    a ZooKeeper-mode Kafka broker refuses a KRaft-formatted dir."""
    found = metadata_log_dir / f"{METADATA_TOPIC}-0"
    if found.is_dir():
        raise ConfigError(
            f"{found} holds the metadata log of a node on the metadata quorum, which "
            f"strom.metadata.quorum.enable=false (the JSON topic registry) cannot read: start it "
            f"with strom.metadata.quorum.enable=true"
        )


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
    # a node of a multi-voter quorum may wait long in its start (no majority up yet): a signal
    # then stops it cleanly, as it stops a started broker
    starting = asyncio.ensure_future(broker.start())
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([starting, stopped], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if not starting.done():
        log.info("stopping during the start")
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await starting
        await broker.stop()
        return
    try:
        starting.result()
    except (OSError, ConfigError) as e:  # ports in use, unreadable TLS key material ...
        log.error("cannot start broker: %s", e)
        await broker.stop()
        raise SystemExit(1) from None
    # What start-up made mostly lives as long as the process (modules, codecs, the logs' state):
    # out of the collector's reach, a full collection no longer walks it (86 ms with every codec
    # loaded, bench/loop_lag.py's GC pauses; GcPauseMonitor reports them). The price: a reference
    # cycle among those objects that dies later is not reclaimed; plain objects still are, by
    # reference counting, and what start-up made is bounded.
    gc.freeze()
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
    tune_malloc()
    logging.basicConfig(
        level=os.environ.get("STROM_LOG_LEVEL", "INFO"),
        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s",
    )
    config.warn_unknown()
    use_uvloop = os.environ.get("STROM_EVENT_LOOP", "auto")
    if use_uvloop in ("auto", "uvloop") and not config["strom.fetch.sendfile"]:
        try:
            import uvloop

            uvloop.run(serve(config))
            return
        except ImportError:
            pass
    asyncio.run(serve(config))
