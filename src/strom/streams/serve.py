"""The state server: Kafka Streams' Interactive Queries over strom topics, without Spark.

    strom streams serve --bootstrap-server B --application-id APP \\
        --application-server HOST:PORT [--port P] \\
        --table NAME=TOPIC[:VALUE_FORMAT[:KEY_FORMAT]] ... \\
        --windowed-table NAME=TOPIC[:VALUE_FORMAT[:KEY_FORMAT]][@SIZE_MS] ... \\
        [--num-standby-replicas N] [--session-timeout-ms MS]
    python -m strom.streams.serve ...            (the same)

Every instance of one application joins the consumer group ``group.id = APP`` subscribed to
all table topics and materialises the partitions it is assigned, reading each from the
beginning (the topics are compacted changelogs; nothing is committed). Which instance owns
which partition comes from the group coordinator itself: each member's ``client.id`` carries
its ``application.server`` (``strom-iq@HOST:PORT``) and DescribeGroups returns every member's
``client.id`` with its assignment, so an instance learns the whole assignment from the same
authority that made it (refreshed every ``--metadata-refresh-ms`` and on each of its own
rebalances). librdkafka gives no hook into the subscription userdata where Kafka Streams puts
``application.server``; the coordinator's member list is the equivalent.

HTTP (JSON):
    GET /tables                              tables, owned partitions and their positions
    GET /tables/{t}/keys/{k}                 lookup (forwarded to the owner when it is another)
    GET /tables/{t}/range?from=&to=          key range over all partitions, all instances
    GET /tables/{t}/windows/{k}?from=&to=    windows of k starting in [from, to] (epoch ms)
    GET /metadata/{t}/{k}                    queryMetadataForKey: partition, active host

The partition of a key is ``murmur2(key bytes) % partitions`` (Kafka's default partitioner),
of a windowed key the murmur2 of its inner key. Every answer names the position(s) it is
consistent with: ``{"topic", "partition", "offset"}`` where ``offset`` is the next offset to
apply (every record below it is reflected). A partition that is being rebalanced or is still
restoring (has not reached the end offset seen at assignment) is answered from the local
standby copy when ``--num-standby-replicas`` ≥ 1 (``"standby": true``), else with 503 and
``Retry-After`` — never silently stale data.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import os
import signal
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn

from strom.streams.iq_store import (
    PartitionStore,
    SpecError,
    TableSpec,
    decode_url_key,
    parse_table_spec,
    partition_of,
    render,
)

__all__ = ["StateServer", "add_parser", "main", "run"]

log = logging.getLogger("strom.streams.serve")

CLIENT_ID_PREFIX = "strom-iq@"
FORWARDED_HEADER = "X-Strom-Forwarded"
RETRY_AFTER_S = 1

TP = tuple[str, int]
Answer = tuple[int, dict[str, Any]]


class Unavailable(Exception):
    """A partition cannot be answered here now (rebalance/restoring): 503 + Retry-After."""


def _die(kind: str) -> NoReturn:
    """A consumer thread failed: its stores would freeze while still answering, so the process
    ends (exit 70) and the group gives its partitions to the other instances."""
    log.exception("the %s consumer failed; exiting", kind)
    logging.shutdown()
    os._exit(70)


def _make_consumer(conf: dict[str, Any]) -> Any:
    """A confluent-kafka consumer; a bad setting is a SpecError (exit 2), not a dead thread."""
    from confluent_kafka import Consumer, KafkaException

    try:
        return Consumer(conf)
    except (KafkaException, ValueError, TypeError) as e:
        raise SpecError(f"consumer configuration: {e}") from None


class Replica:
    """Stores fed by one consumer thread (the active group member, or the standby copy)."""

    def __init__(self, kind: str, windowed_topics: set[str]) -> None:
        self.kind = kind
        self.windowed_topics = windowed_topics
        self.lock = threading.Lock()
        self.stores: dict[TP, PartitionStore] = {}
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def ready_store(self, tp: TP) -> PartitionStore | None:
        s = self.stores.get(tp)
        return s if s is not None and s.ready else None

    def _consume(self, consumer: Any) -> None:
        from confluent_kafka import KafkaError

        while not self.stop.is_set():
            msgs = consumer.consume(num_messages=500, timeout=0.1)
            if not msgs:
                continue
            with self.lock:
                for m in msgs:
                    tp = (m.topic(), m.partition())
                    store = self.stores.get(tp)
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF and store is not None:
                            store.reached(m.offset())
                        elif err.code() != KafkaError._PARTITION_EOF:
                            log.warning("%s consumer: %s", self.kind, err)
                        continue
                    if store is not None:
                        store.apply(m.key(), m.value(), m.offset())

    def _new_store(self, consumer: Any, tp: TP) -> PartitionStore:
        from confluent_kafka import TopicPartition

        low, high = consumer.get_watermark_offsets(TopicPartition(tp[0], tp[1]), timeout=10)
        s = PartitionStore(tp[0], tp[1], tp[0] in self.windowed_topics, target=high, position=low)
        s.check_ready()
        return s


class ActiveReplica(Replica):
    def __init__(self, conf: dict[str, Any], topics: list[str], windowed: set[str],
                 on_change: Callable[[], None]) -> None:
        super().__init__("active", windowed)
        self.conf = conf
        self.topics = topics
        self.on_change = on_change
        self.generation = 0
        self.assigned: set[TP] = set()

    def start(self) -> None:
        consumer = _make_consumer(self.conf)
        self.thread = threading.Thread(target=self._run, args=(consumer,), name="iq-active", daemon=True)
        self.thread.start()

    def _run(self, consumer: Any) -> None:
        from confluent_kafka import OFFSET_BEGINNING

        # stores of the partitions revoked by the rebalance under way: one that comes back to this
        # instance continues from its position instead of restoring from the beginning (only
        # across one rebalance, seconds; never long enough for compaction to drop a tombstone
        # it has not seen, delete.retention.ms)
        kept: dict[TP, PartitionStore] = {}

        def on_assign(c: Any, parts: list[Any]) -> None:
            stores = {}
            for p in parts:
                tp = (p.topic, p.partition)
                if tp in kept:
                    stores[tp] = kept[tp]
                    p.offset = kept[tp].position
                else:
                    p.offset = OFFSET_BEGINNING
                    stores[tp] = self._new_store(c, tp)
            kept.clear()
            with self.lock:
                self.stores = stores
                self.assigned = set(stores)
                self.generation += 1
            c.assign(parts)
            log.info("assigned %s", sorted(stores))
            self.on_change()

        def on_revoke(c: Any, parts: list[Any]) -> None:
            with self.lock:
                kept.update(self.stores)
                self.stores = {}
                self.assigned = set()
                self.generation += 1
            c.unassign()
            self.on_change()

        try:
            consumer.subscribe(self.topics, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
            self._consume(consumer)
        except BaseException:
            _die(self.kind)
        consumer.close()


class StandbyReplica(Replica):
    """A copy of every partition of every table, kept by a consumer outside the group."""

    def __init__(self, conf: dict[str, Any], windowed: set[str]) -> None:
        super().__init__("standby", windowed)
        self.conf = conf
        self.pending: list[TP] = []

    def start(self, tps: Iterable[TP]) -> None:
        self.pending = list(tps)
        consumer = _make_consumer(self.conf)
        self.thread = threading.Thread(target=self._run, args=(consumer,), name="iq-standby", daemon=True)
        self.thread.start()

    def _run(self, consumer: Any) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        try:
            stores = {tp: self._new_store(consumer, tp) for tp in self.pending}
        except BaseException:
            _die(self.kind)
        with self.lock:
            self.stores = stores
        try:
            consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in self.pending])
            self._consume(consumer)
        except BaseException:
            _die(self.kind)
        consumer.close()


class Directory:
    """Partition counts and the group's assignment (partition -> application.server), from the
    coordinator's DescribeGroups; ``stable`` is false while the group rebalances."""

    def __init__(self, admin_conf: dict[str, Any], group: str, topics: list[str], refresh_s: float) -> None:
        self.admin_conf = admin_conf
        self.group = group
        self.topics = topics
        self.refresh_s = refresh_s
        self.lock = threading.Lock()
        self.partitions: dict[str, int] = {}
        self.owners: dict[TP, str] = {}
        self.stable = False
        self.state = "Unknown"
        self.wake = threading.Event()
        self.stop = threading.Event()
        self.admin: Any = None

    def load_partitions(self, timeout: float = 30.0) -> dict[str, int]:
        from confluent_kafka.admin import AdminClient

        self.admin = AdminClient(self.admin_conf)
        deadline = time.monotonic() + timeout
        while True:
            md = self.admin.list_topics(timeout=10)
            counts = {t: len(md.topics[t].partitions) for t in self.topics
                      if t in md.topics and md.topics[t].error is None and md.topics[t].partitions}
            missing = [t for t in self.topics if t not in counts]
            if not missing:
                with self.lock:
                    self.partitions = counts
                return counts
            if time.monotonic() > deadline:
                raise SpecError(f"topic(s) not found: {', '.join(missing)}")
            time.sleep(0.5)

    def start(self) -> None:
        threading.Thread(target=self._run, name="iq-directory", daemon=True).start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.refresh()
            except Exception as e:  # the coordinator may be moving; keep the last map, unstable
                log.warning("describing group %s failed: %s", self.group, e)
                with self.lock:
                    self.stable = False
            self.wake.wait(self.refresh_s)
            self.wake.clear()

    def refresh(self) -> None:
        from confluent_kafka import ConsumerGroupState

        desc = self.admin.describe_consumer_groups([self.group], request_timeout=10)[self.group].result()
        owners: dict[TP, str] = {}
        for m in desc.members:
            cid = m.client_id or ""
            if not cid.startswith(CLIENT_ID_PREFIX) or m.assignment is None:
                continue
            server = cid[len(CLIENT_ID_PREFIX):]
            for tp in m.assignment.topic_partitions:
                owners[(tp.topic, tp.partition)] = server
        stable = desc.state == ConsumerGroupState.STABLE
        with self.lock:
            self.owners = owners
            self.stable = stable
            self.state = desc.state.name if hasattr(desc.state, "name") else str(desc.state)

    def owner(self, tp: TP) -> str | None:
        with self.lock:
            return self.owners.get(tp) if self.stable else None


