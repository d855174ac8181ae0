"""``keyFormat``/``valueFormat`` of the strom source and sink against a real broker, a real
``strom schema-registry`` process and local Spark, interoperating both ways with confluent-kafka's
Avro, JSON Schema and Protobuf serializers and deserializers (unchanged)."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastavro")
pytest.importorskip("confluent_kafka.schema_registry")

from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.serialization import MessageField, SerializationContext

from strom.testing.broker_process import BrokerProcess

from .conftest import create_topic

pytestmark = [pytest.mark.spark, pytest.mark.integration]
SRC = str(Path(__file__).resolve().parents[2] / "src")

USER = json.dumps(
    {
        "type": "record",
        "name": "User",
        "namespace": "ex",
        "fields": [
            {"name": "name", "type": "string"},
            {"name": "age", "type": "int"},
            {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
            {"name": "email", "type": ["null", "string"], "default": None},
        ],
    }
)
ORDER = json.dumps(
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Order",
        "type": "object",
        "properties": {"id": {"type": "integer"}, "item": {"type": "string"}, "price": {"type": "number"}},
        "required": ["id"],
    }
)


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for k, v in records:
        p.produce(topic, key=k, value=v)
    assert p.flush(30) == 0


def consume(bootstrap: str, topic: str, n: int) -> list[Any]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uniq("g"), "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    out: list[Any] = []
    deadline = time.monotonic() + 30
    while len(out) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            out.append(m)
    c.close()
    return out


def read(spark: Any, bootstrap: str, topic: str, **opts: str) -> Any:
    r = (
        spark.read.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def write(df: Any, bootstrap: str, topic: str, **opts: str) -> None:
    w = (
        df.write.mode("append")
        .format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
    )
    for k, v in opts.items():
        w = w.option(k, v)
    w.save()


def test_avro_both_ways_with_confluent_serdes(spark: Any, kbroker: BrokerProcess, registry: str) -> None:
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

    sr = SchemaRegistryClient({"url": registry})
    src, dst = uniq("avro-in"), uniq("avro-out")
    create_topic(kbroker.bootstrap, src, 2)
    create_topic(kbroker.bootstrap, dst, 1)
    ctx = SerializationContext(src, MessageField.VALUE)
    ser = AvroSerializer(sr, USER)
    users = [
        {"name": f"u{i}", "age": 20 + i, "tags": [f"t{i}"] * (i % 3), "email": None if i % 2 else f"u{i}@x"}
        for i in range(40)
    ]
    produce(kbroker.bootstrap, src, [(f"k{i}".encode(), ser(u, ctx)) for i, u in enumerate(users)])

    df = read(
        spark,
        kbroker.bootstrap,
        src,
        valueFormat="avro",
        keyFormat="string",
        **{"schema.registry.url": registry},
    )
    # the schema is known at planning time, from the registered schema
    assert df.schema["value"].dataType.simpleString() == (
        "struct<name:string,age:int,tags:array<string>,email:string>"
    )
    assert df.schema["key"].dataType.simpleString() == "string"
    rows = df.select("key", "value.*").collect()
    got = sorted((r["key"], r["name"], r["age"], list(r["tags"]), r["email"]) for r in rows)
    assert got == sorted((f"k{i}", u["name"], u["age"], u["tags"], u["email"]) for i, u in enumerate(users))

    # Spark writes the struct back with the schema it registers (valueSchema); confluent-kafka's
    # deserializer reads it
    out = df.where("value.age >= 50").select("key", "value")
    write(
        out,
        kbroker.bootstrap,
        dst,
        valueFormat="avro",
        keyFormat="string",
        valueSchema=USER,
        **{"schema.registry.url": registry},
    )
    msgs = consume(kbroker.bootstrap, dst, 10)
    de = AvroDeserializer(SchemaRegistryClient({"url": registry}))
    dctx = SerializationContext(dst, MessageField.VALUE)
    decoded = sorted((m.key().decode(), de(m.value(), dctx)) for m in msgs)
    assert [(k, v["name"], v["tags"], v["email"]) for k, v in decoded] == sorted(
        (f"k{i}", u["name"], u["tags"], u["email"]) for i, u in enumerate(users) if u["age"] >= 50
    )
    assert sr.get_latest_version(f"{dst}-value").schema.schema_str is not None
    # the very bytes confluent-kafka's serializer makes for the record
    assert msgs[0].value() == AvroSerializer(sr, USER)(de(msgs[0].value(), dctx), dctx)


def test_subject_name_strategy_option(spark: Any, kbroker: BrokerProcess, registry: str) -> None:
    """valueSubjectNameStrategy=TopicRecordNameStrategy: the sink registers under
    <topic>-<record name>, as confluent-kafka's serializer with the same strategy (same bytes)."""
    import confluent_kafka.schema_registry as csr
    from confluent_kafka.schema_registry.avro import AvroSerializer

    sr = SchemaRegistryClient({"url": registry})
    dst = uniq("avro-strat")
    create_topic(kbroker.bootstrap, dst, 1)
    df = spark.createDataFrame(
        [("k1", ("ann", 31, ["a"], None))],
        "key string, value struct<name:string,age:int,tags:array<string>,email:string>",
    )
    strategy = "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy"
    opts = {"schema.registry.url": registry, "valueSubjectNameStrategy": strategy}
    write(df, kbroker.bootstrap, dst, valueFormat="avro", keyFormat="string", valueSchema=USER, **opts)
    (m,) = consume(kbroker.bootstrap, dst, 1)
    assert sr.get_latest_version(f"{dst}-ex.User").schema_id == int.from_bytes(m.value()[1:5], "big")
    ctx = SerializationContext(dst, MessageField.VALUE)
    theirs = AvroSerializer(sr, USER, conf={"subject.name.strategy": csr.topic_record_subject_name_strategy})
    assert m.value() == theirs({"name": "ann", "age": 31, "tags": ["a"], "email": None}, ctx)
    rows = read(spark, kbroker.bootstrap, dst, valueFormat="avro", valueSchema=USER, **opts).collect()
    assert rows[0]["value"]["name"] == "ann"
    # without a schema there is no record name to look the subject up by
    with pytest.raises(Exception, match=r"valueSubjectNameStrategy.*record name comes from the schema"):
        read(spark, kbroker.bootstrap, dst, valueFormat="avro", **opts).collect()
    with pytest.raises(Exception, match="unknown subject name strategy"):
        read(spark, kbroker.bootstrap, dst, valueFormat="avro", **{**opts, "valueSubjectNameStrategy": "X"})


