"""MirrorMaker 2 on Spark: one Structured Streaming query per flow, plus the driver's tasks.

Theory of operation
-------------------
Flow ``A->B`` reads ``A`` with the ``strom`` data source (``subscribePattern`` built from the topic
filter, ``read_committed``, headers included); the query's offsets live in its checkpoint
(``<state dir>/A->B/checkpoint``). Each micro-batch is written to ``B`` by the driver in **one
Kafka transaction** (``transactional.id = strom-mirror-A->B``): every record to the remote topic's
same partition with its key, value, headers and timestamp, plus, per source partition, the last
mirrored upstream offset in ``mm2-offsets.A.internal`` on ``B`` (Connect's offset record as MM2's
dedicated mode writes it: key ``["MirrorSourceConnector",{"cluster":"A","partition":p,"topic":t}]``,
value ``{"offset":N}``).

Exactly once: the offsets committed with the data are read back (read_committed) when the flow
starts; a record at or below its partition's committed offset is already in ``B`` and is skipped.
So a batch Spark replays after a crash (its transaction committed, the checkpoint's commit not
written) writes nothing twice, and a flow started without a checkpoint resumes after the committed
offsets. A transaction that did not commit is aborted (the next ``InitProducerId`` fences it) and
the replay writes it again.

After the commit the batch's offset syncs go to ``mm2-offset-syncs.B.internal`` (on ``A``, MM2's
default ``offset-syncs.topic.location=source``; inside the transaction when the location is
``target``): the records MM2's rule syncs (a partition's first record, a gap in upstream offsets,
the downstream drifting ``offset.lag.max`` past the last sync, a truncation) plus each partition's
last record, since the batch's commit is where MM2 promotes its delayed sync (the offset commit).
Checkpoints (``A.checkpoints.internal`` on ``B``), heartbeats
(``heartbeats`` on ``B``), topic creation/partition growth/config sync and the consumer-group
offset sync are periodic driver tasks with MM2's intervals.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from strom.mirror.config import FlowConfig, MirrorMakerConfig
from strom.mirror.records import Checkpoint, Heartbeat, OffsetSync, OffsetSyncStore, PartitionState

log = logging.getLogger("strom.mirror")

CONNECTOR = "MirrorSourceConnector"


def _conf(client: dict[str, str], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = dict(client)
    conf.update(extra or {})
    return conf


def read_topic(
    client: dict[str, str], topic: str, timeout_s: float = 15.0
) -> Iterable[tuple[bytes | None, bytes | None]]:
    """Every committed (key, value) of ``topic``, in partition order (a read to the end)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(
        _conf(
            client,
            {
                "group.id": "strom-mirror-reader",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
            },
        )
    )
    out: list[tuple[bytes | None, bytes | None]] = []
    try:
        md = c.list_topics(topic, timeout=timeout_s)
        if topic not in md.topics or md.topics[topic].error is not None:
            return out
        ends = {}
        for p in md.topics[topic].partitions:
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            if hi > lo:
                ends[p] = hi
        if not ends:
            return out
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        pending = set(ends)
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            msgs = c.consume(10000, 0.5)
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == -191:  # _PARTITION_EOF
                        pending.discard(m.partition())
                    continue
                out.append((m.key(), m.value()))
                mp, mo = m.partition(), m.offset()
                if mp is not None and mo is not None and mo + 1 >= ends.get(mp, 0):
                    pending.discard(mp)
            if not msgs:
                for p in list(pending):
                    pos = c.position([TopicPartition(topic, p)])[0].offset
                    if pos >= ends[p]:
                        pending.discard(p)
        if pending:
            raise TimeoutError(f"could not read {topic} to its end within {timeout_s} s")
        return out
    finally:
        c.close()


def offset_key(source_alias: str, topic: str, partition: int) -> bytes:
    return json.dumps(
        [CONNECTOR, {"cluster": source_alias, "partition": partition, "topic": topic}], separators=(",", ":")
    ).encode()


