"""The broker on the metadata quorum: a combined node (``process.roles=broker,controller``) of a
quorum of one voter or of many, or a broker-only observer of it.

Theory of operation (Kafka's ``KafkaRaftServer`` with ``ControllerServer`` and ``BrokerServer``
in one process; ``strom.metadata.quorum.enable``, true by default, and always on for a node whose
``controller.quorum.voters`` names more than one voter: a multi-node cluster has no other path).

Parts, all on the broker's event loop:

* the :class:`~strom.raft.manager.RaftManager` (the same for one voter and for many): the Raft
  node on the metadata log (``<metadata.log.dir>/__cluster_metadata-0``) and the
  ``quorum-state`` file, its timers on the broker's injected scheduler. With one voter it has
  no transport (:class:`~strom.raft.manager.NullTransport`): the node elects itself at once and
  commits what it flushed. With several, requests go to the other voters' CONTROLLER endpoints
  (:class:`~strom.raft.transport.SocketRaftTransport`) and theirs arrive on this broker's
  listeners (:mod:`strom.server.handlers.raft`, through ``broker.raft_manager``).
* :class:`~strom.controller.server.ControllerServer`: active when this node leads the quorum
  (the first active controller of an empty log writes the bootstrap records); it appends through
  :class:`_ControllerRaft`, a synchronous view of the manager.
* :class:`~strom.metadata.loader.MetadataLoader`: committed batches into images, published to
  :class:`BrokerMetadataPublisher`, which applies the image to the broker (below).

The controller and the loader are the manager's listeners (one :class:`_Listener`), registered
before it starts, so they see the whole committed log.

Start-up, in Kafka's order (controller first), as :meth:`Broker.start` calls it:

1. :meth:`BrokerQuorum.start_raft`: start the manager and the controller's periodic work. On a
   one-voter node with an empty log, the first batch the controller writes is the bootstrap
   records plus the migration of the data dir written by an older strom
   (:func:`strom.metadata.migration.records_for_data_dir`: topics keep their ids); a multi-node
   cluster starts from formatted, empty dirs.
2. the broker's controller listeners (``controller.listener.names``) serve, so that the voters
   can elect: a quorum cannot elect unless the nodes answer Vote.
3. :meth:`BrokerQuorum.wait_caught_up`: until a leader is known and this node's loader applied
   the committed log up to the leader's high watermark (one voter: at once). A node waits, and
   does not fail, while no majority is up; it logs once what it waits for. Then
   ``strom-topics.json`` of a migrated dir is renamed ``strom-topics.json.migrated``.
4. :meth:`BrokerQuorum.register`: BrokerRegistration (a fresh incarnation id), heartbeats until
   unfenced, then every ``broker.heartbeat.interval.ms``
   (:class:`~strom.server.broker_lifecycle.BrokerLifecycleManager`; retried while the active
   controller cannot be reached).
5. :meth:`BrokerQuorum.create_internal_topics` through the controller; a node that cannot reach
   the active controller waits until the topic reaches its image.
6. the broker loads its logs, goes live (:meth:`go_live`), starts its coordinators and its client
   listeners.

Every request to the controller goes through ``self.channel``
(:mod:`strom.server.controller_channel`), built by :meth:`BrokerQuorum._controller_channel`:
this node's own controller on a one-voter quorum; with several voters, the local controller
when active, else the active controller (the raft manager's leader) over the wire to its
controller listener.

Stop (:meth:`BrokerQuorum.stop`): heartbeats and the controller's poll timer stop, the manager
shuts down gracefully (a leader resigns: EndQuorumEpoch, so that a successor stands at once) and
closes the metadata log.

A broker-only node (``process.roles=broker``) runs no controller: its Raft node is an observer
(it fetches the log from the voters' CONTROLLER endpoints and never votes), its loader follows
the log, and everything it asks of the controller goes over the wire to the active one.

The broker's view of the image: the topic registry (:class:`~strom.metadata.topics.TopicRegistry`,
in memory on this path) and the replica manager's logs. Applying a delta keeps the broker's rule
that a topic is visible only once its logs exist: new topics' and partitions' logs are made in
a worker thread, then published in the registry and the replica manager; deleted topics leave
the registry and their logs are deleted. Changes are applied one at a time, in log order
(one asyncio task consumes them). At start-up the registry is filled directly and the replica
manager's ``load_logs`` opens (or makes) the logs, as before.

Requests: :meth:`create_topic`, :meth:`delete_topic`, :meth:`create_partitions`,
:meth:`alter_topic_configs` send the controller request; the first three wait until the broker
applied the committed result, so a client that got an answer sees the topic at once. A topic's
configs are applied by the broker first (the registry's ``on_set_configs``), then written; the
AlterConfigs handlers answer after :meth:`settle_config_writes` (committed and applied).

Dynamic broker configs (BROKER resources: the cluster default ``""`` and each broker id) and group
configs (GROUP) are validated by the broker that received the request, then written through the
controller (:meth:`alter_resource_configs`) and answered once committed and applied here; every
broker takes the cluster default, its own configs and the group configs from its image. SCRAM
credentials are UserScramCredentialRecords written through the controller; logins read the image.
Producer-id blocks come from the controller through ``self.channel``
(:mod:`strom.server.producer_id_manager`; the migration records a data dir's reservation in the
log, so no id is reused). Not here yet: ACLs and client quotas. Brokers and partition
leadership in the broker's answers come from the image
(:class:`~strom.server.metadata_cache.ImageMetadataCache`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime
import logging
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kio.schema.alter_configs.v2 import request as alter_configs
from kio.schema.assign_replicas_to_dirs.v0 import request as assign_dirs
from kio.schema.broker_registration.v4 import request as registration
from kio.schema.create_partitions.v3 import request as create_partitions
from kio.schema.create_topics.v7 import request as create_topics
from kio.schema.delete_topics.v6 import request as delete_topics
from kio.schema.types import BrokerId
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64, u16

from ..controller.config_control import accept_all
from ..controller.features import BOOTSTRAP_LEVELS
from ..controller.quorum_controller import (
    ALTER_CONFIGS,
    ASSIGN_REPLICAS_TO_DIRS,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    ControllerConfig,
)
from ..controller.server import ControllerServer, NotControllerError
from ..metadata.image import CONFIG_RESOURCE_TOPIC, MetadataImage
from ..metadata.loader import MetadataLoader
from ..metadata.migration import TOPICS_FILE, records_for_data_dir
from ..metadata.topics import TopicError, TopicInfo
from ..protocol.errors import ErrorCode, KafkaError
from ..raft.log import OffsetAndEpoch, RaftStorageError
from ..raft.manager import RaftManager
from ..raft.metadata_log import MetadataLog
from ..raft.quorum import CommittedBatch, LeaderAndEpoch
from ..scheduler import DeadlineTimer
from .broker_lifecycle import BrokerLifecycleManager
from .controller_channel import ControllerChannel, LocalControllerChannel, QuorumControllerChannel
from .metadata_publisher import BrokerMetadataPublisher

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("strom.kraft")

# how long a starting node waits for enough brokers before it creates an internal topic with a
# replication factor capped by the brokers registered (see create_internal_topics)
INTERNAL_TOPIC_BROKER_WAIT_S = 15.0

QUORUM_ENABLE = "strom.metadata.quorum.enable"
CONTROLLER_REQUEST_TIMEOUT_MS = 30000  # Kafka's request.timeout.ms, for the controller channel


class _ControllerRaft:
    """The :class:`~strom.raft.manager.RaftManager` seen by the controller (its
    :class:`~strom.controller.server.RaftClient`): synchronous appends through the manager,
    which re-arms its timer, so the manager stays the only thing that drives the node."""

    def __init__(self, manager: RaftManager) -> None:
        self.manager = manager

    @property
    def log(self) -> MetadataLog | None:
        return self.manager.metadata_log

    @property
    def leader_id(self) -> int | None:
        return self.manager.leader_and_epoch.leader_id

    @property
    def epoch(self) -> int:
        return self.manager.leader_and_epoch.epoch

    def append(self, now_ms: int, records: list[bytes]) -> int:
        return self.manager.append_now(records)

    def resign(self, now_ms: int) -> None:
        self.manager.resign()

    def create_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        self.manager.create_snapshot(snapshot_id, data)


class _Listener:
    """The Raft listener of a node: its controller (none on a broker-only node) and the
    broker's loader."""

    def __init__(self, controller: ControllerServer | None, loader: MetadataLoader) -> None:
        self.controller = controller
        self.loader = loader

    def handle_commit(self, batches: list[CommittedBatch]) -> None:
        if self.controller is not None:
            self.controller.handle_commit(batches)
        self.loader.handle_committed(batches)

    def handle_load_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        if self.controller is not None:
            self.controller.handle_load_snapshot(snapshot_id, data)
        self.loader.handle_load_snapshot(snapshot_id.offset, snapshot_id.epoch, data)

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        if self.controller is not None:
            self.controller.handle_leader_change(leader)
        self.loader.handle_leader_change(leader.leader_id, leader.epoch)