def test_avro_evolution_reader_schema_and_version(spark: Any, kbroker: BrokerProcess, registry: str) -> None:
    """Records of several writer schemas are read with the one reader schema (Avro resolution)."""
    from confluent_kafka.schema_registry.avro import AvroSerializer

    sr = SchemaRegistryClient({"url": registry})
    topic = uniq("avro-evo")
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1 = json.dumps({"type": "record", "name": "P", "fields": [{"name": "a", "type": "int"}]})
    v2 = json.dumps(
        {
            "type": "record",
            "name": "P",
            "fields": [{"name": "a", "type": "long"}, {"name": "b", "type": "string", "default": "none"}],
        }
    )
    produce(kbroker.bootstrap, topic, [(None, AvroSerializer(sr, v1)({"a": 1}, ctx))])
    produce(kbroker.bootstrap, topic, [(None, AvroSerializer(sr, v2)({"a": 2, "b": "two"}, ctx))])
    opts = {"schema.registry.url": registry, "valueFormat": "avro"}
    latest = read(spark, kbroker.bootstrap, topic, **opts)
    assert latest.schema["value"].dataType.simpleString() == "struct<a:bigint,b:string>"
    assert sorted((r.a, r.b) for r in latest.select("value.*").collect()) == [(1, "none"), (2, "two")]
    # pinned to version 1: a long cannot be read as an int (Avro's resolution rules), so the v2
    # record is an error, here kept (PERMISSIVE) as a null value with the reason
    first = read(spark, kbroker.bootstrap, topic, valueSchemaVersion="1", mode="PERMISSIVE", **opts)
    assert first.schema["value"].dataType.simpleString() == "struct<a:int>"
    got = sorted(tuple(r) for r in first.select("offset", "value.a", "valueError").collect())
    assert got[0] == (0, 1, None)
    assert got[1][:2] == (1, None) and "long is not int" in got[1][2]