def translate_offsets(
    target_client: dict[str, str],
    source_alias: str,
    group: str,
    separator: str = ".",
    timeout_s: float = 15.0,
) -> dict[tuple[str, int], int]:
    """RemoteClusterUtils.translateOffsets: the latest checkpoint of ``group`` per remote topic
    partition in ``<source_alias>.checkpoints.internal`` on the target cluster."""
    from strom.mirror.policy import ReplicationPolicy

    topic = ReplicationPolicy(separator=separator).checkpoints_topic(source_alias)
    out: dict[tuple[str, int], int] = {}
    for k, v in read_topic(target_client, topic, timeout_s):
        if k is None or v is None:
            continue
        cp = Checkpoint.decode(k, v)
        if cp.group == group:
            out[(cp.topic, cp.partition)] = cp.downstream_offset
    return out


def upstream_clusters(client: dict[str, str], separator: str = ".") -> dict[str, int]:
    """RemoteClusterUtils.upstreamClusters/replicationHops: the clusters replicating into this
    one (directly or through others), from its heartbeats topics, with their hop counts."""
    from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

    from strom.mirror.policy import ReplicationPolicy

    md = AdminClient(_conf(client)).list_topics(timeout=15)
    return ReplicationPolicy(separator=separator).upstream_clusters(list(md.topics))