class BrokerQuorum:
    """The metadata quorum of a combined node (see the module docstring)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        cfg = broker.config
        self.node_id = broker.node_id
        self.metadata_dir: Path = cfg.metadata_log_dir
        self.heartbeat_interval_ms = int(cfg["broker.heartbeat.interval.ms"])
        self.kraft = cfg.kraft()
        self.voters = self.kraft.voter_ids
        # a broker-only node (process.roles=broker) is an observer of the quorum: no controller
        self.controller: ControllerServer | None = None
        if self.kraft.is_controller:
            self.controller = ControllerServer(
                self.node_id,
                broker.clock,
                ControllerConfig(
                    num_partitions=int(cfg["num.partitions"]),
                    default_replication_factor=int(cfg["default.replication.factor"]),
                    broker_session_timeout_ms=int(cfg["broker.session.timeout.ms"]),
                    delete_topic_enable=bool(cfg["delete.topic.enable"]),
                    unclean_leader_election_enable=bool(cfg["unclean.leader.election.enable"]),
                    auto_leader_rebalance_enable=bool(cfg["auto.leader.rebalance.enable"]),
                    leader_imbalance_per_broker_percentage=int(cfg["leader.imbalance.per.broker.percentage"]),
                    leader_imbalance_check_interval_seconds=int(cfg["leader.imbalance.check.interval.seconds"]),
                ),
                cluster_id=broker.cluster_id,
                validator=accept_all,  # the broker validated the configs with its own messages
                snapshot_max_bytes=int(cfg["metadata.log.max.record.bytes.between.snapshots"]),
            )
        # everything asked of the controller goes through the channel (local or over the wire)
        self.channel: ControllerChannel = self._controller_channel()
        self.loader = MetadataLoader()
        self.publisher = BrokerMetadataPublisher(broker)
        self.loader.install_publishers([self.publisher])
        self.metadata_log: MetadataLog | None = None
        self.manager: RaftManager | None = None
        self.lifecycle = BrokerLifecycleManager(
            self.node_id,
            self.channel,
            broker.scheduler,
            self._registration_request,
            lambda: self.loader.last_offset + 1,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            retry_backoff_ms=int(cfg["controller.quorum.retry.backoff.ms"]),
            before_register=self._end_own_session,
            offline_log_dirs=self._offline_log_dirs,
        )
        broker.replica_manager.on_dir_offline = lambda _d: self.lifecycle.heartbeat_soon()
        self._assign_timer: Any = None
        self._assigning = False
        self._poll_timer: DeadlineTimer | None = None
        self._migrate_file: Path | None = None
        self._retry_s = max(0.05, int(cfg["controller.quorum.retry.backoff.ms"]) / 1000)
        # topic config changes on their way into the metadata log (alter_topic_configs)
        self.pending_config_topics: collections.Counter[str] = collections.Counter()
        self._config_writes: dict[str, set[asyncio.Task[KafkaError | None]]] = {}

    def _now(self) -> int:
        return int(self.broker.clock.monotonic_ms())

    @property
    def single_voter(self) -> bool:
        return self.voters == frozenset({self.node_id})

    # -- start-up, in the order Broker.start calls it
    async def start_raft(self) -> None:
        """Open the metadata log and start the raft manager, with the controller and the loader
        as its listeners (registered before the start: they see the whole committed log), and
        the controller's periodic work. Inbound KRaft requests reach the manager through
        ``broker.raft_manager`` (:mod:`strom.server.handlers.raft`)."""
        broker = self.broker
        controller = self.controller
        if self.single_voter and controller is not None:
            # a new one-node cluster: its first batch carries the migration of an older strom's
            # data dir (a multi-node cluster starts from formatted, empty dirs)
            peek = MetadataLog.open(self.metadata_dir, clock=broker.clock)
            try:
                empty = peek.end_offset == 0 and peek.latest_snapshot_id() is None
            finally:
                peek.close()
            if empty:
                old = broker.log_dir / TOPICS_FILE
                records = records_for_data_dir(broker.log_dir, node_id=self.node_id)
                controller.initial_records = records
                if old.exists():
                    self._migrate_file = old
                    log.info("migrating %s into the metadata log (%d records)", old, len(records))
        manager = RaftManager.from_broker_config(
            broker.config, broker.cluster_id, clock=broker.clock, scheduler=broker.scheduler
        )
        manager.register(_Listener(controller, self.loader))
        if controller is not None:
            controller.attach(_ControllerRaft(manager))
        manager.start()
        self.manager = manager
        self.metadata_log = manager.metadata_log
        broker.raft_manager = manager
        if controller is not None:
            self._poll_timer = DeadlineTimer(
                broker.scheduler,
                self._now,
                controller.maybe_poll,
                controller.next_poll_ms,
                name="controller-poll",
                min_delay_ms=10,
                max_delay_ms=1000,
            )
            self._poll_timer.start()

    def _controller_channel(self) -> ControllerChannel:
        """The way to the active controller: this node's own alone on a one-voter quorum; with
        several voters (or on a broker-only node), this node's controller when active, else the
        active one (the raft manager's leader) over the wire to its controller listener."""
        kraft = self.kraft
        if self.controller is not None and (self.single_voter or not kraft.voters):
            return LocalControllerChannel(self.controller)

        def leader() -> int | None:
            return None if self.manager is None else self.manager.leader_and_epoch.leader_id

        return QuorumControllerChannel(
            self.controller,
            leader,
            {v.node_id: (v.host, v.port) for v in kraft.voters},
            request_timeout_ms=CONTROLLER_REQUEST_TIMEOUT_MS,
            retry_backoff_ms=kraft.retry_backoff_ms,
            client_id=f"broker-{kraft.node_id}-to-controller",
            client_host=self.broker.config.advertised()[0],
        )

    def _waiting_for(self) -> tuple[str, str] | None:
        """What the start still waits for (a key and a sentence), or None once a leader is known
        and this node's loader published the committed log up to the leader's high watermark."""
        manager, controller = self.manager, self.controller
        assert manager is not None
        leader = manager.leader_and_epoch.leader_id
        if leader is None:
            voters = ",".join(str(v) for v in sorted(self.voters))
            return "leader", f"a leader of the metadata quorum (a majority of voters {voters} up)"
        if leader == self.node_id and controller is not None and not (
            controller.is_active and controller.waiting == 0
        ):
            return "active", "this node's controller to commit its first batch"
        target = manager.leader_high_watermark
        if target is None:
            return "fetch", f"a first answer from the quorum's leader {leader}"
        if self.loader.last_offset + 1 < target or self.publisher.image is None:
            return "catch-up", (
                f"the committed metadata log (the leader's high watermark: {target}; "
                f"applied here: {self.loader.last_offset + 1}) and a first image"
            )
        return None

    async def wait_caught_up(self) -> None:
        """Wait (never fail: the other voters may not be up yet) until a leader is known and this
        node applied the committed metadata log; logs once what it waits for."""
        told: set[str] = set()
        while (waiting := self._waiting_for()) is not None:
            key, text = waiting
            if key not in told:
                told.add(key)
                log.info("node %d waits for %s", self.node_id, text)
            if self.manager is None or self.manager.closed:
                raise RuntimeError("the metadata quorum stopped during the start")
            await asyncio.sleep(0.005)
        if self._migrate_file is not None:
            self._migrate_file.rename(self._migrate_file.with_name(self._migrate_file.name + ".migrated"))
            self._migrate_file = None

    async def register(self) -> None:
        """Register the broker and heartbeat until unfenced (retrying while the active controller
        cannot be reached), then heartbeat every ``broker.heartbeat.interval.ms``
        (:class:`~strom.server.broker_lifecycle.BrokerLifecycleManager`)."""
        await self.lifecycle.start()
        if len(self.broker.replica_manager.log_dirs) > 1:  # JBOD: tell the controller which dir
            self._assign_timer = self.broker.scheduler.schedule_periodic(
                self.heartbeat_interval_ms, self._assign_replicas_to_dirs, name="assign-replicas-to-dirs")
        await self._settle()

    def _offline_log_dirs(self) -> list[uuid.UUID]:
        """The ids of this broker's failed log dirs (KIP-858's heartbeat ``offline_log_dirs``)."""
        ids = self.broker.directory_ids
        return [ids[d] for d in self.broker.replica_manager.offline_dirs if d in ids]

    async def _assign_replicas_to_dirs(self) -> None:
        """KIP-858 with several log dirs: every replica here whose partition does not record the
        dir it is in goes to the controller in one AssignReplicasToDirs (Kafka's
        AssignmentsManager), so that a dir failure later moves exactly its replicas."""
        image = self.publisher.image
        rm = self.broker.replica_manager
        if self._assigning or image is None or self.lifecycle.broker_epoch < 0:
            return
        want: dict[uuid.UUID, dict[uuid.UUID, list[int]]] = {}
        for (topic, p), plog in list(rm.logs.items()):
            t = image.topics.get_topic(topic)
            part = None if t is None else t.partitions.get(p)
            if t is None or part is None or self.node_id not in part.replicas:
                continue
            did = self.broker.directory_ids.get(plog.directory.parent)
            if did is not None and part.directory(self.node_id) != did:
                want.setdefault(did, {}).setdefault(t.id, []).append(p)
        if not want:
            return
        request = assign_dirs.AssignReplicasToDirsRequest(
            broker_id=BrokerId(self.node_id),
            broker_epoch=i64(self.lifecycle.broker_epoch),
            directories=tuple(
                assign_dirs.DirectoryData(id_=did, topics=tuple(
                    assign_dirs.TopicData(topic_id=tid, partitions=tuple(
                        assign_dirs.PartitionData(partition_index=i32(p)) for p in sorted(ps)))
                    for tid, ps in topics.items()))
                for did, topics in want.items()),
        )
        self._assigning = True
        log.info("broker %d: assigning %d replicas to their log dirs (AssignReplicasToDirs)", self.node_id,
                 sum(len(ps) for topics in want.values() for ps in topics.values()))
        try:
            response = await self.channel.call(ASSIGN_REPLICAS_TO_DIRS, request)
            if response.get("error_code"):
                log.info("broker %d AssignReplicasToDirs: error %s; retrying", self.node_id,
                         response["error_code"])
        except Exception as e:  # the next round retries what the image still lacks
            log.info("broker %d AssignReplicasToDirs: %s; retrying", self.node_id, e)
        finally:
            self._assigning = False

    async def create_internal_topics(self, topics: list[tuple[str, int, int]]) -> None:
        """Create the missing internal topics (name, partitions, replication factor) through the
        controller. With fewer unfenced brokers than the factor, wait up to
        ``INTERNAL_TOPIC_BROKER_WAIT_S`` for more (the nodes of a cluster started together
        register within a second or two of each other), then cap the factor by the brokers
        registered (Kafka waits for enough brokers without end instead). A node that cannot
        reach the active controller waits until the topic reaches its image (the active
        controller's node creates it)."""
        told = False
        loop = asyncio.get_running_loop()
        wait_until = loop.time() + INTERNAL_TOPIC_BROKER_WAIT_S
        for name, partitions, rf in topics:
            while name not in self.broker.topics.topics:
                image = self.publisher.image
                brokers = len(image.cluster.unfenced_brokers()) if image is not None else 1
                if rf > brokers and loop.time() < wait_until:
                    await asyncio.sleep(self._retry_s)  # more brokers may be registering
                    continue
                if rf > brokers:
                    log.warning("creating %s with replication factor %d: only %d broker(s) are registered "
                                "(its configured factor is %d)", name, max(1, brokers), brokers, rf)
                try:
                    await self.create_topic(name, partitions, {"cleanup.policy": "compact"},
                                            replication_factor=max(1, min(rf, brokers)))
                except TopicError as e:
                    if e.code not in (ErrorCode.NOT_CONTROLLER, ErrorCode.TOPIC_ALREADY_EXISTS):
                        raise
                    if not told:
                        told = True
                        log.info("node %d waits for the internal topic %s (%s)", self.node_id, name, e)
                    await asyncio.sleep(self._retry_s)

    def go_live(self) -> None:
        """The broker opened its logs: later images are applied by making and deleting logs;
        replication starts (followers fetch from leaders, leaders propose ISR changes)."""
        from .alter_partition_manager import AlterPartitionManager
        from .replica_fetcher import ReplicaFetcherManager

        broker = self.broker
        rm = broker.replica_manager
        self.alter_partitions = AlterPartitionManager(broker, lambda: self.broker_epoch)
        rm.isr_sender = self.alter_partitions.submit
        rm.fetcher_manager = ReplicaFetcherManager(
            rm, listener=broker.inter_broker_listener, broker_epoch=lambda: self.broker_epoch
        )
        self.publisher.go_live()
        self.publisher.apply_all_partitions()

    async def stop_replication(self) -> None:
        """Followers stop fetching, ISR changes stop (before the logs close)."""
        rm = self.broker.replica_manager
        rm.isr_sender = None
        fetchers, rm.fetcher_manager = rm.fetcher_manager, None
        if fetchers is not None:
            await fetchers.close()
        alter = getattr(self, "alter_partitions", None)
        if alter is not None:
            await alter.close()

    async def stop(self) -> None:
        if self._assign_timer is not None:
            self._assign_timer.cancel()
        self.lifecycle.close()
        if self._poll_timer is not None:
            self._poll_timer.stop()
        self.publisher.close()
        with contextlib.suppress(Exception):
            await self.channel.close()
        if self.manager is not None:
            try:  # graceful: a leader resigns; closes the metadata log (its dir may have failed)
                await self.manager.shutdown()
            except (OSError, RaftStorageError) as e:
                log.error("closing the metadata log failed: %s", e)
            if self.broker.raft_manager is self.manager:
                self.broker.raft_manager = None

    # -- broker lifecycle at the controller (server/broker_lifecycle.py)
    def _registration_request(self, incarnation_id: uuid.UUID) -> Any:
        broker = self.broker
        # the endpoints clients are told (advertised.listeners), as Kafka registers them
        advertised = broker.config.advertised_listeners()
        listeners = tuple(
            registration.Listener(
                name=name,
                host=advertised.get(name, (host, port))[0],
                port=u16(advertised.get(name, (host, port))[1]),
                security_protocol=i16(_protocol_id(proto)),
            )
            for name, proto, host, port in broker.config.listener_protocols()
        )
        return registration.BrokerRegistrationRequest(
            broker_id=i32(self.node_id),  # type: ignore[arg-type]
            cluster_id=broker.cluster_id,
            incarnation_id=incarnation_id,
            listeners=listeners,
            features=tuple(
                registration.Feature(name=n, min_supported_version=i16(0), max_supported_version=i16(v))
                for n, v in BOOTSTRAP_LEVELS.items()
            ),
            rack=str(broker.config["broker.rack"]) or None,
            is_migrating_zk_broker=False,
            log_dirs=tuple(broker.directory_ids.values()),
            previous_broker_epoch=i64(-1),
        )

    def _end_own_session(self) -> None:
        """The previous incarnation of this broker was this node's previous process: over (only
        this node's own controller, when active, can know that)."""
        if self.controller is not None and self.controller.is_active:
            self.controller.end_session(self.node_id)

    @property
    def broker_epoch(self) -> int:
        return self.lifecycle.broker_epoch

    @property
    def incarnation_id(self) -> uuid.UUID:
        return self.lifecycle.incarnation_id

    async def controlled_shutdown(self) -> None:
        """Before the broker stops (``controlled.shutdown.enable``): leaderships move away to
        the other live brokers. A broker with no other unfenced broker in its image (the single
        node) has nowhere to move them: it keeps them (no leaderless partitions in the log)."""
        image = self.publisher.image
        brokers = [] if image is None else image.cluster.unfenced_brokers()
        others = [b for b in brokers if b.id != self.node_id]
        if not self.broker.config["controlled.shutdown.enable"] or not others:
            self.lifecycle.close()
            return
        # bounded by its own timeout, not only the session timeout: a cluster with a long session
        # (a peer that stopped heartbeating stays unfenced that long) would hold the stop as long
        timeout_ms = min(
            int(self.broker.config["broker.session.timeout.ms"]),
            int(self.broker.config["strom.controlled.shutdown.timeout.ms"]),
        )
        await self.lifecycle.controlled_shutdown(timeout_ms)

    # -- requests
    async def _call(self, api_key: int, request: Any) -> dict[str, Any]:
        if self.manager is None:  # not started: nothing would ever answer (a request waited forever)
            raise TopicError(ErrorCode.NOT_CONTROLLER, "the metadata quorum is not started")
        try:
            return await self.channel.call(api_key, request)
        except NotControllerError as e:
            raise TopicError(ErrorCode.NOT_CONTROLLER, str(e)) from e

    async def _settle(self, until: Callable[[MetadataImage], bool] | None = None) -> None:
        """Wait until the broker applied everything committed so far and, when the answer came
        from another node's controller (this node's log may not have the result yet), until the
        published image satisfies ``until`` (at most the channel's timeout)."""
        await self.publisher.wait_applied(self.loader.last_offset)
        if until is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CONTROLLER_REQUEST_TIMEOUT_MS / 1000
        while (image := self.publisher.image) is None or not until(image):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.publisher.wait_applied(self.loader.last_offset + 1), remaining)
        await self.publisher.wait_applied(self.loader.last_offset)

    async def settle_image(self, until: Callable[[MetadataImage], bool]) -> None:
        """(A change the controller committed, before answering the client) until this broker
        applied an image where ``until`` holds, at most the channel's timeout."""
        await self._settle(until)

    async def create_topic(
        self, name: str, partitions: int, configs: dict[str, str], replication_factor: int = -1,
        *, assignments: list[list[int]] | None = None,
    ) -> TopicInfo:
        placed = tuple(
            create_topics.CreatableReplicaAssignment(
                partition_index=i32(i), broker_ids=tuple(BrokerId(b) for b in ids)
            )
            for i, ids in enumerate(assignments or ())
        )
        topic = create_topics.CreatableTopic(
            name=name,  # type: ignore[arg-type]
            num_partitions=i32(-1 if placed else partitions),
            replication_factor=i16(-1 if placed else replication_factor),
            assignments=placed,
            configs=tuple(create_topics.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()),
        )
        request = create_topics.CreateTopicsRequest(
            topics=(topic,),
            timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=30000)),
            validate_only=False,
        )
        response = await self._call(CREATE_TOPICS, request)
        result = response["topics"][0]
        if result["error_code"]:
            raise TopicError(result["error_code"], result["error_message"] or "")
        topic_id = result["topic_id"]
        await self._settle(lambda image: (t := image.topics.get_topic(name)) is not None and t.id == topic_id)
        info = self.broker.topics.get(name)
        if info is None or info.topic_id != result["topic_id"]:
            # its logs could not be made here (a full or failed disk): take the topic back out
            # of the metadata log, so that as before nothing is left of a failed creation
            with contextlib.suppress(TopicError):
                await self.delete_topic(name)
            raise TopicError(ErrorCode.KAFKA_STORAGE_ERROR, f"topic '{name}' could not be created here")
        return info

    async def delete_topic(self, name: str) -> None:
        request = delete_topics.DeleteTopicsRequest(
            topics=(delete_topics.DeleteTopicState(name=name, topic_id=uuid.UUID(int=0)),),  # type: ignore[arg-type]
            timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=30000)),
        )
        response = await self._call(DELETE_TOPICS, request)
        result = response["responses"][0]
        if result["error_code"]:
            raise TopicError(result["error_code"], result["error_message"] or "")
        gone = result["topic_id"]
        await self._settle(lambda image: image.topics.get_topic(gone) is None)

    async def create_partitions(
        self, name: str, count: int, assignments: list[list[int]] | None = None
    ) -> None:
        """CreatePartitions through the controller; ``assignments``: the new partitions'
        replicas, as the client gave them (the controller checks them), None to let it place."""
        placed = None if not assignments else tuple(
            create_partitions.CreatePartitionsAssignment(broker_ids=tuple(BrokerId(b) for b in a))
            for a in assignments
        )
        topic = create_partitions.CreatePartitionsTopic(name=name, count=i32(count), assignments=placed)  # type: ignore[arg-type]
        request = create_partitions.CreatePartitionsRequest(
            topics=(topic,),
            timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=30000)),
            validate_only=False,
        )
        response = await self._call(CREATE_PARTITIONS, request)
        result = response["results"][0]
        if result["error_code"]:
            raise TopicError(result["error_code"], result["error_message"] or "")
        await self._settle(
            lambda image: len(getattr(image.topics.get_topic(name), "partitions", ())) >= count
        )

    def alter_topic_configs(self, name: str, configs: dict[str, str]) -> asyncio.Task[KafkaError | None]:
        """Replace the topic's overrides (legacy AlterConfigs semantics) in the metadata log. The
        broker already applied them (the registry's ``on_set_configs``); the AlterConfigs handler
        answers after :meth:`settle_config_writes`, once the change is committed and applied,
        as Kafka's controller answers after the commit. Until then the publisher leaves this
        topic's configs alone (an image committed before the change would undo it meanwhile)."""
        request = alter_configs.AlterConfigsRequest(
            resources=(
                alter_configs.AlterConfigsResource(
                    resource_type=i8(CONFIG_RESOURCE_TOPIC),
                    resource_name=name,
                    configs=tuple(alter_configs.AlterableConfig(name=k, value=v) for k, v in configs.items()),
                ),
            ),
            validate_only=False,
        )
        self.pending_config_topics[name] += 1
        task = asyncio.get_running_loop().create_task(self._write_topic_configs(name, configs, request))
        self._config_writes.setdefault(name, set()).add(task)

        def done(t: asyncio.Task[KafkaError | None]) -> None:
            writes = self._config_writes.get(name)
            if writes is not None:
                writes.discard(t)
                if not writes:
                    del self._config_writes[name]

        task.add_done_callback(done)
        return task

    async def _write_topic_configs(
        self, name: str, configs: dict[str, str], request: Any
    ) -> KafkaError | None:
        error: KafkaError | None = None
        try:
            response = await self._call(ALTER_CONFIGS, request)
            result = response["responses"][0]
            if result["error_code"]:
                error = KafkaError(result["error_code"], result["error_message"] or "")
            else:  # (an answer from another node's controller: until this node has it too)
                await self._settle(
                    lambda image: dict(image.configs.configs(CONFIG_RESOURCE_TOPIC, name)) == configs
                )
        except KafkaError as e:
            error = e
        finally:
            self.pending_config_topics[name] -= 1
            if self.pending_config_topics[name] <= 0:
                del self.pending_config_topics[name]
        if error is not None:  # not in the log: back to what the image holds
            log.error("altering the configs of topic %s in the metadata log failed: %s", name, error)
            self.publisher.restore_topic_configs(name)
        return error

    def stored_configs(self, resource_type: int, name: str) -> dict[str, str]:
        """The dynamic configs of a resource in the image applied last."""
        image = self.publisher.image
        return {} if image is None else dict(image.configs.configs(resource_type, name))

    async def alter_resource_configs(self, resource_type: int, name: str, configs: dict[str, str]) -> None:
        """Replace the dynamic configs of a BROKER (``""``: the cluster default) or GROUP resource
        in the metadata log with ``configs`` (validated and normalized by the broker), and return
        once the change is committed and applied here (every broker applies it from its image:
        :class:`BrokerMetadataPublisher`). Raises the controller's error (KafkaError)."""
        request = alter_configs.AlterConfigsRequest(
            resources=(
                alter_configs.AlterConfigsResource(
                    resource_type=i8(resource_type),
                    resource_name=name,
                    configs=tuple(alter_configs.AlterableConfig(name=k, value=v) for k, v in configs.items()),
                ),
            ),
            validate_only=False,
        )
        response = await self._call(ALTER_CONFIGS, request)
        result = response["responses"][0]
        if result["error_code"]:
            raise KafkaError(result["error_code"], result["error_message"] or "")
        await self._settle(lambda image: dict(image.configs.configs(resource_type, name)) == configs)

    async def settle_config_writes(self, names: Iterable[str]) -> dict[str, KafkaError]:
        """Wait until the config changes of these topics asked so far are committed and applied
        here; the failed ones, by topic."""
        errors: dict[str, KafkaError] = {}
        for name in set(names):
            for task in list(self._config_writes.get(name, ())):
                error = await asyncio.shield(task)
                if error is not None:
                    errors[name] = error
        return errors


def _protocol_id(name: str) -> int:
    return {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}.get(name.upper(), 0)


__all__ = ["QUORUM_ENABLE", "BrokerMetadataPublisher", "BrokerQuorum"]