class _Forwarder:
    """Keep-alive HTTP/1.1 connections to the other instances (asyncio; a pool per instance)."""

    def __init__(self, timeout: float = 5.0) -> None:
        self.timeout = timeout
        self.idle: dict[str, list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}

    async def get(self, server: str, path: str) -> tuple[int, dict[str, Any]]:
        return await asyncio.wait_for(self._get(server, path), self.timeout)

    async def _get(self, server: str, path: str) -> tuple[int, dict[str, Any]]:
        pool = self.idle.setdefault(server, [])
        for attempt in (0, 1):
            fresh = not pool
            if fresh:
                host, _, port = server.rpartition(":")
                reader, writer = await asyncio.open_connection(host, int(port))
            else:
                reader, writer = pool.pop()
            try:
                req = f"GET {path} HTTP/1.1\r\nHost: {server}\r\n{FORWARDED_HEADER}: 1\r\n\r\n"
                writer.write(req.encode())
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                status = int(lines[0].split(" ", 2)[1])
                length = 0
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                pool.append((reader, writer))
                return status, json.loads(body)
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, IndexError):
                writer.close()
                if fresh or attempt:
                    raise
                # a pooled connection the peer closed (restarted?): drop the others, retry fresh
                for _, w in pool:
                    w.close()
                pool.clear()
        raise AssertionError("unreachable")