class Flow:
    """One replication flow ``source->target``: its Spark query and its periodic tasks."""

    def __init__(self, cfg: FlowConfig, state_dir: Path, max_records_per_batch: int | None = None) -> None:
        self.cfg = cfg
        self.state_dir = state_dir / cfg.name
        self.max_records_per_batch = max_records_per_batch
        self.policy = cfg.policy()
        self.filter = cfg.topic_filter()
        self.groups = cfg.group_filter()
        self.src = cfg.source.client
        self.dst = cfg.target.client
        self.source_alias, self.target_alias = cfg.source.alias, cfg.target.alias
        self.offsets_topic = f"mm2-offsets.{self.source_alias}.internal"
        self.syncs_topic = cfg.offset_syncs_topic()
        self.syncs_on_target = cfg.offset_syncs_on_target()
        self.checkpoints_topic = self.policy.checkpoints_topic(self.source_alias)
        self.heartbeats_topic = self.policy.heartbeats_topic()
        self.max_offset_lag = cfg.get_int("offset.lag.max", 0)
        self.emit_syncs = cfg.get_bool("emit.offset-syncs.enabled")
        self.committed: dict[tuple[str, int], int] = {}  # last mirrored upstream offset
        self.sync_states: dict[tuple[str, int], PartitionState] = {}
        self.last_checkpoints: dict[tuple[str, str, int], tuple[int, int]] = {}
        self.checkpoints: dict[str, dict[tuple[str, int], Checkpoint]] = {}
        self.target_partitions: dict[str, int] = {}
        self.query: Any = None
        self.records = 0
        self.bytes = 0
        self.batches = 0
        self.skipped = 0
        self.first_batch_at: float | None = None  # perf_counter() at the first batch's start
        self.last_batch_end = 0.0
        self.collect_s = 0.0  # seconds spent: Spark -> Arrow on the driver
        self.produce_s = 0.0  # building and producing the records
        self.commit_s = 0.0  # flush, offsets, commit
        self.error: str | None = None
        self._producer: Any = None
        self._sync_producer: Any = None
        self._lock = threading.RLock()
        self._admins: dict[str, Any] = {}

    # -- clients

    def admin(self, side: str) -> Any:
        from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

        if side not in self._admins:
            self._admins[side] = AdminClient(_conf(self.src if side == "source" else self.dst))
        return self._admins[side]

    def _producer_for_syncs(self) -> Any:
        from confluent_kafka import Producer

        if self._sync_producer is None:
            self._sync_producer = Producer(_conf(self.src, {"enable.idempotence": True, "linger.ms": 5}))
        return self._sync_producer

    # -- topics

    def ensure_topic(self, side: str, topic: str, partitions: int, rf: int, configs: dict[str, str]) -> None:
        """Creates ``topic`` on the ``side`` cluster unless it exists; ``rf`` -1: the broker's
        default.replication.factor (CreateTopics v4+)."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

        admin = self.admin(side)
        md = admin.list_topics(topic, timeout=15)
        if topic in md.topics and md.topics[topic].error is None:
            return
        fut = admin.create_topics([NewTopic(topic, partitions, rf, config=configs)])[topic]
        try:
            fut.result(30)
        except KafkaException as e:
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise

    def create_internal_topics(self) -> None:
        c = self.cfg
        compact = {"cleanup.policy": "compact"}
        self.ensure_topic(
            "target",
            self.offsets_topic,
            c.get_int("offset.storage.partitions", 1),
            c.get_int("offset.storage.replication.factor"),
            compact,
        )
        if self.emit_syncs:
            self.ensure_topic(
                "target" if self.syncs_on_target else "source",
                self.syncs_topic,
                1,
                c.get_int("offset-syncs.topic.replication.factor"),
                compact,
            )
        if c.interval("emit.checkpoints.interval.seconds", "emit.checkpoints.enabled") is not None:
            self.ensure_topic(
                "target",
                self.checkpoints_topic,
                1,
                c.get_int("checkpoints.topic.replication.factor"),
                compact,
            )
        if c.interval("emit.heartbeats.interval.seconds", "emit.heartbeats.enabled") is not None:
            self.ensure_topic(
                "target", self.heartbeats_topic, 1, c.get_int("heartbeats.topic.replication.factor"), compact
            )

    def source_topics(self) -> dict[str, int]:
        """The source's replicated topics and their partition counts."""
        md = self.admin("source").list_topics(timeout=15)
        return {
            t: len(tm.partitions)
            for t, tm in md.topics.items()
            if tm.error is None and self.filter.should_replicate(t)
        }

    def _source_configs(self, topics: list[str]) -> dict[str, dict[str, str]]:
        from confluent_kafka.admin import ConfigResource, ConfigSource  # type: ignore[attr-defined]

        if not topics:
            return {}
        res = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
        out: dict[str, dict[str, str]] = {}
        for r, fut in self.admin("source").describe_configs(res).items():
            entries = fut.result(30)
            out[r.name] = {
                name: e.value
                for name, e in entries.items()
                if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
                and not e.is_sensitive
                and e.value is not None
                and not self.cfg.config_excluded(name)
            }
        return out

    def sync_topics(self, topics: dict[str, int] | None = None, configs: bool = True) -> None:
        """Create missing remote topics, grow their partitions, and (``configs``) copy the source's
        non-default topic configs (MM2: ``use.defaults.from=target``) to them."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import (  # type: ignore[attr-defined]
            AlterConfigOpType,
            ConfigEntry,
            ConfigResource,
            NewPartitions,
            NewTopic,
        )

        with self._lock:
            topics = self.source_topics() if topics is None else topics
            if not topics:
                return
            admin = self.admin("target")
            md = admin.list_topics(timeout=15)
            existing = {t: len(tm.partitions) for t, tm in md.topics.items() if tm.error is None}
            remote = {t: self.policy.format_remote_topic(self.source_alias, t) for t in topics}
            want_configs = configs and self.cfg.get_bool("sync.topic.configs.enabled")
            src_configs = (
                self._source_configs(list(topics))
                if want_configs or any(remote[t] not in existing for t in topics)
                else {}
            )
            new = [
                NewTopic(remote[t], n, self.cfg.get_int("replication.factor"), config=src_configs.get(t, {}))
                for t, n in topics.items()
                if remote[t] not in existing
            ]
            if new:
                for name, fut in admin.create_topics(new).items():
                    try:
                        fut.result(30)
                        log.info("%s: created %s", self.cfg.name, name)
                    except KafkaException as e:
                        if "TOPIC_ALREADY_EXISTS" not in str(e):
                            raise
            grow = {
                remote[t]: NewPartitions(remote[t], n)
                for t, n in topics.items()
                if remote[t] in existing and existing[remote[t]] < n
            }
            if grow:
                for name, fut in admin.create_partitions(list(grow.values())).items():
                    try:
                        fut.result(30)
                        log.info(
                            "%s: %s grown to %d partitions", self.cfg.name, name, grow[name].new_total_count
                        )
                    except KafkaException as e:
                        if "INVALID_PARTITIONS" not in str(e):
                            raise
            if want_configs:
                res = []
                for t in topics:
                    if remote[t] not in existing:
                        continue
                    cfgs = src_configs.get(t, {})
                    if not cfgs:
                        continue
                    r = ConfigResource(
                        ConfigResource.Type.TOPIC,
                        remote[t],
                        incremental_configs=[
                            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                            for k, v in cfgs.items()
                        ],
                    )
                    res.append(r)
                if res:
                    for _r, fut in admin.incremental_alter_configs(res).items():
                        fut.result(30)
            for t, n in topics.items():
                self.target_partitions[remote[t]] = max(n, existing.get(remote[t], 0))

    # -- offsets

    def load_committed(self) -> None:
        committed: dict[tuple[str, int], int] = {}
        for k, v in read_topic(self.dst, self.offsets_topic):
            if k is None:
                continue
            try:
                name, part = json.loads(k)
            except (ValueError, TypeError):
                continue
            if name != CONNECTOR or part.get("cluster") != self.source_alias:
                continue
            tp = (str(part["topic"]), int(part["partition"]))
            if v is None:
                committed.pop(tp, None)
            else:
                committed[tp] = int(json.loads(v)["offset"])
        self.committed = committed

    def starting_offsets(self) -> str:
        if not self.committed:
            return "earliest"
        topics = self.source_topics()
        out: dict[str, dict[str, int]] = {}
        for t, n in topics.items():
            out[t] = {str(p): self.committed.get((t, p), -3) + 1 for p in range(n)}  # -2: earliest
        return json.dumps(out) if out else "earliest"

    # -- the query

    def _init_producer(self) -> None:
        from confluent_kafka import Producer

        if self._producer is None:
            self._producer = Producer(
                _conf(
                    self.dst,
                    {
                        "transactional.id": f"strom-mirror-{self.cfg.name}",
                        "linger.ms": 5,
                        "batch.size": 1 << 20,
                        "queue.buffering.max.messages": 1_000_000,
                        "queue.buffering.max.kbytes": 1 << 20,
                        "partitioner": "murmur2_random",
                        "compression.type": "none",
                    },
                )
            )
            self._producer.init_transactions(60)

    def prepare(self) -> None:
        """Internal topics, the committed offsets, the remote topics, the transactional producer."""
        if self.cfg.get_bool("sync.topic.acls.enabled"):
            log.info("%s: sync.topic.acls.enabled is set, but strom mirror does not copy ACLs", self.cfg.name)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.create_internal_topics()
        self.load_committed()
        self.sync_topics()
        self._init_producer()

    def start(self, spark: Any, once: bool = False, trigger_ms: int = 1000) -> Any:
        """Start the query (call :meth:`prepare` first). Without a checkpoint it starts after the
        offsets committed with the mirrored data (Spark wants every partition of the pattern
        named then: a matching topic created between this call and the query's first batch
        makes the query fail at start, and a restart resolves it)."""
        from strom.spark import StromDataSource

        spark.dataSource.register(StromDataSource)
        has_checkpoint = (self.state_dir / "checkpoint" / "offsets").is_dir()
        reader = (
            spark.readStream.format("strom")
            .option("kafka.bootstrap.servers", self.src["bootstrap.servers"])
            .option("subscribePattern", self.filter.subscribe_pattern())
            .option("startingOffsets", "earliest" if has_checkpoint else self.starting_offsets())
            .option("includeHeaders", "true")
            .option("failOnDataLoss", "false")
            .option("kafka.isolation.level", "read_committed")
        )
        for k, v in self.src.items():
            if k != "bootstrap.servers":
                reader = reader.option(f"kafka.{k}", v)
        if self.max_records_per_batch:
            reader = reader.option("maxOffsetsPerTrigger", str(self.max_records_per_batch))
        df = reader.load().selectExpr(
            "key", "value", "topic", "partition", "offset", "unix_millis(timestamp) AS ts", "headers"
        )

        def guarded(batch_df: Any, batch_id: int) -> None:
            try:
                t0 = time.perf_counter()
                if self.first_batch_at is None:
                    self.first_batch_at = t0
                table = batch_df.toArrow()
                self.collect_s += time.perf_counter() - t0
                self.mirror_batch(table, batch_id)
                self.last_batch_end = time.perf_counter()
            except Exception as e:
                self.error = f"{type(e).__name__}: {e}"
                log.error("flow %s: batch %d failed: %s", self.cfg.name, batch_id, e)
                raise

        w = df.writeStream.foreachBatch(guarded).option(
            "checkpointLocation", str(self.state_dir / "checkpoint")
        )
        w = w.queryName(f"mirror-{self.source_alias}-{self.target_alias}")
        w = w.trigger(availableNow=True) if once else w.trigger(processingTime=f"{trigger_ms} milliseconds")
        self.query = w.start()
        return self.query

    def mirror_batch(self, table: Any, batch_id: int) -> None:
        """Write one micro-batch (an Arrow table of the source's rows) to the target, exactly once."""
        import pyarrow.compute as pc

        if table.num_rows == 0:
            return
        order = pc.sort_indices(
            table, sort_keys=[("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")]
        )
        table = table.take(order)
        topics = table.column("topic").to_pylist()
        parts = table.column("partition").to_pylist()
        offsets = table.column("offset").to_pylist()
        keys = table.column("key").to_pylist()
        values = table.column("value").to_pylist()
        tss = table.column("ts").to_pylist()
        headers = table.column("headers").to_pylist()
        n = len(topics)
        # partition boundaries
        spans: list[tuple[str, int, int, int]] = []  # topic, partition, start row, end row
        i = 0
        while i < n:
            j = i
            while j < n and topics[j] == topics[i] and parts[j] == parts[i]:
                j += 1
            spans.append((topics[i], parts[i], i, j))
            i = j
        with self._lock:
            need: dict[str, int] = {}
            for t, p, _s, _e in spans:
                rt = self.policy.format_remote_topic(self.source_alias, t)
                if self.target_partitions.get(rt, 0) <= p:
                    need[t] = max(need.get(t, 0), p + 1)
            if need:
                counts = self.source_topics()
                self.sync_topics({t: max(counts.get(t, 0), m) for t, m in need.items()}, configs=False)
        self._init_producer()
        prod = self._producer
        # delivery reports come in order within a partition (idempotent producer), so the
        # downstream offsets of (remote topic, partition) line up with the upstream ones
        delivered: dict[tuple[str, int], list[int]] = {}
        failures: list[str] = []

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                delivered[(msg.topic(), msg.partition())].append(msg.offset())
            else:
                failures.append(str(err))

        upstream: dict[tuple[str, int], tuple[str, list[int]]] = {}
        nbytes = 0
        written = 0
        last: dict[tuple[str, int], int] = {}
        produce = prod.produce
        prod.begin_transaction()
        t0 = time.perf_counter()
        try:
            for t, p, s, e in spans:
                done = self.committed.get((t, p), -1)
                if not self.filter.should_replicate(t):
                    continue
                remote = self.policy.format_remote_topic(self.source_alias, t)
                first = s
                while first < e and offsets[first] <= done:
                    first += 1
                self.skipped += first - s
                if first == e:
                    continue
                delivered[(remote, p)] = []
                upstream[(t, p)] = (remote, offsets[first:e])
                for r in range(first, e):
                    h = headers[r]
                    hs = [(x["key"], x["value"]) for x in h] if h else None
                    k, v = keys[r], values[r]
                    nbytes += (len(k) if k else 0) + (len(v) if v else 0)
                    while True:
                        try:
                            produce(
                                remote,
                                value=v,
                                key=k,
                                partition=p,
                                timestamp=tss[r] or 0,
                                headers=hs,
                                on_delivery=on_delivery,
                            )
                            break
                        except BufferError:
                            prod.poll(0.05)
                    written += 1
                last[(t, p)] = offsets[e - 1]
            t1 = time.perf_counter()
            self.produce_s += t1 - t0
            left = prod.flush(120)
            if left or failures:
                raise RuntimeError(
                    f"{left or len(failures)} records were not written to {self.target_alias}"
                    + (f": {failures[0]}" if failures else "")
                )
            downstream: dict[tuple[str, int], list[int]] = {}
            for tp, (remote, ups) in upstream.items():
                downs = delivered[(remote, tp[1])]
                if len(downs) != len(ups):
                    raise RuntimeError(f"{len(downs)} delivery reports for {len(ups)} records of {remote}")
                pairs = [0] * (2 * len(ups))
                pairs[0::2], pairs[1::2] = ups, downs
                downstream[tp] = pairs
            syncs = self._offset_syncs(downstream) if self.emit_syncs else []
            for sync in syncs:
                if self.syncs_on_target:
                    prod.produce(self.syncs_topic, key=sync.key(), value=sync.value(), partition=0)
            for (t, p), off in last.items():
                prod.produce(
                    self.offsets_topic,
                    key=offset_key(self.source_alias, t, p),
                    value=json.dumps({"offset": off}, separators=(",", ":")).encode(),
                )
            prod.commit_transaction(120)
            self.commit_s += time.perf_counter() - t1
        except BaseException:
            try:
                prod.abort_transaction(60)
            except Exception as e:  # the producer may be fenced; the replay starts over
                log.warning("flow %s: abort failed: %s", self.cfg.name, e)
                self._producer = None
            raise
        self.committed.update(last)
        self.records += written
        self.bytes += nbytes
        self.batches += 1
        if syncs and not self.syncs_on_target:
            sp = self._producer_for_syncs()
            for sync in syncs:
                sp.produce(self.syncs_topic, key=sync.key(), value=sync.value(), partition=0)
            sp.flush(30)

    def _offset_syncs(self, downstream: dict[tuple[str, int], list[int]]) -> list[OffsetSync]:
        syncs = []
        for (t, p), pairs in downstream.items():
            if not pairs:
                continue
            st = self.sync_states.setdefault((t, p), PartitionState(self.max_offset_lag))
            for i in range(0, len(pairs), 2):
                if st.update(pairs[i], pairs[i + 1]) and i + 2 < len(pairs):
                    syncs.append(OffsetSync(t, p, pairs[i], pairs[i + 1]))
            # the batch's end is MM2's offset commit: the delayed sync is promoted, so the last
            # record of each partition is synced too
            syncs.append(OffsetSync(t, p, pairs[-2], pairs[-1]))
        return syncs

    # -- periodic tasks

    def emit_heartbeat(self) -> None:
        from confluent_kafka import Producer

        p = Producer(_conf(self.dst, {"linger.ms": 0}))
        hb = Heartbeat(self.source_alias, self.target_alias, int(time.time() * 1000))
        p.produce(self.heartbeats_topic, key=hb.key(), value=hb.value(), partition=0)
        p.flush(30)

    def read_offset_syncs(self) -> OffsetSyncStore:
        store = OffsetSyncStore()
        for k, v in read_topic(self.dst if self.syncs_on_target else self.src, self.syncs_topic):
            if k is None or v is None:
                continue
            store.add(OffsetSync.decode(k, v))
        return store

    def emit_checkpoints(self) -> list[Checkpoint]:
        """MirrorCheckpointTask: translate the source groups' committed offsets and write the new
        checkpoints to ``<source>.checkpoints.internal`` on the target."""
        from confluent_kafka import ConsumerGroupTopicPartitions, Producer

        store = self.read_offset_syncs()
        admin = self.admin("source")
        groups = [g.group_id for g in admin.list_consumer_groups().result(30).valid]
        groups = [g for g in groups if self.groups.should_replicate(g)]
        out: list[Checkpoint] = []
        for g in groups:
            res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g)])[g].result(30)
            cps: dict[tuple[str, int], Checkpoint] = {}
            for tp in res.topic_partitions or []:
                if tp.offset is None or tp.offset < 0 or not self.filter.should_replicate(tp.topic):
                    continue
                d = store.translate(tp.topic, tp.partition, tp.offset)
                if d is None or d < 0:
                    continue
                remote = self.policy.format_remote_topic(self.source_alias, tp.topic)
                cp = Checkpoint(g, remote, tp.partition, tp.offset, d, tp.metadata or "")
                cps[(remote, tp.partition)] = cp
                key = (g, remote, tp.partition)
                if self.last_checkpoints.get(key) != (tp.offset, d):
                    out.append(cp)
            if cps:
                self.checkpoints[g] = cps
        if out:
            p = Producer(_conf(self.dst, {"enable.idempotence": True, "linger.ms": 5}))
            for cp in out:
                p.produce(self.checkpoints_topic, key=cp.key(), value=cp.value(), partition=0)
            left = p.flush(30)
            if left:
                raise RuntimeError(f"{left} checkpoints not written to {self.checkpoints_topic}")
            for cp in out:
                self.last_checkpoints[(cp.group, cp.topic, cp.partition)] = (
                    cp.upstream_offset,
                    cp.downstream_offset,
                )
        return out

    def sync_group_offsets(self) -> dict[str, dict[tuple[str, int], int]]:
        """MirrorCheckpointTask.syncGroupOffset: commit the translated offsets to the target's
        group when it is not active there (empty or unknown), never moving an offset back."""
        from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, TopicPartition

        admin = self.admin("target")
        done: dict[str, dict[tuple[str, int], int]] = {}
        if not self.checkpoints:
            return done
        listed = {g.group_id: g.state for g in admin.list_consumer_groups().result(30).valid}
        for g, cps in self.checkpoints.items():
            state = listed.get(g)
            if state is not None and state not in (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD):
                log.debug(
                    "%s: group %s is %s on %s; offsets not synced", self.cfg.name, g, state, self.target_alias
                )
                continue
            current: dict[tuple[str, int], int] = {}
            if state is not None:
                res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g)])[g].result(30)
                current = {
                    (tp.topic, tp.partition): tp.offset for tp in res.topic_partitions or [] if tp.offset >= 0
                }
            commit = []
            for (t, p), cp in cps.items():
                if current.get((t, p), -1) >= cp.downstream_offset:
                    continue
                tp = TopicPartition(t, p, cp.downstream_offset)
                if cp.metadata:
                    tp = TopicPartition(t, p, cp.downstream_offset, metadata=cp.metadata)
                commit.append(tp)
            if commit:
                admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(g, commit)])[g].result(30)
                done[g] = {(tp.topic, tp.partition): tp.offset for tp in commit}
        return done

    def lag(self) -> dict[tuple[str, int], int]:
        """Per source partition: records in the source not yet mirrored (high watermark based)."""
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer(_conf(self.src, {"group.id": "strom-mirror-lag", "enable.auto.commit": False}))
        try:
            out = {}
            for t, n in self.source_topics().items():
                for p in range(n):
                    _lo, hi = c.get_watermark_offsets(TopicPartition(t, p), timeout=10)
                    out[(t, p)] = max(0, hi - (self.committed.get((t, p), -1) + 1))
            return out
        finally:
            c.close()

    def stop(self) -> None:
        if self.query is not None:
            try:
                self.query.stop()
            except Exception as e:
                log.debug("stopping %s: %s", self.cfg.name, e)
            self.query = None
        self._producer = None  # librdkafka's threads and connections go with it
        self._admins.clear()
        if self._sync_producer is not None:
            self._sync_producer.flush(10)
            self._sync_producer = None


