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