class StateServer:
    def __init__(
        self,
        bootstrap: str,
        application_id: str,
        application_server: str,
        tables: list[TableSpec],
        num_standby_replicas: int = 0,
        session_timeout_ms: int = 45000,
        metadata_refresh_ms: int = 1000,
        extra_conf: dict[str, str] | None = None,
    ) -> None:
        if not tables:
            raise SpecError("no tables: give at least one --table or --windowed-table")
        names = [t.name for t in tables]
        if len(set(names)) != len(names):
            raise SpecError(f"duplicate table names in {names}")
        host, sep, port = application_server.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise SpecError(f"--application-server {application_server!r}: expected HOST:PORT")
        self.tables = {t.name: t for t in tables}
        self.topics = sorted({t.topic for t in tables})
        self.windowed_topics = {t.topic for t in tables if t.windowed}
        self.me = application_server
        self.application_id = application_id
        base = {"bootstrap.servers": bootstrap, **(extra_conf or {})}
        consumer = {
            **base,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "partition.assignment.strategy": "range",
            "session.timeout.ms": session_timeout_ms,
        }
        self.directory = Directory(base, application_id, self.topics, metadata_refresh_ms / 1000)
        self.active = ActiveReplica(
            {**consumer, "group.id": application_id, "client.id": CLIENT_ID_PREFIX + application_server},
            self.topics, self.windowed_topics, self.directory.wake.set,
        )
        self.standby: StandbyReplica | None = None
        if num_standby_replicas > 0:
            self.standby = StandbyReplica(
                {**consumer, "group.id": f"{application_id}-standby-{application_server}",
                 "client.id": f"strom-iq-standby@{application_server}"},
                self.windowed_topics,
            )
        self.forwarder = _Forwarder()

    def start(self) -> None:
        _make_consumer(self.active.conf).close()  # a bad client setting fails here, before waiting
        counts = self.directory.load_partitions()
        self.directory.start()
        self.active.start()
        if self.standby is not None:
            self.standby.start((t, p) for t in self.topics for p in range(counts[t]))

    def close(self) -> None:
        self.directory.stop.set()
        self.directory.wake.set()
        for r in (self.active, self.standby):
            if r is not None:
                r.stop.set()
                if r.thread is not None:
                    r.thread.join(timeout=15)

    # -- queries -----------------------------------------------------------------------------

    def _table(self, name: str) -> TableSpec:
        t = self.tables.get(name)
        if t is None:
            raise LookupError(f"no table {name!r} (tables: {', '.join(sorted(self.tables))})")
        return t

    def _tp_for(self, t: TableSpec, key: bytes) -> TP:
        n = self.directory.partitions.get(t.topic)
        if not n:
            raise Unavailable(f"partition count of {t.topic} not known yet")
        return (t.topic, partition_of(key, n))

    def _local(self, tp: TP) -> tuple[Replica, PartitionStore] | None:
        """A ready store for ``tp`` here: the active one, else (flagged) the standby copy."""
        s = self.active.ready_store(tp)
        if s is not None:
            return self.active, s
        if self.standby is not None:
            s = self.standby.ready_store(tp)
            if s is not None:
                return self.standby, s
        return None

    def _why_unavailable(self, tp: TP) -> str:
        s = self.active.stores.get(tp)
        if s is not None:
            return (f"partition {tp[0]}-{tp[1]} is restoring here (at offset {s.position} of "
                    f"{s.target}); try again")
        return f"partition {tp[0]}-{tp[1]} is being rebalanced (group {self.directory.state}); try again"

    def _position(self, replica: Replica, s: PartitionStore) -> dict[str, Any]:
        return {"topic": s.topic, "partition": s.partition, "offset": s.position}

    async def _route(
        self, tp: TP, path: str, forwarded: bool, build: Callable[[Replica, PartitionStore], dict[str, Any]]
    ) -> Answer:
        """Answer from the active store here, else forward to the owner, else the standby copy,
        else 503."""
        with self.active.lock:
            s = self.active.ready_store(tp)
            if s is not None:
                return 200, {**build(self.active, s), "served_by": self.me, "standby": False}
        owner = self.directory.owner(tp)
        if owner is not None and owner != self.me and not forwarded:
            try:
                status, body = await self.forwarder.get(owner, path)
                if status != 503:
                    body["forwarded_by"] = self.me
                    return status, body
            except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError) as e:
                log.info("forwarding to %s failed: %r", owner, e)
        if self.standby is not None:
            with self.standby.lock:
                s = self.standby.ready_store(tp)
                if s is not None:
                    return 200, {**build(self.standby, s), "served_by": self.me, "standby": True}
        raise Unavailable(self._why_unavailable(tp))

    async def lookup(self, table: str, key_text: str, path: str, forwarded: bool) -> Answer:
        t = self._table(table)
        if t.windowed:
            raise ValueError(f"table {table!r} is windowed: use /tables/{table}/windows/{{key}}")
        key = decode_url_key(key_text, t.key_format)
        tp = self._tp_for(t, key)

        def build(r: Replica, s: PartitionStore) -> dict[str, Any]:
            hit = s.get(key)
            body: dict[str, Any] = {"table": t.name, "key": render(key, t.key_format),
                                    "position": self._position(r, s), "found": hit is not None}
            if hit is not None:
                body["value"] = render(hit[0], t.value_format)
                body["record_offset"] = hit[1]
            return body

        status, body = await self._route(tp, path, forwarded, build)
        if status == 200 and not body.get("found"):
            status = 404
        return status, body

    async def windows(self, table: str, key_text: str, t_from: int | None, t_to: int | None, path: str,
                forwarded: bool) -> Answer:
        t = self._table(table)
        if not t.windowed:
            raise ValueError(f"table {table!r} is not windowed: use /tables/{table}/keys/{{key}}")
        key = decode_url_key(key_text, t.key_format)
        tp = self._tp_for(t, key)

        def build(r: Replica, s: PartitionStore) -> dict[str, Any]:
            rows = []
            for start, v, o in s.fetch(key, t_from, t_to):
                w: dict[str, Any] = {"start": start, "value": render(v, t.value_format), "record_offset": o}
                if t.window_size_ms is not None:
                    w["end"] = start + t.window_size_ms
                rows.append(w)
            return {"table": t.name, "key": render(key, t.key_format), "from": t_from, "to": t_to,
                    "windows": rows, "position": self._position(r, s)}

        return await self._route(tp, path, forwarded, build)

    async def range(self, table: str, lo_text: str | None, hi_text: str | None,
              only: list[int] | None, forwarded: bool) -> Answer:
        t = self._table(table)
        if t.windowed:
            raise ValueError(f"table {table!r} is windowed: range queries are for key-value tables")
        lo = decode_url_key(lo_text, t.key_format) if lo_text is not None else None
        hi = decode_url_key(hi_text, t.key_format) if hi_text is not None else None
        n = self.directory.partitions[t.topic]
        wanted = list(range(n)) if only is None else only
        entries: list[tuple[bytes, bytes, int, int]] = []
        positions: list[dict[str, Any]] = []
        missing: list[int] = []
        remote: dict[str, list[int]] = {}
        for p in wanted:
            tp = (t.topic, p)
            with self.active.lock:
                s = self.active.ready_store(tp)
                if s is not None:
                    entries += [(k, v, o, p) for k, v, o in s.range(lo, hi)]
                    positions.append({**self._position(self.active, s), "served_by": self.me,
                                      "standby": False})
                    continue
            owner = self.directory.owner(tp)
            if owner is not None and owner != self.me and not forwarded:
                remote.setdefault(owner, []).append(p)
            else:
                missing.append(p)
        out: list[dict[str, Any]] = []
        async def ask(server: str, parts: list[int]) -> tuple[list[int], int, dict[str, Any]]:
            q = {"partitions": ",".join(map(str, parts))}
            if lo_text is not None:
                q["from"] = lo_text
            if hi_text is not None:
                q["to"] = hi_text
            path = f"/tables/{urllib.parse.quote(table)}/range?{urllib.parse.urlencode(q)}"
            try:
                status, body = await self.forwarder.get(server, path)
            except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError):
                return parts, 0, {}
            return parts, status, body

        for parts, status, body in await asyncio.gather(*(ask(s_, ps) for s_, ps in remote.items())):
            if status != 200:
                missing += body.get("unavailable_partitions", parts)
                continue
            out += body["entries"]
            positions += body["positions"]
            missing += body.get("unavailable_partitions", [])
        still: list[int] = []
        for p in missing:
            if self.standby is not None:
                with self.standby.lock:
                    s = self.standby.ready_store((t.topic, p))
                    if s is not None:
                        entries += [(k, v, o, p) for k, v, o in s.range(lo, hi)]
                        positions.append({**self._position(self.standby, s), "served_by": self.me,
                                          "standby": True})
                        continue
            still.append(p)
        if still and not forwarded:
            raise Unavailable(
                f"partition(s) {sorted(still)} of {t.topic} are rebalancing or restoring; try again")
        rows = [(base64.b64decode(e.pop("_raw_b64")), e) for e in out]
        rows += [(k, {"key": render(k, t.key_format), "value": render(v, t.value_format), "partition": p,
                      "record_offset": o}) for k, v, o, p in entries]
        rows.sort(key=lambda r: r[0])
        if forwarded:  # the asking instance merges by the raw key bytes
            for raw, e in rows:
                e["_raw_b64"] = base64.b64encode(raw).decode()
        out = [e for _, e in rows]
        body = {"table": t.name, "from": lo_text, "to": hi_text, "entries": out,
                "positions": sorted(positions, key=lambda x: x["partition"]),
                "standby": any(x["standby"] for x in positions)}
        if still:
            body["unavailable_partitions"] = sorted(still)
        return 200, body

    def metadata(self, table: str, key_text: str) -> Answer:
        t = self._table(table)
        key = decode_url_key(key_text, t.key_format)
        tp = self._tp_for(t, key)
        owner = self.directory.owner(tp)
        body = {"table": t.name, "topic": tp[0], "partition": tp[1], "key": render(key, t.key_format),
                "active_host": owner, "group_state": self.directory.state,
                "standby_hosts": [self.me] if self.standby is not None else [], "self": self.me}
        if owner is None:
            return 503, {**body, "error": f"group {self.application_id} is rebalancing; try again"}
        return 200, body

    def list_tables(self) -> Answer:
        tables = []
        with self.active.lock:
            owned = {tp: (s.position, s.target, s.ready) for tp, s in self.active.stores.items()}
        for t in self.tables.values():
            parts = [{"partition": p, "offset": pos, "end_offset_at_assignment": tgt, "ready": rdy}
                     for (topic, p), (pos, tgt, rdy) in sorted(owned.items()) if topic == t.topic]
            tables.append({**t.describe(), "partitions": self.directory.partitions.get(t.topic),
                           "active_partitions": parts})
        return 200, {"application_id": self.application_id, "self": self.me,
                     "group_state": self.directory.state, "standby": self.standby is not None,
                     "tables": tables}