class MirrorMaker:
    """The flows of an mm2.properties in one process, their queries and periodic tasks."""

    def __init__(
        self, cfg: MirrorMakerConfig, state_dir: Path, max_records_per_batch: int | None = None
    ) -> None:
        self.cfg = cfg
        self.flows = [Flow(f, Path(state_dir), max_records_per_batch) for f in cfg.flows]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, spark: Any, once: bool = False, trigger_ms: int = 1000) -> None:
        for f in self.flows:  # every flow's internal topics exist before any query lists topics
            f.prepare()
        for f in self.flows:
            f.start(spark, once, trigger_ms)
        if not once:
            self._thread = threading.Thread(target=self._tasks, name="strom-mirror-tasks", daemon=True)
            self._thread.start()

    def run_once(self, spark: Any) -> None:
        """Mirror what is there now (availableNow), then run each periodic task once."""
        for f in self.flows:
            f.prepare()
        for f in self.flows:
            f.start(spark, once=True)
        for f in self.flows:
            f.query.awaitTermination()
            exc = f.query.exception()
            f.query = None
            if exc is not None:
                raise RuntimeError(f"flow {f.cfg.name} failed: {f.error or exc}")
        try:
            for f in self.flows:
                self.run_tasks(f)
        finally:
            for f in self.flows:
                f.stop()

    def run_tasks(self, f: Flow) -> None:
        c = f.cfg
        if c.interval("emit.heartbeats.interval.seconds", "emit.heartbeats.enabled") is not None:
            f.emit_heartbeat()
        if c.interval("emit.checkpoints.interval.seconds", "emit.checkpoints.enabled") is not None:
            f.emit_checkpoints()
            if c.interval("sync.group.offsets.interval.seconds", "sync.group.offsets.enabled") is not None:
                f.sync_group_offsets()

    def _tasks(self) -> None:
        schedule: list[tuple[Flow, float, Callable[[], Any]]] = []
        for f in self.flows:
            c = f.cfg
            for key, enabled, fn in (
                ("emit.heartbeats.interval.seconds", "emit.heartbeats.enabled", f.emit_heartbeat),
                ("emit.checkpoints.interval.seconds", "emit.checkpoints.enabled", f.emit_checkpoints),
                ("sync.group.offsets.interval.seconds", "sync.group.offsets.enabled", f.sync_group_offsets),
                (
                    "refresh.topics.interval.seconds",
                    "refresh.topics.enabled",
                    lambda f=f: f.sync_topics(configs=False),
                ),
                ("sync.topic.configs.interval.seconds", "sync.topic.configs.enabled", f.sync_topics),
            ):
                iv = c.interval(key, enabled)
                if iv is not None:
                    schedule.append((f, max(iv, 0.1), fn))
        due = [time.monotonic() + iv for _f, iv, _fn in schedule]
        while not self._stop.is_set():
            now = time.monotonic()
            for i, (f, iv, fn) in enumerate(schedule):
                if now >= due[i]:
                    due[i] = now + iv
                    try:
                        fn()
                    except Exception as e:
                        log.warning("flow %s: %s failed: %s", f.cfg.name, getattr(fn, "__name__", fn), e)
            self._stop.wait(min((d - time.monotonic() for d in due), default=1.0) if due else 1.0)

    def failed(self) -> str | None:
        for f in self.flows:
            q = f.query
            if q is not None and q.exception() is not None:
                return f"flow {f.cfg.name} failed: {f.error or q.exception()}"
        return None

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        for f in self.flows:
            f.stop()
