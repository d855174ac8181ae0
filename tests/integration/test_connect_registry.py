"""strom connect's registry converters (io.confluent.connect.avro.AvroConverter,
io.confluent.connect.json.JsonSchemaConverter, io.confluent.connect.protobuf.ProtobufConverter)
against a real `strom schema-registry` on a real broker, checked both ways with
confluent-kafka's own serializers and deserializers."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastavro")
pytest.importorskip("confluent_kafka.schema_registry")

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.serialization import MessageField, SerializationContext

from strom.connect.converters import make_converter
from strom.connect.data import DataException
from strom.testing.broker_process import BrokerProcess
from strom.testing.registry_process import RegistryProcess

pytestmark = pytest.mark.integration
SRC = str(Path(__file__).resolve().parents[2] / "src")

ORDER = {
    "type": "struct",
    "name": "shop.Order",
    "optional": False,
    "fields": [
        {"field": "id", "type": "int64", "optional": False},
        {"field": "sku", "type": "string", "optional": False},
        {"field": "note", "type": "string", "optional": True},
        {"field": "qty", "type": "int32", "optional": False},
    ],
}


@pytest.fixture(scope="module")
def registry_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    d = tmp_path_factory.mktemp("connect-sr")
    b = BrokerProcess(d / "data", overrides=["group.initial.rebalance.delay.ms=0"])
    b.start()
    reg = RegistryProcess(b.bootstrap, d / "registry.log")
    try:
        yield reg.start().url
    finally:
        reg.stop()
        b.stop()


def ctx(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


def test_avro_converter_both_ways(registry_url: str) -> None:
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

    sr = SchemaRegistryClient({"url": registry_url})
    conv = make_converter(
        "io.confluent.connect.avro.AvroConverter", {"schema.registry.url": registry_url}, False
    )
    value = {"id": 1, "sku": "A-1", "note": None, "qty": 3}
    data = conv.from_connect("orders-avro", ORDER, value)
    assert data is not None and data[0] == 0
    assert AvroDeserializer(sr)(data, ctx("orders-avro")) == value
    assert sr.get_latest_version("orders-avro-value").schema.schema_type in (None, "AVRO")
    # confluent-kafka's serializer -> the converter: a struct with Kafka's logical types
    schema = (
        '{"type":"record","name":"Reading","namespace":"iot","fields":[{"name":"v","type":"double"},'
        '{"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},'
        '{"name":"tag","type":["null","string"],"default":null}]}'
    )
    ser = AvroSerializer(sr, schema)
    at = dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=dt.UTC)
    raw = ser({"v": 1.5, "at": at, "tag": "x"}, ctx("readings"))
    s, v = conv.to_connect("readings", raw)
    assert v == {"v": 1.5, "at": at, "tag": "x"}
    assert s["name"] == "iot.Reading"
    assert [(f["field"], f["type"], f.get("name"), f["optional"]) for f in s["fields"]] == [
        ("v", "float64", None, False),
        ("at", "int64", "org.apache.kafka.connect.data.Timestamp", False),
        ("tag", "string", None, True),
    ]
    with pytest.raises(DataException):
        conv.to_connect("readings", b"not framed")


def test_json_schema_converter_both_ways(registry_url: str) -> None:
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer

    sr = SchemaRegistryClient({"url": registry_url})
    conv = make_converter(
        "io.confluent.connect.json.JsonSchemaConverter", {"schema.registry.url": registry_url}, False
    )
    value = {"id": 2, "sku": "B-2", "note": "gift", "qty": 1}
    data = conv.from_connect("orders-json", ORDER, value)
    assert data is not None
    assert sr.get_latest_version("orders-json-value").schema.schema_type == "JSON"
    assert JSONDeserializer(None, schema_registry_client=sr)(data, ctx("orders-json")) == value
    schema = (
        '{"type":"object","title":"Pet","properties":{"name":{"type":"string"},"age":{"type":"integer"}},'
        '"required":["name"]}'
    )
    raw = JSONSerializer(schema, sr)({"name": "rex", "age": 3}, ctx("pets"))
    s, v = conv.to_connect("pets", raw)
    assert v == {"name": "rex", "age": 3}
    assert s["name"] == "Pet" and [(f["field"], f["type"], f["optional"]) for f in s["fields"]] == [
        ("name", "string", False),
        ("age", "int64", True),
    ]
    with pytest.raises(DataException):  # does not fit its schema
        conv.from_connect("orders-json", ORDER, {"id": "x", "sku": "s", "qty": 1})


def test_protobuf_converter_both_ways(registry_url: str) -> None:
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FileDescriptorProto(name="item.proto", package="shop", syntax="proto3")
    msg = fdp.message_type.add(name="Item")
    f = descriptor_pb2.FieldDescriptorProto
    msg.field.add(name="sku", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    msg.field.add(name="qty", number=2, type=f.TYPE_INT32, label=f.LABEL_OPTIONAL)
    msg.field.add(name="tags", number=3, type=f.TYPE_STRING, label=f.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    item = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Item"))

    sr = SchemaRegistryClient({"url": registry_url})
    conv = make_converter(
        "io.confluent.connect.protobuf.ProtobufConverter", {"schema.registry.url": registry_url}, False
    )
    raw = ProtobufSerializer(item, sr, {"use.deprecated.format": False})(
        item(sku="s1", qty=4, tags=["a", "b"]), ctx("items")
    )
    s, v = conv.to_connect("items", raw)
    assert v == {"sku": "s1", "qty": 4, "tags": ["a", "b"]}
    assert s["name"] == "shop.Item"
    # the converter's own bytes: registered as PROTOBUF, read back by confluent-kafka's deserializer
    schema = {
        "type": "struct",
        "name": "shop.Item",
        "optional": False,
        "fields": [
            {"field": "sku", "type": "string", "optional": True},
            {"field": "qty", "type": "int32", "optional": True},
            {"field": "tags", "type": "array", "items": {"type": "string"}, "optional": True},
        ],
    }
    data = conv.from_connect("items-out", schema, {"sku": "s2", "qty": 5, "tags": ["c"]})
    assert data is not None
    assert sr.get_latest_version("items-out-value").schema.schema_type == "PROTOBUF"
    got = ProtobufDeserializer(item, {"use.deprecated.format": False})(data, ctx("items-out"))
    assert (got.sku, got.qty, list(got.tags)) == ("s2", 5, ["c"])


STRATEGIES = [
    ("RecordNameStrategy", lambda topic, rec: rec),
    ("TopicRecordNameStrategy", lambda topic, rec: f"{topic}-{rec}"),
    ("TopicNameStrategy", lambda topic, rec: f"{topic}-value"),
]


def _subjects_of(url: str, schema_id: int) -> list[str]:
    import json
    import urllib.request

    with urllib.request.urlopen(f"{url}/schemas/ids/{schema_id}/versions", timeout=30) as r:
        return sorted(v["subject"] for v in json.loads(r.read()))


@pytest.mark.parametrize(("strategy", "expect"), STRATEGIES, ids=[s for s, _ in STRATEGIES])
def test_subject_name_strategies_as_confluent(registry_url: str, strategy: str, expect: object) -> None:
    """key/value.subject.name.strategy with Confluent's class names: confluent-kafka's serializers
    configured with the same strategy, strom's serdes and strom's converters register under the
    same subject, and each reads the other's bytes."""
    import json

    import confluent_kafka.schema_registry as csr
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    from strom.serde import AvroSerde, JsonSerde, ProtobufSerde, RegistryClient, unframe

    subject_of = expect  # (topic, record name) -> subject
    assert callable(subject_of)
    func = {
        "RecordNameStrategy": csr.record_subject_name_strategy,
        "TopicRecordNameStrategy": csr.topic_record_subject_name_strategy,
        "TopicNameStrategy": csr.topic_subject_name_strategy,
    }[strategy]
    cls_name = f"io.confluent.kafka.serializers.subject.{strategy}"
    sr = SchemaRegistryClient({"url": registry_url})
    client = RegistryClient(registry_url)
    conv_props = {"schema.registry.url": registry_url, "value.subject.name.strategy": cls_name}
    value = {"v": 2.5, "tag": "t"}

    def reading(ns: str) -> dict[str, object]:
        fields = [
            {"field": "v", "type": "float64", "optional": False},
            {"field": "tag", "type": "string", "optional": False},
        ]
        return {"type": "struct", "name": f"{ns}.Reading", "optional": False, "fields": fields}

    # Avro (the record name is namespace.name)
    topic, ns = f"strat-avro-{strategy}", f"avro{strategy}"
    rec = f"{ns}.Reading"
    avro = json.dumps(
        {
            "type": "record",
            "name": "Reading",
            "namespace": ns,
            "fields": [{"name": "v", "type": "double"}, {"name": "tag", "type": "string"}],
        }
    )
    theirs = AvroSerializer(sr, avro, conf={"subject.name.strategy": func})(value, ctx(topic))
    assert _subjects_of(registry_url, unframe(theirs)[0]) == [subject_of(topic, rec)]
    ours = AvroSerde(client, avro, subject_name_strategy=cls_name).serialize(topic, value)
    assert ours == theirs  # same subject, so the same id; the same Avro bytes
    conv = make_converter("io.confluent.connect.avro.AvroConverter", conv_props, False)
    data = conv.from_connect(topic, reading(ns), value)
    assert data is not None and subject_of(topic, rec) in _subjects_of(registry_url, unframe(data)[0])
    assert AvroDeserializer(sr)(data, ctx(topic)) == value

    # JSON Schema (the record name is the title)
    topic, ns = f"strat-json-{strategy}", f"json{strategy}"
    rec = f"{ns}.Reading"
    js = json.dumps(
        {
            "title": rec,
            "type": "object",
            "properties": {"v": {"type": "number"}, "tag": {"type": "string"}},
            "required": ["v", "tag"],
            "additionalProperties": False,  # closed, as the converter's schema of a struct
        }
    )
    theirs = JSONSerializer(js, sr, conf={"subject.name.strategy": func})(value, ctx(topic))
    sid = unframe(theirs)[0]
    assert _subjects_of(registry_url, sid) == [subject_of(topic, rec)]
    ours = JsonSerde(client, js, subject_name_strategy=cls_name).serialize(topic, value)
    assert unframe(ours)[0] == sid
    conv = make_converter("io.confluent.connect.json.JsonSchemaConverter", conv_props, False)
    data = conv.from_connect(topic, reading(ns), value)
    assert data is not None and subject_of(topic, rec) in _subjects_of(registry_url, unframe(data)[0])
    assert JSONDeserializer(None, schema_registry_client=sr)(data, ctx(topic)) == value

    # Protobuf (the record name is the message's full name)
    topic, ns = f"strat-pb-{strategy}", f"pb{strategy}"
    rec = f"{ns}.Reading"
    fdp = descriptor_pb2.FileDescriptorProto(name=f"reading-{strategy}.proto", package=ns, syntax="proto3")
    m = fdp.message_type.add(name="Reading")
    f = descriptor_pb2.FieldDescriptorProto
    m.field.add(name="v", number=1, type=f.TYPE_DOUBLE, label=f.LABEL_OPTIONAL)
    m.field.add(name="tag", number=2, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    msg_cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(rec))
    theirs = ProtobufSerializer(msg_cls, sr, {"use.deprecated.format": False, "subject.name.strategy": func})(
        msg_cls(v=2.5, tag="t"), ctx(topic)
    )
    assert _subjects_of(registry_url, unframe(theirs, True)[0]) == [subject_of(topic, rec)]
    ours = ProtobufSerde(client, msg_cls, subject_name_strategy=cls_name).serialize(
        topic, msg_cls(v=2.5, tag="t")
    )
    assert _subjects_of(registry_url, unframe(ours, True)[0]) == [subject_of(topic, rec)]
    conv = make_converter("io.confluent.connect.protobuf.ProtobufConverter", conv_props, False)
    data = conv.from_connect(topic, reading(ns), value)
    assert data is not None
    assert subject_of(topic, rec) in _subjects_of(registry_url, unframe(data, True)[0])
    got = ProtobufDeserializer(msg_cls, {"use.deprecated.format": False})(data, ctx(topic))
    assert (got.v, got.tag) == (2.5, "t")


def test_unknown_subject_name_strategy() -> None:
    from strom.connect.data import ConfigError

    with pytest.raises(ConfigError, match=r"value\.subject\.name\.strategy.*RecordNameStrategy"):
        make_converter(
            "io.confluent.connect.avro.AvroConverter",
            {"schema.registry.url": "http://127.0.0.1:1", "value.subject.name.strategy": "com.x.MyStrategy"},
            False,
        )
