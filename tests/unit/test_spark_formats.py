"""strom.spark.formats without Spark's JVM: Spark types derived from Avro / JSON Schema / Protobuf
schemas, and column decoding with its FAILFAST / PERMISSIVE error handling."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")
fastavro = pytest.importorskip("fastavro")

from strom.serde import frame  # noqa: E402
from strom.spark.formats import (  # noqa: E402
    DecodeError,
    FieldFormat,
    _avro_spark,
    _json_schema_spark,
    _proto_message,
    _proto_spark,
    codec,
    decode_column,
    encode_column,
    resolve_format,
)
from strom.spark.options import StromOptionError  # noqa: E402


def avro_type(schema: Any) -> str:
    return str(_avro_spark(schema, {}, set())[0].simpleString())


def test_avro_types_as_from_avro() -> None:
    schema = {
        "type": "record",
        "name": "R",
        "namespace": "n",
        "fields": [
            {"name": "i", "type": "int"},
            {"name": "l", "type": "long"},
            {"name": "f", "type": "float"},
            {"name": "b", "type": "bytes"},
            {"name": "opt", "type": ["null", "string"]},
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
            {"name": "fx", "type": {"type": "fixed", "name": "F", "size": 4}},
            {"name": "m", "type": {"type": "map", "values": "double"}},
            {"name": "u", "type": ["int", "string"]},
            {"name": "d", "type": {"type": "int", "logicalType": "date"}},
            {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
            {"name": "again", "type": "E"},
            {
                "name": "inner",
                "type": {"type": "record", "name": "In", "fields": [{"name": "x", "type": "int"}]},
            },
        ],
    }
    assert avro_type(schema) == (
        "struct<i:int,l:bigint,f:float,b:binary,opt:string,e:string,fx:binary,m:map<string,double>,"
        "u:struct<member0:int,member1:string>,d:date,ts:timestamp,dec:decimal(9,2),again:string,"
        "inner:struct<x:int>>"
    )
    with pytest.raises(ValueError, match="recursive"):
        avro_type({"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]})


def test_json_schema_types() -> None:
    doc = {
        "type": "object",
        "definitions": {"P": {"type": "object", "properties": {"x": {"type": "number"}}}},
        "properties": {
            "id": {"type": "integer"},
            "name": {"type": ["string", "null"]},
            "ok": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "p": {"$ref": "#/definitions/P"},
            "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "attrs": {"type": "object", "additionalProperties": {"type": "integer"}},
            "free": {},
            "either": {"oneOf": [{"type": "integer"}, {"type": "string"}]},
        },
    }
    assert _json_schema_spark(doc).simpleString() == (
        "struct<id:bigint,name:string,ok:boolean,tags:array<string>,p:struct<x:double>,maybe:bigint,"
        "attrs:map<string,bigint>,free:string,either:string>"
    )
    with pytest.raises(StromOptionError, match="only local references"):
        _json_schema_spark({"type": "object", "properties": {"a": {"$ref": "other.json"}}})


def fmt_json(permissive: bool = False) -> FieldFormat:
    schema = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"}}})
    f = resolve_format(
        {"valueFormat": "json", "valueSchema": schema, "mode": "PERMISSIVE" if permissive else "FAILFAST"},
        "value",
        "t",
        for_write=False,
    )
    assert f is not None
    return f


def where(i: int) -> str:
    return f"t-0 offset {100 + i}"


def test_decode_failfast_names_the_record() -> None:
    raw = pa.array([b'{"n": 1, "s": "a"}', None, b'{"n": "x"}'], pa.binary())
    with pytest.raises(DecodeError, match=r"t-0 offset 102 is not json: n: expected an integer"):
        decode_column(fmt_json(), raw, where)


def test_decode_permissive_nulls_and_reasons() -> None:
    raw = pa.array(
        [b'{"n": 1, "s": "a", "extra": true}', None, b'{"n": 1.5}', b"{not json", b'{"n": 2}'], pa.binary()
    )
    col, errors = decode_column(fmt_json(True), raw, where)
    assert col.to_pylist() == [{"n": 1, "s": "a"}, None, None, None, {"n": 2, "s": None}]
    errs = errors.to_pylist()
    assert errs[0] is None and errs[1] is None and errs[4] is None
    assert "expected an integer" in errs[2] and errs[3]


def test_string_format_vectorised_and_bad_utf8() -> None:
    f = resolve_format({"keyFormat": "string", "mode": "PERMISSIVE"}, "key", None, for_write=False)
    assert f is not None
    col, errors = decode_column(f, pa.array([b"abc", None, b"\xff\xfe"], pa.binary()), where)
    assert col.to_pylist() == ["abc", None, None]
    assert errors is not None and errors.to_pylist()[2].startswith("'utf-8' codec can't decode")


def test_avro_codec_reads_writer_schema_and_writes_frames() -> None:
    v1 = {"type": "record", "name": "P", "fields": [{"name": "a", "type": "int"}]}
    v2 = {
        "type": "record",
        "name": "P",
        "fields": [
            {"name": "a", "type": "long"},
            {"name": "u", "type": ["null", "int", "string"], "default": None},
        ],
    }
    f = FieldFormat(
        "value",
        "avro",
        _avro_spark(v2, {}, set())[0].json(),
        schema=json.dumps(v2),
        schema_id=2,
        registry_url="http://127.0.0.1:9",
    )
    c = codec(f)
    c._writers[1] = fastavro.parse_schema(v1)  # the writer schema by id, as fetched from the registry
    c._writers[2] = fastavro.parse_schema(v2)
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(v1), {"a": 7})
    written = encode_column(
        f,
        pa.array(
            [{"a": 8, "u": {"member0": None, "member1": "s"}}, None],
            pa.struct(
                [("a", pa.int64()), ("u", pa.struct([("member0", pa.int32()), ("member1", pa.string())]))]
            ),
        ),
        where,
    )
    assert written[1] is None and written[0] is not None and written[0][:5] == frame(2, b"")
    col, _ = decode_column(f, pa.array([frame(1, buf.getvalue()), written[0]], pa.binary()), where)
    assert col.to_pylist() == [{"a": 7, "u": None}, {"a": 8, "u": {"member0": None, "member1": "s"}}]


def test_protobuf_types_and_roundtrip() -> None:
    from google.protobuf import descriptor_pb2

    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="t.proto", package="p", syntax="proto3")
    other = fdp.message_type.add(name="Other")
    other.field.add(name="x", number=1, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    m = fdp.message_type.add(name="M")
    m.field.add(name="s", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    m.field.add(name="big", number=2, type=F.TYPE_UINT64, label=F.LABEL_OPTIONAL)
    m.field.add(name="o", number=3, type=F.TYPE_MESSAGE, type_name=".p.Other", label=F.LABEL_OPTIONAL)
    m.field.add(name="r", number=4, type=F.TYPE_DOUBLE, label=F.LABEL_REPEATED)
    serialized = base64.b64encode(fdp.SerializeToString()).decode()
    name, indexes, desc = _proto_message(serialized, "p.M", "value")
    assert (name, indexes) == ("p.M", (1,))
    st = _proto_spark(desc, ())
    assert st.simpleString() == "struct<s:string,big:bigint,o:struct<x:int>,r:array<double>>"
    f = FieldFormat(
        "value", "protobuf", st.json(), schema=serialized, schema_id=5, message=name, message_indexes=indexes
    )
    rows = pa.array(
        [{"s": "a", "big": 3, "o": {"x": 4}, "r": [1.5]}, {"s": "b", "big": 0, "o": None, "r": []}],
        pa.struct(
            [
                ("s", pa.string()),
                ("big", pa.int64()),
                ("o", pa.struct([("x", pa.int32())])),
                ("r", pa.list_(pa.float64())),
            ]
        ),
    )
    data = encode_column(f, rows, where)
    assert data[0] is not None and data[0][:7] == frame(5, b"", [1])
    col, _ = decode_column(f, pa.array(data, pa.binary()), where)
    assert col.to_pylist() == rows.to_pylist()
    with pytest.raises(DecodeError, match="message indexes"):
        decode_column(f, pa.array([frame(5, b"", [0])], pa.binary()), where)


def test_reader_schema_given_needs_no_subject() -> None:
    """Reading several topics (no subject to derive) works when the reader schema is given."""
    schema = json.dumps({"type": "record", "name": "P", "fields": [{"name": "a", "type": "long"}]})
    opts = {"valueFormat": "avro", "schema.registry.url": "http://127.0.0.1:9", "valueSchema": schema}
    f = resolve_format(opts, "value", None, for_write=False)
    assert f is not None and f.subject is None and f.spark_type.simpleString() == "struct<a:bigint>"
    with pytest.raises(StromOptionError, match="cannot be derived"):
        resolve_format(opts, "value", None, for_write=True)  # on write it is registered: a subject
    with pytest.raises(StromOptionError, match="at most one of"):
        resolve_format({**opts, "valueSchemaVersion": "2"}, "value", "t", for_write=False)
