"""The registry's state, kept in the compacted ``_schemas`` topic in Confluent's record format.

Every instance reads the topic from the start and tails it; the in-memory state is a function of
the log alone. Writes are records appended to the topic; an instance then waits until its reader
has applied its own record. Several instances may write: conflicts are settled by log order, the
same way in every instance (the first record to claim a subject version or a schema id wins, a
later conflicting one is ignored) and the losing writer re-asserts the winner's value under the
key it overwrote (so compaction keeps the winner) and retries with the next id/version.

Record format (keys and values are JSON, as Confluent Schema Registry and Karapace write them):

* ``{"keytype":"SCHEMA","subject":S,"version":V,"magic":1}`` ->
  ``{"subject","version","id","schema","schemaType"(not for AVRO),"references"(if any),"deleted"}``;
  a null value deletes the version permanently;
* ``{"keytype":"CONFIG","subject":S|null,"magic":0}`` -> ``{"compatibilityLevel":L}`` or null;
* ``{"keytype":"MODE","subject":S|null,"magic":0}`` -> ``{"mode":M}`` or null;
* ``{"keytype":"DELETE_SUBJECT","subject":S,"magic":0}`` -> ``{"subject":S,"version":V}``
  (versions up to V soft-deleted);
* ``{"keytype":"NOOP","magic":0}`` (ignored).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("strom.schema_registry")

TOPIC = "_schemas"


@dataclass
class Version:
    id: int
    deleted: bool = False


@dataclass
class SchemaRecord:
    id: int
    schema: str
    schema_type: str
    references: list[dict[str, Any]]
    canonical: str  # dedup key: type + canonical text + references

    def to_response(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema": self.schema}
        if self.schema_type != "AVRO":
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = self.references
        return out


@dataclass
class State:
    schemas: dict[int, SchemaRecord] = field(default_factory=dict)
    subjects: dict[str, dict[int, Version]] = field(default_factory=dict)
    configs: dict[str | None, str] = field(default_factory=dict)
    modes: dict[str | None, str] = field(default_factory=dict)
    by_canonical: dict[str, int] = field(default_factory=dict)

    def max_id(self) -> int:
        return max(self.schemas, default=0)

    def apply(self, key: dict[str, Any], value: dict[str, Any] | None) -> None:
        keytype = key.get("keytype")
        if keytype == "SCHEMA":
            self._apply_schema(key, value)
        elif keytype == "CONFIG":
            subject = key.get("subject")
            if value is None:
                self.configs.pop(subject, None)
            else:
                level = value.get("compatibilityLevel") or value.get("compatibility")
                if level:
                    self.configs[subject] = str(level).upper()
        elif keytype == "MODE":
            subject = key.get("subject")
            if value is None:
                self.modes.pop(subject, None)
            elif value.get("mode"):
                self.modes[subject] = str(value["mode"]).upper()
        elif keytype == "DELETE_SUBJECT" and value is not None:
            versions = self.subjects.get(str(value.get("subject", key.get("subject"))), {})
            upto = int(value.get("version", max(versions, default=0)))  # Redpanda omits it
            for v, entry in versions.items():
                if v <= upto:
                    entry.deleted = True

    def _apply_schema(self, key: dict[str, Any], value: dict[str, Any] | None) -> None:
        subject, version = str(key.get("subject")), int(key.get("version", 0))
        versions = self.subjects.setdefault(subject, {})
        if value is None:  # permanent delete
            versions.pop(version, None)
            if not versions:
                del self.subjects[subject]
            return
        sid = int(value["id"])
        schema_type = str(value.get("schemaType") or "AVRO").upper()
        refs = list(value.get("references") or [])
        text = str(value["schema"])
        canonical = canonical_key(schema_type, text, refs)
        known = self.schemas.get(sid)
        if known is not None and known.canonical != canonical:
            log.warning("ignoring %s v%s: id %s already names another schema", subject, version, sid)
            if not versions:
                del self.subjects[subject]
            return
        existing = versions.get(version)
        if existing is not None and existing.id != sid:
            log.warning("ignoring %s v%s id %s: the version already has id %s",
                        subject, version, sid, existing.id)
            return
        if known is None:
            self.schemas[sid] = SchemaRecord(sid, text, schema_type, refs, canonical)
            self.by_canonical.setdefault(canonical, sid)
        versions[version] = Version(sid, bool(value.get("deleted", False)))


def canonical_key(schema_type: str, text: str, refs: list[dict[str, Any]]) -> str:
    body = text
    if schema_type in ("AVRO", "JSON"):
        with contextlib.suppress(ValueError):
            body = json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)
    else:
        body = text.strip()
    return json.dumps([schema_type, body, refs], separators=(",", ":"))


def schema_key(subject: str, version: int) -> bytes:
    return json.dumps({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1},
                      separators=(",", ":")).encode()


def schema_value(subject: str, version: int, sid: int, rec: SchemaRecord, deleted: bool) -> bytes:
    value: dict[str, Any] = {"subject": subject, "version": version, "id": sid, "schema": rec.schema}
    if rec.schema_type != "AVRO":
        value["schemaType"] = rec.schema_type
    if rec.references:
        value["references"] = rec.references
    value["deleted"] = deleted
    return json.dumps(value, separators=(",", ":")).encode()


def keyed(keytype: str, subject: str | None) -> bytes:
    return json.dumps({"keytype": keytype, "subject": subject, "magic": 0}, separators=(",", ":")).encode()


class StoreError(Exception):
    pass


class KafkaStore:
    """Reads and tails ``_schemas``; appends records and waits for them to be applied."""

    def __init__(self, client_config: dict[str, str], topic: str = TOPIC, timeout: float = 30.0) -> None:
        from confluent_kafka import Consumer, Producer

        self.topic = topic
        self.timeout = timeout
        self.client_config = dict(client_config)
        self.state = State()
        self.lock = threading.RLock()
        self.applied = threading.Condition(self.lock)
        self.next_offset = 0  # next offset the reader will apply
        self.write_lock = threading.Lock()
        self._stop = threading.Event()
        self._ensure_topic()
        self.producer = Producer({**self.client_config, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 0})
        self.consumer = Consumer({**self.client_config, "group.id": "schema-registry-reader",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "enable.partition.eof": False})
        # watermark queries on their own handle: the binding serialises calls on one consumer, and
        # the reader thread sits in poll()
        self.offsets = Consumer({**self.client_config, "group.id": "schema-registry-reader",
                                 "enable.auto.commit": False})
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        self._tp = TopicPartition(topic, 0)
        self.consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        self._thread = threading.Thread(target=self._run, name="schemas-reader", daemon=True)
        self._thread.start()
        self.wait_caught_up()

    def _ensure_topic(self) -> None:
        from confluent_kafka import KafkaError as CKError
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient(dict(self.client_config))  # type: ignore[arg-type]
        futures = admin.create_topics([NewTopic(self.topic, num_partitions=1, replication_factor=-1,
                                                config={"cleanup.policy": "compact"})],
                                      request_timeout=self.timeout)
        try:
            futures[self.topic].result(timeout=self.timeout)
            log.info("created topic %s", self.topic)
        except Exception as e:
            err = e.args[0] if e.args else None
            if getattr(err, "code", lambda: None)() != CKError.TOPIC_ALREADY_EXISTS:
                why = str(e) or f"{type(e).__name__}: no answer within {self.timeout:.0f}s"
                where = self.client_config.get("bootstrap.servers")
                raise StoreError(f"cannot create topic {self.topic} on {where}: {why}") from e

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self.consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                log.warning("reading %s: %s", self.topic, msg.error())
                continue
            try:
                key = json.loads(msg.key() or b"{}")
                raw = msg.value()
                value = json.loads(raw) if raw else None
            except ValueError:
                key, value = {}, None
                log.warning("skipping an unreadable record at offset %s", msg.offset())
            with self.lock:
                if isinstance(key, dict) and (value is None or isinstance(value, dict)):
                    self.state.apply(key, value)
                self.next_offset = int(msg.offset() or 0) + 1
                self.applied.notify_all()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.consumer.close()
        self.offsets.close()
        self.producer.flush(5)

    def wait_applied(self, offset: int) -> None:
        deadline = time.monotonic() + self.timeout
        with self.lock:
            while self.next_offset <= offset:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StoreError(f"timed out waiting for offset {offset} of {self.topic}")
                self.applied.wait(left)

    def wait_caught_up(self) -> None:
        _low, high = self.offsets.get_watermark_offsets(self._tp, timeout=self.timeout, cached=False)
        if high > 0:
            self.wait_applied(high - 1)

    def append(self, records: list[tuple[bytes, bytes | None]]) -> int:
        """Appends records in order; returns the last offset once the reader has applied it."""
        results: list[Any] = []

        def done(err: Any, msg: Any) -> None:
            results.append((err, msg.offset() if msg is not None else -1))

        for key, value in records:
            self.producer.produce(self.topic, key=key, value=value, partition=0, on_delivery=done)
        self.producer.flush(self.timeout)
        if len(results) != len(records):
            raise StoreError(f"timed out writing to {self.topic}")
        for err, _ in results:
            if err is not None:
                raise StoreError(f"writing to {self.topic}: {err}")
        last = max(off for _, off in results)
        self.wait_applied(last)
        return int(last)
