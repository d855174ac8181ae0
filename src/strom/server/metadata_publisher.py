"""Applies the published metadata images to the broker (Kafka's ``BrokerMetadataPublisher``).

Theory of operation: the :class:`~strom.metadata.loader.MetadataLoader` publishes an image after
each committed batch. During start-up (``live`` false) the image fills the broker's topic registry
directly and the replica manager's ``load_logs`` then opens the logs of the partitions this node
hosts (:meth:`BrokerMetadataPublisher.hosts`: the node is among the partition's replicas; a log
of a partition it does not host is a stray, deleted as Kafka deletes stray replicas); once the
broker is live, images are queued and applied one at a time, in log order, by one asyncio task.

Applying an image: the broker's :class:`~strom.server.metadata_cache.ImageMetadataCache` takes it
first (leadership, brokers), then deleted topics leave the registry and their logs are deleted;
new topics' and partitions' logs are made, for the partitions hosted here only, in a worker
thread and only then are they published in the registry and the replica manager (a topic is
visible only once its local logs exist; a topic with no replica here at once); a partition moved
here by a reassignment gets its log, one moved away loses it (deleted, as Kafka's
``ReplicaManager`` deletes a replica no longer assigned to it); changed topic configs are pushed
to the logs. The dynamic broker configs (the cluster default and this broker's) and the group
configs of the image are applied first, at start-up too (``_apply_configs``). A topic the image
left untouched (the same ``TopicImage`` object) is skipped.
:meth:`BrokerMetadataPublisher.wait_applied` lets a request that changed the metadata answer only
once the broker applied the result.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any

from ..metadata.configs import apply_image_broker_configs
from ..metadata.delta import MetadataDelta
from ..metadata.image import (
    CONFIG_RESOURCE_BROKER,
    CONFIG_RESOURCE_GROUP,
    CONFIG_RESOURCE_TOPIC,
    ConfigurationsImage,
    MetadataImage,
    TopicImage,
)
from ..metadata.topics import TopicInfo
from .metadata_cache import ImageMetadataCache
from .replica_manager import delete_logs

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("strom.kraft")


class BrokerMetadataPublisher:
    """Applies published images to the broker (topics, partitions, topic configs)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.live = False  # False during start-up: the registry is filled, load_logs opens the logs
        self.image: MetadataImage | None = None
        self._queue: asyncio.Queue[tuple[MetadataImage, int]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._applied_offset = -1
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self.published_at: dict[int, float] = {}  # image offset -> loop time published (bench)
        # the topic images last applied: a topic whose image is the same object is unchanged
        self._topic_images: dict[str, TopicImage] = {}
        self._configs_image: ConfigurationsImage | None = None  # the configs last applied

    def hosts(self, topic: str, partition: int) -> bool:
        """Is this node a replica of the partition in the latest image (its log belongs here)?"""
        image = self.image
        t = image.topics.topics_by_name.get(topic) if image is not None else None
        reg = t.partitions.get(partition) if t is not None else None
        return reg is not None and self.broker.node_id in reg.replicas

    def _to_cache(self, image: MetadataImage) -> None:
        cache = self.broker.metadata_cache
        if isinstance(cache, ImageMetadataCache):
            cache.update(image)

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage, manifest: Any) -> None:
        self.image = image
        self.broker.sasl.scram_image = image.scram  # SCRAM logins read it (SaslState.from_image)
        entities = image.client_quotas.entities
        if entities is not getattr(self.broker, "client_quota_entities", None):
            self.broker.client_quota_entities = entities
            self.broker.request_quotas_active = any("request_percentage" in q for q in entities.values())
        authorizer = getattr(self.broker, "authorizer", None)
        if authorizer is not None:  # (the same ACL map as the last image's: skipped)
            authorizer.load(image.acls.acls, source=image.acls.acls)
        if not self.live:
            self._to_cache(image)
            self._apply_configs(image)
            self._reconcile_registry(image)
            self._topic_images = dict(image.topics.topics_by_name)
            self._applied(image.offset)
            return
        self._queue.put_nowait((image, image.offset))

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def go_live(self) -> None:
        self.live = True
        self._task = asyncio.get_running_loop().create_task(self._consume(), name="metadata-publisher")

    def apply_all_partitions(self) -> None:
        """Every partition hosted here takes its registration (at go-live: the logs are open)."""
        image = self.image
        if image is None:
            return
        for name, t in image.topics.topics_by_name.items():
            self._apply_partitions(name, t)

    def _apply_partitions(self, name: str, timage: TopicImage) -> None:
        rm = self.broker.replica_manager
        node = self.broker.node_id
        for p, reg in timage.partitions.items():
            if node in reg.replicas and (name, p) in rm.logs:
                rm.apply_partition(name, p, reg)

    async def wait_applied(self, offset: int) -> None:
        """Until the broker applied the image at ``offset`` or later."""
        if self._applied_offset >= offset:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, fut))
        await fut

    def _applied(self, offset: int) -> None:
        self._applied_offset = max(self._applied_offset, offset)
        self.published_at[offset] = asyncio.get_running_loop().time()
        ready = [(o, f) for o, f in self._waiters if o <= self._applied_offset]
        self._waiters = [(o, f) for o, f in self._waiters if o > self._applied_offset]
        for _, f in ready:
            if not f.done():
                f.set_result(None)

    # -- applying
    @staticmethod
    def _wanted(image: MetadataImage) -> dict[str, tuple[uuid.UUID, int, dict[str, str]]]:
        out = {}
        for name, t in image.topics.topics_by_name.items():
            configs = dict(image.configs.configs(CONFIG_RESOURCE_TOPIC, name))
            out[name] = (t.id, len(t.partitions), configs)
        return out

    def _apply_configs(self, image: MetadataImage) -> None:
        """The dynamic broker configs (the cluster default and this broker's: applied to the
        broker's config values and its logs at once) and the group configs (what the group
        coordinator looks up) of the image. Before the topics: a topic's log config falls back
        to the broker's values."""
        configs = image.configs
        if configs is self._configs_image:
            return
        self._configs_image = configs
        broker = self.broker
        if apply_image_broker_configs(
            broker,
            configs.configs(CONFIG_RESOURCE_BROKER, ""),
            configs.configs(CONFIG_RESOURCE_BROKER, str(broker.node_id)),
        ):
            log.info("applied the dynamic broker configs of the metadata image")
        groups = {
            res.name: data for res, data in configs.resource_data.items() if res.type == CONFIG_RESOURCE_GROUP
        }
        broker.group_configs.replace_all(groups)

    def _reconcile_registry(self, image: MetadataImage) -> None:
        reg = self.broker.topics
        wanted = self._wanted(image)
        for name in [n for n in reg.topics if n not in wanted]:
            reg.delete(name)
        for name, (tid, n, configs) in wanted.items():
            info = reg.get(name)
            if info is None or info.topic_id != tid:
                if info is not None:
                    reg.delete(name)
                reg.create(name, n, configs, topic_id=tid)
            else:
                info.partitions = n
                info.configs = configs

    async def _consume(self) -> None:
        while True:
            image, offset = await self._queue.get()
            try:
                await self._apply(image)
            except Exception:
                log.exception("applying the metadata image at offset %d failed", offset)
            self._applied(offset)

    async def _apply(self, image: MetadataImage) -> None:
        broker = self.broker
        reg = broker.topics
        rm = broker.replica_manager
        node = broker.node_id
        self._to_cache(image)
        self._apply_configs(image)
        wanted = self._wanted(image)
        for name in [n for n, i in reg.topics.items() if n not in wanted or wanted[n][0] != i.topic_id]:
            info = reg.delete(name)
            self._topic_images.pop(name, None)
            rm.remove_partitions(name, info.partitions)
            if broker.share_coordinator is not None:
                broker.share_coordinator.topic_deleted(info.topic_id)
            log.info("deleted topic %s", name)
        by_name = image.topics.topics_by_name
        for name, (tid, n, configs) in wanted.items():
            timage = by_name[name]
            existing = reg.get(name)
            if existing is not None and self._topic_images.get(name) is timage and existing.partitions == n:
                if configs != existing.configs:
                    reg.set_configs(name, configs, notify=False)
                    broker.refresh_log_configs(name)
                continue
            local = [p for p, pr in sorted(timage.partitions.items()) if node in pr.replicas]
            if existing is None:
                pending = TopicInfo(name, tid, n, configs)
                logs = await broker._in_worker(rm.make_partition_logs, pending, local) if local else []
                if reg.get(name) is not None:  # (cannot happen: one apply at a time)
                    delete_logs(logs)
                    continue
                info = reg.create(name, n, configs, topic_id=tid)
                rm.add_logs(info, logs)
                self._topic_images[name] = timage
                self._apply_partitions(name, timage)
                log.info("created topic %s with %d partitions (%d here)", name, n, len(logs))
                continue
            info = existing
            current = info.partitions
            # partitions hosted here without a log: new ones, or moved here by a reassignment
            missing = [
                p for p in local if (name, p) not in rm.logs and (name, p) not in rm.offline_partitions
            ]
            if missing:
                logs = await broker._in_worker(rm.make_partition_logs, info, missing)
                if reg.get(name) is not info:  # (cannot happen: one apply at a time)
                    delete_logs(logs)
                    continue
                rm.add_logs(info, logs)
            if n > current:
                reg.set_partitions(name, n)
            hosted = set(local)
            for p in range(min(current, n)):
                if p not in hosted and ((name, p) in rm.logs or (name, p) in rm.offline_partitions):
                    log.info("%s-%d is no longer hosted here: deleting its log", name, p)
                    rm.remove_replica(name, p)
            self._topic_images[name] = timage
            self._apply_partitions(name, timage)
            newer = broker.quorum is not None and name in broker.quorum.pending_config_topics
            if configs != info.configs and not newer:  # (newer: the broker's change, on its way)
                reg.set_configs(name, configs, notify=False)
                broker.refresh_log_configs(name)
        self._follow_coordinator_leadership()

    def _follow_coordinator_leadership(self) -> None:
        """The group and transaction coordinators serve the partitions of their topic that
        this broker leads: load a partition that became led here, forget one led elsewhere now
        (Kafka's ``onElection``/``onResignation``, called by its metadata publisher)."""
        broker = self.broker
        cache = broker.metadata_cache
        internal = (
            ("__consumer_offsets", broker.group_coordinator),
            ("__transaction_state", broker.txn_coordinator),
        )
        for topic, coord in internal:
            owned = getattr(coord, "owned", None)
            if owned is None:  # not started, or serving every partition
                continue
            count = cache.num_partitions(topic) or 0
            led = {p for p in range(count) if cache.leader_id(topic, p) == broker.node_id}
            for p in sorted(owned - led):
                log.info("no longer the coordinator of %s-%d", topic, p)
                coord.on_resignation(p)
            for p in sorted(led - owned):
                log.info("now the coordinator of %s-%d: loading it", topic, p)
                coord.on_election(p)

    def restore_topic_configs(self, name: str) -> None:
        """A config change of ``name`` did not reach the metadata log: its configs as in the image
        applied last."""
        info = self.broker.topics.get(name)
        if info is None or self.image is None:
            return
        t = self.image.topics.topics_by_name.get(name)
        if t is None or t.id != info.topic_id:
            return
        configs = dict(self.image.configs.configs(CONFIG_RESOURCE_TOPIC, name))
        if configs != info.configs:
            self.broker.topics.set_configs(name, configs, notify=False)
            self.broker.refresh_log_configs(name)


__all__ = ["BrokerMetadataPublisher"]
