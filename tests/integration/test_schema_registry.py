"""`strom schema-registry` against a real strom broker, driven by confluent-kafka's
SchemaRegistryClient and its Avro/JSON/Protobuf serializers and deserializers, unchanged.

Records really go through strom (produce with the serializer, consume with the deserializer); the
registry's state is the ``_schemas`` topic (checked: restart recovers it, records in Confluent's
format, two instances agree on ids).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastavro")
pytest.importorskip("confluent_kafka.schema_registry")

from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from strom.testing.broker_process import BrokerProcess
from strom.testing.registry_process import RegistryProcess

pytestmark = pytest.mark.integration
SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    d = tmp_path_factory.mktemp("sr")
    b = BrokerProcess(d / "data", overrides=["group.initial.rebalance.delay.ms=0"])
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def registry(broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryProcess]:
    r = RegistryProcess(broker.bootstrap, tmp_path_factory.mktemp("srlog") / "registry.log").start()
    try:
        yield r
    finally:
        r.stop()


def http(method: str, url: str, body: Any = None) -> tuple[int, Any, str]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read()), resp.headers["Content-Type"]
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), e.headers["Content-Type"]


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def roundtrip(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    p = Producer({"bootstrap.servers": bootstrap})
    for v in values:
        p.produce(topic, value=v)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uniq("g"), "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(out) < len(values) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            out.append(m.value())
    c.close()
    return out


AVRO_V1 = json.dumps({"type": "record", "name": "User", "namespace": "ex", "fields": [
    {"name": "name", "type": "string"}, {"name": "age", "type": "int"}]})
AVRO_V2 = json.dumps({"type": "record", "name": "User", "namespace": "ex", "fields": [
    {"name": "name", "type": "string"}, {"name": "age", "type": "long"},
    {"name": "email", "type": ["null", "string"], "default": None}]})
AVRO_BAD = json.dumps({"type": "record", "name": "User", "namespace": "ex", "fields": [
    {"name": "name", "type": "string"}, {"name": "phone", "type": "string"}]})


def test_avro_serializer_roundtrip_through_strom(broker: BrokerProcess, registry: RegistryProcess) -> None:
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

    sr = SchemaRegistryClient({"url": registry.url})
    topic = uniq("users")
    ser = AvroSerializer(sr, AVRO_V1)
    ctx = SerializationContext(topic, MessageField.VALUE)
    users = [{"name": f"u{i}", "age": i} for i in range(5)]
    raw = [ser(u, ctx) for u in users]
    assert all(r[0] == 0 for r in raw)  # magic byte
    got = roundtrip(broker.bootstrap, topic, raw)
    de = AvroDeserializer(SchemaRegistryClient({"url": registry.url}))
    assert [de(v, ctx) for v in got] == users
    subject = f"{topic}-value"
    assert subject in sr.get_subjects()
    latest = sr.get_latest_version(subject)
    assert latest.version == 1 and json.loads(latest.schema.schema_str)["name"] == "User"
    # evolve compatibly (BACKWARD default): int -> long, optional field with default
    sid2 = sr.register_schema(subject, Schema(AVRO_V2, "AVRO"))
    assert sid2 != latest.schema_id
    assert sr.get_versions(subject) == [1, 2]
    # incompatible: new field without default
    with pytest.raises(SchemaRegistryError) as e:
        sr.register_schema(subject, Schema(AVRO_BAD, "AVRO"))
    assert e.value.http_status_code == 409 and e.value.error_code == 409
    assert sr.test_compatibility(subject, Schema(AVRO_V2, "AVRO")) is True
    assert sr.test_compatibility(subject, Schema(AVRO_BAD, "AVRO")) is False
    # same schema again: same id, no new version; lookup
    assert sr.register_schema(subject, Schema(AVRO_V2, "AVRO")) == sid2
    found = sr.lookup_schema(subject, Schema(AVRO_V2, "AVRO"))
    assert (found.schema_id, found.version) == (sid2, 2)
    # the same schema under another subject keeps its id
    other = uniq("other")
    assert sr.register_schema(other, Schema(AVRO_V2, "AVRO")) == sid2
    assert sorted(sr.get_subjects_by_schema_id(sid2)) == sorted([subject, other])


def test_rest_api_errors_and_deletes(registry: RegistryProcess) -> None:
    u = registry.url
    s = uniq("rest")
    status, body, ctype = http("GET", f"{u}/subjects/{s}/versions")
    assert (status, body["error_code"]) == (404, 40401) and ctype.startswith("application/vnd.schemaregistry")
    status, body, _ = http("POST", f"{u}/subjects/{s}/versions", {"schema": "{not json"})
    assert (status, body["error_code"]) == (422, 42201)
    status, body, _ = http("POST", f"{u}/subjects/{s}/versions", {"schema": '"string"'})
    assert status == 200 and isinstance(body["id"], int)
    sid = body["id"]
    assert http("GET", f"{u}/subjects/{s}/versions/7")[1]["error_code"] == 40402
    assert http("GET", f"{u}/subjects/{s}/versions/0")[1]["error_code"] == 42202
    assert http("GET", f"{u}/schemas/ids/999999")[1]["error_code"] == 40403
    assert http("GET", f"{u}/schemas/ids/{sid}")[1] == {"schema": '"string"'}
    assert http("GET", f"{u}/schemas/ids/{sid}/versions")[1] == [{"subject": s, "version": 1}]
    assert http("GET", f"{u}/schemas/types")[1] == ["JSON", "PROTOBUF", "AVRO"]
    assert http("GET", f"{u}/schemas?subjectPrefix={s}")[1] == [
        {"subject": s, "version": 1, "id": sid, "schema": '"string"'}]
    # bad input is an error answer, never a traceback
    assert http("POST", f"{u}/subjects/{s}/versions", {"schema": 5})[1]["error_code"] == 42201
    assert http("POST", f"{u}/subjects/{s}/versions", {"schema": '"int"', "schemaType": "XML"})[0] == 422
    bad_version = {"schema": '"int"', "version": "x"}
    assert http("POST", f"{u}/subjects/{s}/versions", bad_version)[1]["error_code"] == 42202
    assert http("POST", f"{u}/subjects/{s}/versions", {"schema": '"int"', "id": 7})[1]["error_code"] == 42205
    assert http("GET", f"{u}/schemas/ids/abc")[1]["error_code"] == 40403
    assert http("GET", f"{u}/nope")[0] == 404
    # a subject name with characters that need quoting round-trips
    odd = uniq("odd name %41 ü")
    quoted = urllib.parse.quote(odd, safe="")
    assert http("POST", f"{u}/subjects/{quoted}/versions", {"schema": '"int"'})[0] == 200
    assert odd in http("GET", f"{u}/subjects")[1]
    assert http("GET", f"{u}/subjects/{quoted}/versions")[1] == [1]
    # config
    assert http("GET", f"{u}/config")[1] == {"compatibilityLevel": "BACKWARD"}
    assert http("GET", f"{u}/config/{s}")[1]["error_code"] == 40408
    assert http("PUT", f"{u}/config/{s}", {"compatibility": "bogus"})[1]["error_code"] == 42203
    assert http("PUT", f"{u}/config/{s}", {"compatibility": "NONE"})[1] == {"compatibility": "NONE"}
    assert http("GET", f"{u}/config/{s}")[1] == {"compatibilityLevel": "NONE"}
    assert http("POST", f"{u}/subjects/{s}/versions", {"schema": '"int"'})[0] == 200  # NONE: anything
    assert http("DELETE", f"{u}/config/{s}")[1] == {"compatibilityLevel": "NONE"}
    status, body, _ = http("POST", f"{u}/subjects/{s}/versions", {"schema": '"boolean"'})
    assert (status, body["error_code"]) == (409, 409)  # back to BACKWARD: int cannot be read as boolean
    # soft delete, then permanent
    assert http("DELETE", f"{u}/subjects/{s}/versions/2?permanent=true")[1]["error_code"] == 40407
    assert http("DELETE", f"{u}/subjects/{s}/versions/2")[1] == 2
    assert http("GET", f"{u}/subjects/{s}/versions")[1] == [1]
    assert http("GET", f"{u}/subjects/{s}/versions?deleted=true")[1] == [1, 2]
    assert http("DELETE", f"{u}/subjects/{s}")[1] == [1]
    assert s not in http("GET", f"{u}/subjects")[1]
    assert s in http("GET", f"{u}/subjects?deleted=true")[1]
    assert http("DELETE", f"{u}/subjects/{s}")[1]["error_code"] == 40404
    assert http("DELETE", f"{u}/subjects/{s}?permanent=true")[1] == [1, 2]
    assert s not in http("GET", f"{u}/subjects?deleted=true")[1]
    assert http("GET", f"{u}/schemas/ids/{sid}")[0] == 200  # ids are never reused nor forgotten
    # mode
    assert http("GET", f"{u}/mode")[1] == {"mode": "READWRITE"}
    m = uniq("ro")
    assert http("PUT", f"{u}/mode/{m}", {"mode": "READONLY"})[1] == {"mode": "READONLY"}
    assert http("POST", f"{u}/subjects/{m}/versions", {"schema": '"int"'})[1]["error_code"] == 42205
    assert http("DELETE", f"{u}/mode/{m}")[1] == {"mode": "READONLY"}
    assert http("POST", f"{u}/subjects/{m}/versions", {"schema": '"int"'})[0] == 200
    # IMPORT mode: ids and versions given by the importer
    imp = uniq("import")
    assert http("PUT", f"{u}/mode/{imp}", {"mode": "IMPORT"})[1] == {"mode": "IMPORT"}
    given = {"schema": '"double"', "id": 900001, "version": 3}
    assert http("POST", f"{u}/subjects/{imp}/versions", given)[1] == {"id": 900001}
    assert http("GET", f"{u}/subjects/{imp}/versions")[1] == [3]
    assert http("GET", f"{u}/schemas/ids/900001")[1] == {"schema": '"double"'}
    taken = http("POST", f"{u}/subjects/{imp}/versions", {"schema": '"bytes"', "id": 900001, "version": 4})
    assert taken[1]["error_code"] == 42207  # an id already names another schema
    assert http("PUT", f"{u}/mode/{m}", {"mode": "IMPORT"})[1]["error_code"] == 42205  # has subjects: force
    assert http("PUT", f"{u}/mode/{m}?force=true", {"mode": "IMPORT"})[1] == {"mode": "IMPORT"}
    assert http("DELETE", f"{u}/mode/{imp}")[1] == {"mode": "IMPORT"}


def test_json_schema_serdes(broker: BrokerProcess, registry: RegistryProcess) -> None:
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer

    schema = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order",
                         "type": "object", "properties": {"id": {"type": "integer"},
                                                          "item": {"type": "string"}},
                         "required": ["id"]})
    sr = SchemaRegistryClient({"url": registry.url})
    topic = uniq("orders")
    ctx = SerializationContext(topic, MessageField.VALUE)
    ser = JSONSerializer(schema, sr)
    orders = [{"id": i, "item": f"thing{i}"} for i in range(3)]
    got = roundtrip(broker.bootstrap, topic, [ser(o, ctx) for o in orders])
    de = JSONDeserializer(None, schema_registry_client=SchemaRegistryClient({"url": registry.url}))
    assert [de(v, ctx) for v in got] == orders
    subject = f"{topic}-value"
    assert sr.get_latest_version(subject).schema.schema_type == "JSON"
    # a new required property is incompatible, widening integer -> number is compatible
    bad = json.loads(schema)
    bad["required"] = ["id", "item"]
    assert sr.test_compatibility(subject, Schema(json.dumps(bad), "JSON")) is False
    wide = json.loads(schema)
    wide["properties"]["id"] = {"type": "number"}
    assert sr.test_compatibility(subject, Schema(json.dumps(wide), "JSON")) is True


def _proto_classes() -> tuple[Any, Any]:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    def build(name: str, extra_field: bool) -> Any:
        fdp = descriptor_pb2.FileDescriptorProto(name=f"{name}.proto", package="shop", syntax="proto3")
        msg = fdp.message_type.add(name="Item")
        msg.field.add(name="sku", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
        msg.field.add(name="qty", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
        if extra_field:
            msg.field.add(name="price", number=3, type=descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE,
                          label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
        pool = descriptor_pool.DescriptorPool()
        pool.Add(fdp)
        return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Item"))

    return build("item_v1", False), build("item_v2", True)


def test_protobuf_serdes(broker: BrokerProcess, registry: RegistryProcess) -> None:
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

    v1, v2 = _proto_classes()
    sr = SchemaRegistryClient({"url": registry.url})
    topic = uniq("items")
    ctx = SerializationContext(topic, MessageField.VALUE)
    ser = ProtobufSerializer(v1, sr, {"use.deprecated.format": False})
    msgs = [v1(sku=f"s{i}", qty=i) for i in range(3)]
    raw = [ser(m, ctx) for m in msgs]
    assert all(r[0] == 0 for r in raw)
    got = roundtrip(broker.bootstrap, topic, raw)
    de = ProtobufDeserializer(v1, {"use.deprecated.format": False})
    assert [de(v, ctx) for v in got] == msgs
    subject = f"{topic}-value"
    info = sr.get_latest_version(subject)
    assert info.schema.schema_type == "PROTOBUF"
    # adding a field is compatible: the v2 serializer registers version 2
    ser2 = ProtobufSerializer(v2, sr, {"use.deprecated.format": False})
    ser2(v2(sku="x", qty=1, price=2.5), ctx)
    assert sr.get_versions(subject) == [1, 2]
    # changing a field's kind (int32 -> string) is not
    text = 'syntax = "proto3"; package shop; message Item { string sku = 1; string qty = 2; }'
    assert sr.test_compatibility(subject, Schema(text, "PROTOBUF")) is False
    ok = 'syntax = "proto3"; package shop; message Item { string sku = 1; int64 qty = 2; double p = 3; }'
    assert sr.test_compatibility(subject, Schema(ok, "PROTOBUF")) is True
    # a .proto text schema is served as a descriptor when asked (as confluent-kafka's serdes do)
    text_subject = uniq("proto-text")
    sid = sr.register_schema(text_subject, Schema(ok, "PROTOBUF"))
    assert sr.get_schema(sid).schema_str == ok
    serialized = SchemaRegistryClient({"url": registry.url}).get_schema(sid, fmt="serialized").schema_str
    from google.protobuf import descriptor_pb2

    fdp = descriptor_pb2.FileDescriptorProto.FromString(__import__("base64").b64decode(serialized))
    assert [f.name for f in fdp.message_type[0].field] == ["sku", "qty", "p"]


def test_avro_references(registry: RegistryProcess) -> None:
    sr = SchemaRegistryClient({"url": registry.url})
    addr_subject = uniq("address")
    address = json.dumps({"type": "record", "name": "Address", "namespace": "ex",
                          "fields": [{"name": "city", "type": "string"}]})
    sr.register_schema(addr_subject, Schema(address, "AVRO"))
    from confluent_kafka.schema_registry import SchemaReference

    person = json.dumps({"type": "record", "name": "Person", "namespace": "ex",
                         "fields": [{"name": "home", "type": "ex.Address"}]})
    psub = uniq("person")
    sid = sr.register_schema(psub, Schema(person, "AVRO", [SchemaReference("ex.Address", addr_subject, 1)]))
    got = sr.get_schema(sid)
    assert got.references[0].subject == addr_subject
    u = registry.url
    assert http("GET", f"{u}/subjects/{addr_subject}/versions/1/referencedby")[1] == [sid]
    # a referenced version cannot be deleted
    assert http("DELETE", f"{u}/subjects/{addr_subject}/versions/1")[1]["error_code"] == 42206
    # a missing reference is an invalid schema
    status, body, _ = http("POST", f"{u}/subjects/{uniq('p')}/versions", {
        "schema": person, "references": [{"name": "ex.Address", "subject": "nope", "version": 1}]})
    assert (status, body["error_code"]) == (422, 42201)


def _schemas_records(bootstrap: str) -> list[tuple[dict[str, Any], Any]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uniq("peek"), "auto.offset.reset": "earliest",
                  "enable.partition.eof": True})
    c.subscribe(["_schemas"])
    out = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if out:
                break
            continue
        out.append((json.loads(m.key()), json.loads(m.value()) if m.value() else None))
    c.close()
    return out


def test_restart_recovers_state_and_topic_format(broker: BrokerProcess, tmp_path: Path) -> None:
    r = RegistryProcess(broker.bootstrap, tmp_path / "r1.log").start()
    s = uniq("restart")
    try:
        sid = http("POST", f"{r.url}/subjects/{s}/versions", {"schema": AVRO_V1})[1]["id"]
        http("PUT", f"{r.url}/config/{s}", {"compatibility": "FULL_TRANSITIVE"})
    finally:
        r.stop()
    recs = _schemas_records(broker.bootstrap)
    keys = [k for k, _ in recs]
    assert {"keytype": "SCHEMA", "subject": s, "version": 1, "magic": 1} in keys
    value = next(v for k, v in recs if k.get("subject") == s and k["keytype"] == "SCHEMA")
    assert value["id"] == sid and value["deleted"] is False and json.loads(value["schema"])["name"] == "User"
    config = ({"keytype": "CONFIG", "subject": s, "magic": 0}, {"compatibilityLevel": "FULL_TRANSITIVE"})
    assert config in recs
    r2 = RegistryProcess(broker.bootstrap, tmp_path / "r2.log").start()
    try:
        assert http("GET", f"{r2.url}/subjects/{s}/versions/latest")[1]["id"] == sid
        assert http("GET", f"{r2.url}/config/{s}")[1] == {"compatibilityLevel": "FULL_TRANSITIVE"}
        # next ids continue after the recovered ones
        new = http("POST", f"{r2.url}/subjects/{uniq('x')}/versions", {"schema": '"bytes"'})[1]["id"]
        assert new > sid
    finally:
        r2.stop()


def test_two_instances_agree_on_ids(broker: BrokerProcess, tmp_path: Path) -> None:
    # a state topic and election group of their own (the module's registry leads _schemas)
    isolated = ("--topic", "_schemas_pair", "--group-id", "schema-registry-pair")
    a = RegistryProcess(broker.bootstrap, tmp_path / "a.log", *isolated).start()
    b = RegistryProcess(broker.bootstrap, tmp_path / "b.log", *isolated).start()
    try:
        # wait until the group has settled: one leader, one follower
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            roles = [p.read_text().rpartition("election: ")[2][:6] for p in (a.log_path, b.log_path)]
            if sorted(roles) == ["follow", "leader"]:
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"no settled election: {roles}")
        results: dict[str, list[tuple[str, int]]] = {"a": [], "b": []}
        tag = uuid.uuid4().hex[:6]

        def writer(name: str, url: str) -> None:
            for i in range(8):
                # both instances register different schemas under the same subjects at once
                schema = json.dumps({"type": "enum", "name": f"E{tag}{name}{i}", "symbols": ["A"]})
                subject = f"race-{tag}-{i}"
                status, body, _ = http("POST", f"{url}/subjects/{subject}/versions", {"schema": schema})
                assert status == 200, body
                results[name].append((schema, body["id"]))

        for subject_i in range(8):
            http("PUT", f"{a.url}/config/race-{tag}-{subject_i}", {"compatibility": "NONE"})
        ta = threading.Thread(target=writer, args=("a", a.url))
        tb = threading.Thread(target=writer, args=("b", b.url))
        ta.start()
        tb.start()
        ta.join(120)
        tb.join(120)
        all_ids = [sid for rs in results.values() for _, sid in rs]
        assert len(all_ids) == 16 and len(set(all_ids)) == 16  # no id given to two schemas

        def agree(url: str) -> bool:
            """The instance at ``url`` maps every id to its schema and has both versions of every
            subject (reads are local: a follower applies the leader's writes from the topic)."""
            for schema, sid in results["a"] + results["b"]:
                status, body, _ = http("GET", f"{url}/schemas/ids/{sid}")
                if status != 200 or json.loads(body["schema"]) != json.loads(schema):
                    return False
            return all(http("GET", f"{url}/subjects/race-{tag}-{i}/versions")[1] == [1, 2] for i in range(8))

        for url in (a.url, b.url):  # both instances see the same id -> schema mapping
            deadline = time.monotonic() + 30
            while not agree(url):
                assert time.monotonic() < deadline, f"{url} did not catch up with the writes"
                time.sleep(0.2)
        # one instance led and wrote; the other forwarded each of its 8 writes to it
        forwarded = sorted(p.log_path.read_text().count("forwarding POST") for p in (a, b))
        assert forwarded == [0, 8], forwarded
        # a forwarded write keeps the subject's quoting
        odd = uniq("odd name %41 ü")
        quoted = urllib.parse.quote(odd, safe="")
        follower_url = (b if "forwarding POST" in b.log_path.read_text() else a).url
        assert http("POST", f"{follower_url}/subjects/{quoted}/versions", {"schema": '"int"'})[0] == 200
        assert odd in http("GET", f"{follower_url}/subjects")[1]
        leader, follower = (a, b) if "forwarding POST" in (tmp_path / "b.log").read_text() else (b, a)
        # the leader goes away: the other takes over and writes
        leader.stop()
        s = uniq("after-failover")
        status, body, _ = http("POST", f"{follower.url}/subjects/{s}/versions", {"schema": '"float"'})
        assert status == 200, body
        assert body["id"] > max(all_ids)
        assert http("GET", f"{follower.url}/subjects/{s}/versions/1")[1]["id"] == body["id"]
    finally:
        a.stop()
        b.stop()


def test_strom_serde_interoperates_with_confluent_serdes(broker: BrokerProcess,
                                                         registry: RegistryProcess) -> None:
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

    from strom.serde import AvroSerde, ProtobufSerde, RegistryClient, unframe

    topic = uniq("interop")
    ctx = SerializationContext(topic, MessageField.VALUE)
    ours = AvroSerde(RegistryClient(registry.url), AVRO_V1)
    sr = SchemaRegistryClient({"url": registry.url})
    theirs_ser, theirs_de = AvroSerializer(sr, AVRO_V1), AvroDeserializer(sr)
    user = {"name": "ada", "age": 36}
    a, b = ours.serialize(topic, user), theirs_ser(user, ctx)
    assert a == b  # same id, same bytes
    got = roundtrip(broker.bootstrap, topic, [a, b])
    assert [ours.deserialize(v) for v in got] == [user, user]
    assert [theirs_de(v, ctx) for v in got] == [user, user]
    # an evolved reader: ours reads v1 data with the v2 schema (long age, email default)
    evolved = AvroSerde(RegistryClient(registry.url), AVRO_V2)
    assert evolved.deserialize(a) == {"name": "ada", "age": 36, "email": None}

    v1, _v2 = _proto_classes()
    ptopic = uniq("interop-proto")
    pctx = SerializationContext(ptopic, MessageField.VALUE)
    pours = ProtobufSerde(RegistryClient(registry.url), v1)
    ptheirs = ProtobufSerializer(v1, sr, {"use.deprecated.format": False})
    msg = v1(sku="k", qty=3)
    pa, pb = pours.serialize(ptopic, msg), ptheirs(msg, pctx)
    assert pa == pb and unframe(pa, protobuf=True)[1] == [0]
    assert pours.deserialize(pb) == msg
    assert ProtobufDeserializer(v1, {"use.deprecated.format": False})(pa, pctx) == msg


def test_reads_an_existing_schemas_topic(broker: BrokerProcess, tmp_path: Path) -> None:
    """A ``_schemas`` topic as Confluent Schema Registry and Karapace write it (hand-made records,
    including Karapace's empty value for a deleted config and a NOOP) is read as they would."""
    topic = uniq("_schemas_existing")
    proto_text = 'syntax = "proto3";\npackage p;\nmessage M { string a = 1; }\n'

    def schema_rec(subject: str, version: int, sid: int, schema: str, **kw: Any) -> tuple[bytes, bytes]:
        key = {"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1}
        value = {"subject": subject, "version": version, "id": sid, "schema": schema, "deleted": False, **kw}
        return json.dumps(key).encode(), json.dumps(value).encode()

    def cfg(subject: str | None, level: str | None) -> tuple[bytes, bytes]:
        key = {"keytype": "CONFIG", "subject": subject, "magic": 0}
        value = json.dumps({"compatibilityLevel": level}).encode() if level else b""
        return json.dumps(key).encode(), value

    records = [
        (b'{"keytype":"NOOP","magic":0}', b""),
        cfg(None, "FULL"),
        schema_rec("a", 1, 1, '"string"'),
        schema_rec("a", 2, 5, '["null","string"]'),
        schema_rec("b", 1, 2, proto_text, schemaType="PROTOBUF"),
        schema_rec("c", 1, 3, '"int"'),
        (b'{"keytype":"DELETE_SUBJECT","subject":"c","magic":0}', b'{"subject":"c","version":1}'),
        schema_rec("d", 1, 4, '"long"'),
        (b'{"keytype":"SCHEMA","subject":"d","version":1,"magic":1}', b""),  # permanently deleted
        cfg("a", "NONE"),
        cfg("b", "FORWARD"),
        cfg("b", None),  # Karapace: empty value deletes the subject's config
        (b'{"keytype":"MODE","subject":"a","magic":0}', b'{"mode":"READONLY"}'),
    ]
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for k, v in records:
        p.produce(topic, key=k, value=v or None)
    assert p.flush(30) == 0
    r = RegistryProcess(broker.bootstrap, tmp_path / "r.log", "--topic", topic,
                        "--group-id", f"sr-{topic}").start()
    try:
        u = r.url
        assert http("GET", f"{u}/subjects")[1] == ["a", "b"]
        assert http("GET", f"{u}/subjects?deleted=true")[1] == ["a", "b", "c"]
        assert http("GET", f"{u}/subjects/a/versions")[1] == [1, 2]
        assert http("GET", f"{u}/subjects/a/versions/latest")[1]["id"] == 5
        assert http("GET", f"{u}/schemas/ids/2")[1] == {"schema": proto_text, "schemaType": "PROTOBUF"}
        assert http("GET", f"{u}/schemas/ids/4")[0] == 200
        assert http("GET", f"{u}/subjects/d/versions")[0] == 404
        assert http("GET", f"{u}/config")[1] == {"compatibilityLevel": "FULL"}
        assert http("GET", f"{u}/config/a")[1] == {"compatibilityLevel": "NONE"}
        assert http("GET", f"{u}/config/b")[1]["error_code"] == 40408
        assert http("GET", f"{u}/mode/a")[1] == {"mode": "READONLY"}
        # new ids continue after the highest one in the topic
        assert http("POST", f"{u}/subjects/e/versions", {"schema": '"float"'})[1] == {"id": 6}
    finally:
        r.stop()


@pytest.mark.slow
def test_leader_killed_follower_takes_over(broker: BrokerProcess, tmp_path: Path) -> None:
    """kill -9 of the leader: after the group's session timeout the follower leads and writes."""
    isolated = ("--topic", "_schemas_kill", "--group-id", "schema-registry-kill")
    a = RegistryProcess(broker.bootstrap, tmp_path / "a.log", *isolated).start()
    time.sleep(3)  # a leads alone
    b = RegistryProcess(broker.bootstrap, tmp_path / "b.log", *isolated).start()
    try:
        first = http("POST", f"{b.url}/subjects/{uniq('k')}/versions", {"schema": '"int"'})
        assert first[0] == 200
        assert a.proc is not None
        a.proc.kill()
        a.proc.wait()
        t = time.monotonic()
        status, body, _ = http("POST", f"{b.url}/subjects/{uniq('k')}/versions", {"schema": '"long"'})
        took = time.monotonic() - t
        assert status == 200, body
        assert body["id"] == first[1]["id"] + 1
        print(f"write accepted {took:.1f}s after the leader was killed")
        assert "election: leader" in b.log_path.read_text()
    finally:
        a.stop()
        b.stop()