def _int_param(q: dict[str, list[str]], name: str) -> int | None:
    if name not in q:
        return None
    try:
        return int(q[name][0])
    except ValueError:
        raise ValueError(f"?{name}= must be an integer (epoch milliseconds), got {q[name][0]!r}") from None


async def dispatch(
    server: StateServer, target: str, forwarded: bool
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """One GET: (status, JSON body, extra headers)."""
    url = urllib.parse.urlsplit(target)
    segs = [urllib.parse.unquote(s) for s in url.path.strip("/").split("/")]
    q = urllib.parse.parse_qs(url.query, keep_blank_values=True)
    try:
        if segs == ["tables"]:
            status, body = server.list_tables()
        elif len(segs) == 4 and segs[0] == "tables" and segs[2] == "keys":
            status, body = await server.lookup(segs[1], segs[3], target, forwarded)
        elif len(segs) == 4 and segs[0] == "tables" and segs[2] == "windows":
            status, body = await server.windows(segs[1], segs[3], _int_param(q, "from"), _int_param(q, "to"),
                                                target, forwarded)
        elif len(segs) == 3 and segs[0] == "tables" and segs[2] == "range":
            only = None
            if "partitions" in q:
                only = [int(x) for x in q["partitions"][0].split(",") if x]
            status, body = await server.range(segs[1], q.get("from", [None])[0], q.get("to", [None])[0],
                                              only, forwarded)
        elif len(segs) == 3 and segs[0] == "metadata":
            status, body = server.metadata(segs[1], segs[2])
        else:
            status, body = 404, {"error": f"no such endpoint {url.path}"}
    except Unavailable as e:
        return 503, {"error": str(e), "retry_after_s": RETRY_AFTER_S}, {"Retry-After": str(RETRY_AFTER_S)}
    except LookupError as e:
        status, body = 404, {"error": str(e).strip("'\"")}
    except (SpecError, ValueError) as e:
        status, body = 400, {"error": str(e)}
    except Exception as e:  # a bug must not kill the connection without an answer
        log.exception("GET %s", target)
        status, body = 500, {"error": f"{type(e).__name__}: {e}"}
    if status == 503:
        return status, body, {"Retry-After": str(RETRY_AFTER_S)}
    return status, body, {}


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            500: "Internal Server Error", 503: "Service Unavailable"}