def test_json_schema_both_ways(spark: Any, kbroker: BrokerProcess, registry: str) -> None:
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer

    sr = SchemaRegistryClient({"url": registry})
    src, dst = uniq("js-in"), uniq("js-out")
    create_topic(kbroker.bootstrap, dst)
    ctx = SerializationContext(src, MessageField.VALUE)
    ser = JSONSerializer(ORDER, sr)
    orders = [{"id": i, "item": f"thing{i}", "price": i * 1.5} for i in range(10)] + [{"id": 99}]
    produce(kbroker.bootstrap, src, [(None, ser(o, ctx)) for o in orders])
    opts = {"schema.registry.url": registry}
    df = read(spark, kbroker.bootstrap, src, valueFormat="json-schema", **opts)
    assert df.schema["value"].dataType.simpleString() == "struct<id:bigint,item:string,price:double>"
    rows = sorted(tuple(r) for r in df.select("value.*").collect())
    assert rows == sorted((o["id"], o.get("item"), o.get("price")) for o in orders)

    write(df.select("value"), kbroker.bootstrap, dst, valueFormat="json-schema", valueSchema=ORDER, **opts)
    de = JSONDeserializer(None, schema_registry_client=SchemaRegistryClient({"url": registry}))
    dctx = SerializationContext(dst, MessageField.VALUE)
    back = [de(m.value(), dctx) for m in consume(kbroker.bootstrap, dst, len(orders))]
    assert sorted(back, key=lambda o: o["id"]) == orders  # null fields left out, not written as null
    assert sr.get_latest_version(f"{dst}-value").schema.schema_type == "JSON"

    # a row that breaks the schema (id is required) is refused with its reason
    bad = spark.createDataFrame([((None, "x", 1.0),)], "value struct<id:bigint,item:string,price:double>")
    with pytest.raises(Exception, match="does not match its JSON Schema"):
        write(bad, kbroker.bootstrap, dst, valueFormat="json-schema", **opts)


