"""strom.streams' serdes without Spark: names, registry serdes against a real strom schema
registry, and the errors of bad definitions and undecodable records."""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom import streams as S
from strom.streams import serdes
from strom.testing.broker_process import BrokerProcess
from strom.testing.registry_process import RegistryProcess

SCHEMA = json.dumps({"type": "record", "name": "Trade", "namespace": "t",
                     "fields": [{"name": "sym", "type": "string"}, {"name": "qty", "type": "int"}]})


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    d = tmp_path_factory.mktemp("sr")
    broker = BrokerProcess(d / "data")
    broker.start()
    reg = RegistryProcess(broker.bootstrap, d / "registry.log")
    try:
        yield reg.start(timeout=60).url
    finally:
        reg.stop()
        broker.stop()


def test_names_round_trip_and_errors() -> None:
    assert serdes.decode("json", serdes.encode("json", {"a": [1, 2]}), "t-0 offset 1") == {"a": [1, 2]}
    assert serdes.decode("string", serdes.encode("string", "å"), "w") == "å"
    assert serdes.encode("json", None) is None and serdes.decode("json", None, "w") is None
    with pytest.raises(serdes.DecodeError, match=r"record t-0 offset 7 is not json"):
        serdes.decode("json", b"{nope", "t-0 offset 7")
    with pytest.raises(ValueError, match="unknown serde 'xml'"):
        serdes.check("xml")
    with pytest.raises(ValueError, match="http"):
        S.avro("localhost:8081", SCHEMA)
    with pytest.raises(ValueError, match="not JSON"):
        S.avro("http://127.0.0.1:1", "{nope")
    with pytest.raises(ValueError, match="message_class"):
        S.protobuf("http://127.0.0.1:1", object)
    with pytest.raises(ValueError):
        S.avro("http://127.0.0.1:1", SCHEMA, subject_name_strategy="NoSuchStrategy")


def test_avro_with_the_registry_both_ways(registry: str) -> None:
    s = S.avro(registry, SCHEMA)
    raw = serdes.encode(s, {"sym": "AAPL", "qty": 3}, "trades")
    assert raw is not None and raw[0] == 0  # the wire format's magic byte, then the schema id
    # a copy made by pickling (as Spark ships it) has no client yet and reads it back
    copy = pickle.loads(pickle.dumps(s))
    assert copy._impl is None
    assert serdes.decode(copy, raw, "trades-0 offset 0") == {"sym": "AAPL", "qty": 3}
    with pytest.raises(serdes.DecodeError, match=r"trades-0 offset 9 is not avro"):
        serdes.decode(copy, b"plain text, no magic byte", "trades-0 offset 9")
    js = S.json_schema(registry, json.dumps({"type": "object", "required": ["sym"]}))
    raw2 = serdes.encode(js, {"sym": "X"}, "docs")
    assert serdes.decode(js, raw2, "docs-0 offset 0") == {"sym": "X"}
    with pytest.raises(ValueError, match="JSON Schema"):
        serdes.encode(js, {"qty": 1}, "docs")


def test_pipeline_error_options_are_checked_at_definition(tmp_path: Path) -> None:
    from strom.streams.dsl import _source

    with pytest.raises(ValueError, match="on_error must be one of"):
        _source(None, "t", "b", "json", "json", None, on_error="ignore")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs dlq_topic"):
        _source(None, "t", "b", "json", "json", None, on_error="dlq")  # type: ignore[arg-type]
    src = _source(None, "t", "b", "json", S.avro("http://127.0.0.1:1", SCHEMA), None,  # type: ignore[arg-type]
                  on_error="dlq", dlq_topic="t-dlq")
    assert src.dlq_topic == "t-dlq" and isinstance(src.value_serde, serdes.RegistrySerde)


def test_protobuf_interoperates_with_confluent_kafka(registry: str) -> None:
    pytest.importorskip("google.protobuf")
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="streams_item.proto", package="shop", syntax="proto3")
    msg = fdp.message_type.add(name="Item")
    msg.field.add(name="sku", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    msg.field.add(name="qty", number=2, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    item = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Item"))

    s = S.protobuf(registry, item)
    raw = serdes.encode(s, item(sku="a", qty=3), "items")
    got = ProtobufDeserializer(item, {"use.deprecated.format": False})(
        raw, SerializationContext("items", MessageField.VALUE))
    assert (got.sku, got.qty) == ("a", 3)  # confluent-kafka reads what strom.streams wrote
    ser = ProtobufSerializer(item, SchemaRegistryClient({"url": registry}), {"use.deprecated.format": False})
    theirs = ser(item(sku="b", qty=4), SerializationContext("items2", MessageField.VALUE))
    back = serdes.decode(s, theirs, "items2-0 offset 0")
    assert (back.sku, back.qty) == ("b", 4)  # and the other way round