async def serve_http(server: StateServer, host: str, port: int, stop: asyncio.Event) -> None:
    """A small HTTP/1.1 server (keep-alive, GET only) on asyncio: the query path is dict look-ups
    and at most one forward, so the event loop answers faster than a thread per request."""

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                parts = lines[0].split(" ")
                headers = {}
                for line in lines[1:]:
                    name, sep, value = line.partition(":")
                    if sep:
                        headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0") or 0)
                if length:
                    await reader.readexactly(length)
                close = headers.get("connection", "").lower() == "close" or parts[-1] == "HTTP/1.0"
                extra: dict[str, str] = {}
                if len(parts) != 3:
                    status, body = 400, {"error": "malformed request line"}
                    close = True
                elif parts[0] != "GET":
                    status, body = 405, {"error": f"{parts[0]} not allowed: this API is GET only"}
                else:
                    fwd = FORWARDED_HEADER.lower() in headers
                    status, body, extra = await dispatch(server, parts[1], fwd)
                data = json.dumps(body).encode()
                out = [f"HTTP/1.1 {status} {_REASONS.get(status, '')}",
                       "Content-Type: application/json", f"Content-Length: {len(data)}"]
                out += [f"{k}: {v}" for k, v in extra.items()]
                if close:
                    out.append("Connection: close")
                writer.write(("\r\n".join(out) + "\r\n\r\n").encode() + data)
                await writer.drain()
                if close:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):  # ValueError: a bad length
            return
        finally:
            writer.close()

    srv = await asyncio.start_server(client, host, port, backlog=1024)
    async with srv:
        await stop.wait()