def _item_class() -> Any:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(
        name=f"item_{uuid.uuid4().hex[:6]}.proto", package="shop", syntax="proto3"
    )
    msg = fdp.message_type.add(name="Item")
    msg.field.add(name="sku", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    msg.field.add(name="qty", number=2, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    msg.field.add(name="tags", number=3, type=F.TYPE_STRING, label=F.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Item"))


def test_protobuf_both_ways(spark: Any, kbroker: BrokerProcess, registry: str) -> None:
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

    item = _item_class()
    sr = SchemaRegistryClient({"url": registry})
    src, dst = uniq("pb-in"), uniq("pb-out")
    create_topic(kbroker.bootstrap, dst)
    ctx = SerializationContext(src, MessageField.VALUE)
    ser = ProtobufSerializer(item, sr, {"use.deprecated.format": False})
    msgs = [item(sku=f"s{i}", qty=i, tags=["a"] * i) for i in range(6)]
    produce(kbroker.bootstrap, src, [(None, ser(m, ctx)) for m in msgs])
    opts = {"schema.registry.url": registry}
    df = read(spark, kbroker.bootstrap, src, valueFormat="protobuf", **opts)
    assert df.schema["value"].dataType.simpleString() == "struct<sku:string,qty:int,tags:array<string>>"
    rows = sorted((r.sku, r.qty, list(r.tags)) for r in df.select("value.*").collect())
    assert rows == [(f"s{i}", i, ["a"] * i) for i in range(6)]

    # the output subject gets the schema confluent-kafka registered for the input one
    sr.register_schema(f"{dst}-value", sr.get_latest_version(f"{src}-value").schema)
    write(df.select("value"), kbroker.bootstrap, dst, valueFormat="protobuf", **opts)
    de = ProtobufDeserializer(item, {"use.deprecated.format": False})
    dctx = SerializationContext(dst, MessageField.VALUE)
    back = sorted(
        (m.sku, m.qty, list(m.tags))
        for m in (de(x.value(), dctx) for x in consume(kbroker.bootstrap, dst, len(msgs)))
    )
    assert back == rows


def test_undecodable_records_failfast_and_permissive(
    spark: Any, kbroker: BrokerProcess, registry: str
) -> None:
    from confluent_kafka.schema_registry.avro import AvroSerializer

    sr = SchemaRegistryClient({"url": registry})
    topic = uniq("avro-bad")
    ctx = SerializationContext(topic, MessageField.VALUE)
    good = AvroSerializer(sr, USER)({"name": "ok", "age": 1}, ctx)
    produce(
        kbroker.bootstrap, topic, [(None, good), (None, b"not avro at all"), (None, good[:7]), (None, None)]
    )
    opts = {"schema.registry.url": registry, "valueFormat": "avro"}
    with pytest.raises(Exception, match=rf"Malformed records.*{topic}-0 offset 1.*unknown magic byte"):
        read(spark, kbroker.bootstrap, topic, **opts).collect()
    df = read(spark, kbroker.bootstrap, topic, mode="PERMISSIVE", includeRaw="true", **opts)
    assert df.columns[-2:] == ["valueError", "valueRaw"]
    rows = sorted(tuple(r) for r in df.select("offset", "value.name", "valueError", "valueRaw").collect())
    assert rows[0] == (0, "ok", None, good)
    assert rows[1][1] is None and "magic byte" in rows[1][2] and rows[1][3] == b"not avro at all"
    assert rows[2][1] is None and rows[2][2] and rows[2][3] == good[:7]
    assert rows[3] == (3, None, None, None)  # a tombstone is a null value, not an error


def test_string_and_json_formats(spark: Any, kbroker: BrokerProcess) -> None:
    topic = uniq("plain")
    docs = [{"n": i, "s": f"v{i}"} for i in range(5)]
    produce(
        kbroker.bootstrap, topic, [(f"k{i}".encode(), json.dumps(d).encode()) for i, d in enumerate(docs)]
    )
    schema = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"}}})
    df = read(spark, kbroker.bootstrap, topic, keyFormat="string", valueFormat="json", valueSchema=schema)
    assert [f.dataType.simpleString() for f in df.schema.fields[:2]] == [
        "string",
        "struct<n:bigint,s:string>",
    ]
    assert sorted((r.key, r.value.n, r.value.s) for r in df.collect()) == [
        (f"k{i}", i, f"v{i}") for i in range(5)
    ]
    # json with a Spark schema, written back as JSON text
    out = uniq("plain-out")
    create_topic(kbroker.bootstrap, out)
    write(
        df.select("key", "value"),
        kbroker.bootstrap,
        out,
        keyFormat="string",
        valueFormat="json",
        valueSchema=df.schema["value"].dataType.json(),
    )
    got = sorted((json.loads(m.value()) for m in consume(kbroker.bootstrap, out, 5)), key=lambda d: d["n"])
    assert got == docs


def test_option_errors(spark: Any, kbroker: BrokerProcess, registry: str) -> None:
    from strom.spark import StromOptionError
    from strom.spark.formats import resolve_format

    topic = uniq("opts")
    create_topic(kbroker.bootstrap, topic)
    for opts, message in [
        ({"valueFormat": "xml"}, "must be one of binary, string, json"),
        ({"valueFormat": "avro"}, "needs the option 'schema.registry.url'"),
        ({"valueFormat": "avro", "schema.registry.url": registry}, f"Subject '{topic}-value' not found"),
        ({"valueFormat": "json"}, "needs the option 'valueSchema'"),
        (
            {"valueFormat": "avro", "mode": "LENIENT", "schema.registry.url": registry},
            "FAILFAST or PERMISSIVE",
        ),
    ]:
        with pytest.raises(Exception, match=message):
            read(spark, kbroker.bootstrap, topic, **opts).schema  # noqa: B018
    with pytest.raises(StromOptionError, match="cannot be derived"):
        resolve_format(
            {"valueFormat": "avro", "schema.registry.url": registry}, "value", None, for_write=False
        )
    # a struct column that does not fit the registered schema is refused when the write starts
    SchemaRegistryClient({"url": registry}).register_schema(f"{topic}-value", Schema(USER, "AVRO"))
    bad = spark.createDataFrame([(("x", 1, "extra"),)], "value struct<name:string,age:int,nick:string>")
    with pytest.raises(Exception, match="nick of the value column are not in the schema"):
        write(bad, kbroker.bootstrap, topic, valueFormat="avro", **{"schema.registry.url": registry})


def test_streaming_avro_exactly_once(
    spark: Any, kbroker: BrokerProcess, registry: str, tmp_path: Path
) -> None:
    """readStream with valueFormat=avro into writeStream with valueFormat=avro, exactlyOnce."""
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

    sr = SchemaRegistryClient({"url": registry})
    src, dst = uniq("st-in"), uniq("st-out")
    create_topic(kbroker.bootstrap, src, 2)
    create_topic(kbroker.bootstrap, dst, 2)
    ctx = SerializationContext(src, MessageField.VALUE)
    ser = AvroSerializer(sr, USER)
    produce(
        kbroker.bootstrap, src, [(f"k{i}".encode(), ser({"name": f"n{i}", "age": i}, ctx)) for i in range(30)]
    )
    opts = {"schema.registry.url": registry}
    df = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", kbroker.bootstrap)
        .option("subscribe", src)
        .option("startingOffsets", "earliest")
        .option("valueFormat", "avro")
        .option("schema.registry.url", registry)
        .load()
    )
    older = df.selectExpr("key", "named_struct('name', upper(value.name), 'age', value.age + 1) AS value")
    q = (
        older.writeStream.format("strom")
        .option("kafka.bootstrap.servers", kbroker.bootstrap)
        .option("topic", dst)
        .option("exactlyOnce", "true")
        .option("valueFormat", "avro")
        .option("valueSchema", USER)
        .option("schema.registry.url", opts["schema.registry.url"])
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(180)
    assert q.exception() is None
    de = AvroDeserializer(SchemaRegistryClient({"url": registry}))
    dctx = SerializationContext(dst, MessageField.VALUE)
    got = sorted((m.key().decode(), de(m.value(), dctx)) for m in consume(kbroker.bootstrap, dst, 30))
    assert [(k, v["name"], v["age"]) for k, v in got] == sorted((f"k{i}", f"N{i}", i + 1) for i in range(30))