# -- CLI -----------------------------------------------------------------------------------------


def _configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092", metavar="HOST:PORT[,...]")
    p.add_argument("--application-id", required=True, help="the application (consumer group) id")
    p.add_argument("--application-server", required=True, metavar="HOST:PORT",
                   help="this instance's address as the other instances reach it (application.server)")
    p.add_argument("--port", type=int, help="HTTP port to listen on (default: application-server's)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--table", action="append", default=[], metavar="NAME=TOPIC[:VALUE_FORMAT[:KEY_FORMAT]]",
                   help="a key-value table; formats string (default), bytes, json")
    p.add_argument("--windowed-table", action="append", default=[],
                   metavar="NAME=TOPIC[:VALUE_FORMAT[:KEY_FORMAT]][@SIZE_MS]",
                   help="a windowed table: keys are key + 8-byte big-endian window start")
    p.add_argument("--num-standby-replicas", type=int, default=0,
                   help="≥1: keep a standby copy of every partition to answer (flagged) during rebalances")
    p.add_argument("--session-timeout-ms", type=int, default=45000)
    p.add_argument("--metadata-refresh-ms", type=int, default=1000)
    p.add_argument("--consumer-property", action="append", default=[], metavar="KEY=VALUE",
                   help="extra librdkafka client setting (security ...)")


def add_parser(sub: Any) -> None:
    """``strom streams serve`` in strom's CLI."""
    p = sub.add_parser("streams", help="strom.streams tools: the interactive-query state server")
    ssub = p.add_subparsers(dest="streams_command", metavar="ACTION")
    ssub.required = True
    _configure(ssub.add_parser("serve", help="answer key lookups, ranges and window fetches over HTTP"))


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        import confluent_kafka  # noqa: F401 - the server's Kafka client
    except ImportError:
        print("strom streams serve: needs confluent-kafka (pip install 'strom[spark]' or confluent-kafka)",
              file=sys.stderr)
        return 2
    try:
        specs = [parse_table_spec(s) for s in args.table]
        specs += [parse_table_spec(s, windowed=True) for s in args.windowed_table]
        extra = {}
        for kv in args.consumer_property:
            k, sep, v = kv.partition("=")
            if not sep:
                raise SpecError(f"--consumer-property {kv!r}: expected KEY=VALUE")
            extra[k] = v
        server = StateServer(args.bootstrap_server, args.application_id, args.application_server, specs,
                             args.num_standby_replicas, args.session_timeout_ms, args.metadata_refresh_ms,
                             extra)
        port = args.port if args.port is not None else int(args.application_server.rpartition(":")[2])
        server.start()
    except SpecError as e:
        print(f"strom streams serve: {e}", file=sys.stderr)
        return 2

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        log.info("serving %s on %s:%d as %s", sorted(server.tables), args.host, port, args.application_server)
        await serve_http(server, args.host, port, stop)

    try:
        asyncio.run(serve())
    except OSError as e:
        print(f"strom streams serve: cannot listen on {args.host}:{port}: {e}", file=sys.stderr)
        return 2
    finally:
        server.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m strom.streams.serve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    _configure(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
