"""Connect's String, ByteArray and JSON converters, and errors.* through the pipeline (tolerance,
dead letter queue records and their __connect.errors.* headers)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import logging

import pytest

from strom.connect.config import parse_config
from strom.connect.converters import java_str, make_converter
from strom.connect.data import DataException
from strom.connect.errors import RawRecord, ToleranceExceeded
from strom.connect.pipeline import Pipeline

JSON = "org.apache.kafka.connect.json.JsonConverter"


def test_string_and_bytearray() -> None:
    s = make_converter("org.apache.kafka.connect.storage.StringConverter", {}, is_key=False)
    assert s.to_connect("t", "héllo".encode()) == ({"type": "string", "optional": True}, "héllo")
    assert s.to_connect("t", None)[1] is None
    assert s.from_connect("t", None, 42) == b"42"
    assert s.from_connect("t", None, None) is None
    latin = make_converter("StringConverter", {"converter.encoding": "ISO-8859-1"}, is_key=True)
    assert latin.from_connect("t", None, "é") == b"\xe9"
    b = make_converter("org.apache.kafka.connect.converters.ByteArrayConverter", {}, is_key=False)
    assert b.to_connect("t", b"\x00\x01") == ({"type": "bytes", "optional": True}, b"\x00\x01")
    assert b.from_connect("t", None, b"x") == b"x"
    with pytest.raises(DataException):
        b.from_connect("t", {"type": "string"}, "x")


def test_json_with_schemas() -> None:
    c = make_converter(JSON, {}, is_key=False)
    # what Kafka's FileStreamSource + JsonConverter write for a line
    assert c.from_connect("t", {"type": "string", "optional": False}, "a line") == (
        b'{"schema":{"type":"string","optional":false},"payload":"a line"}'
    )
    schema = {
        "type": "struct",
        "optional": False,
        "name": "Order",
        "fields": [
            {"field": "id", "type": "int32", "optional": False},
            {
                "field": "at",
                "type": "int64",
                "name": "org.apache.kafka.connect.data.Timestamp",
                "version": 1,
                "optional": False,
            },
            {
                "field": "price",
                "type": "bytes",
                "name": "org.apache.kafka.connect.data.Decimal",
                "version": 1,
                "parameters": {"scale": "2"},
                "optional": True,
            },
            {"field": "raw", "type": "bytes", "optional": True},
            {
                "field": "tags",
                "type": "map",
                "keys": {"type": "int32"},
                "values": {"type": "string"},
                "optional": True,
            },
        ],
    }
    value = {
        "id": 7,
        "at": dt.datetime(2024, 1, 2, 3, 4, 5, 600000, tzinfo=dt.UTC),
        "price": decimal.Decimal("12.34"),
        "raw": b"\x01\x02",
        "tags": {1: "a"},
    }
    data = c.from_connect("t", schema, value)
    doc = json.loads(data)
    assert doc["payload"] == {
        "id": 7,
        "at": 1704164645600,
        "price": "BNI=",
        "raw": "AQI=",
        "tags": [[1, "a"]],
    }
    assert doc["schema"]["fields"][1] == {
        "type": "int64",
        "optional": False,
        "name": "org.apache.kafka.connect.data.Timestamp",
        "version": 1,
        "field": "at",
    }
    back_schema, back = c.to_connect("t", data)
    assert back == value and back_schema["name"] == "Order"
    # null -> no bytes (Kafka writes a tombstone), and a tombstone reads as null
    assert c.from_connect("t", None, None) is None
    assert c.to_connect("t", None) == (None, None)
    with pytest.raises(DataException, match=r'schemas\.enable requires "schema" and "payload"'):
        c.to_connect("t", b'{"id": 1}')
    with pytest.raises(DataException, match="serialization error"):
        c.to_connect("t", b"{nope")
    with pytest.raises(DataException):
        c.to_connect("t", b'{"schema": {"type": "int32"}, "payload": "x"}')
    with pytest.raises(DataException):  # the value does not fit its schema
        c.from_connect("t", {"type": "int8", "optional": False}, 1000)


def test_json_without_schemas() -> None:
    c = make_converter(JSON, {"schemas.enable": "false"}, is_key=False)
    assert c.to_connect("t", b'{"a": [1, 2.5, "x", null]}') == (None, {"a": [1, 2.5, "x", None]})
    assert c.from_connect("t", None, {"a": 1}) == b'{"a":1}'
    assert json.loads(c.from_connect("t", {"type": "bytes"}, b"\xff")) == "/w=="
    numeric = make_converter(JSON, {"schemas.enable": "false", "decimal.format": "NUMERIC"}, is_key=False)
    dec = {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "1"}}
    assert numeric.from_connect("t", dec, decimal.Decimal("1.5")) == b"1.5"


def test_java_strings() -> None:
    s = {"type": "struct", "fields": [{"field": "a", "type": "int32"}, {"field": "b", "type": "string"}]}
    assert java_str({"a": 1, "b": None}, s) == "Struct{a=1}"
    assert java_str({"a": 1, "b": [True, 1.0]}) == "{a=1, b=[true, 1.0]}"
    assert java_str(1e20) == "1.0E20"


def sink_cfg(**extra: str) -> dict[str, object]:
    return {
        "name": "sink",
        "config": {
            "connector.class": "FileStreamSink",
            "topics": "in",
            "file": "/dev/null",
            "value.converter.schemas.enable": "false",
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            **extra,
        },
    }


def raw(offset: int, value: bytes | None, key: bytes | None = b"k") -> RawRecord:
    return RawRecord(
        topic="in",
        partition=1,
        offset=offset,
        timestamp=1000 + offset,
        key=key,
        value=value,
        headers=[("h", b"1")],
    )


def test_tolerance_none_stops_with_connects_message() -> None:
    p = Pipeline(parse_config(sink_cfg()))
    with pytest.raises(ToleranceExceeded, match=r"Tolerance exceeded in error handler.*VALUE_CONVERTER"):
        p.sink_records([raw(0, b"{}"), raw(1, b"{bad")])


def test_tolerance_all_dead_letter_headers() -> None:
    p = Pipeline(
        parse_config(
            sink_cfg(
                **{
                    "errors.tolerance": "all",
                    "errors.deadletterqueue.topic.name": "dlq",
                    "errors.deadletterqueue.context.headers.enable": "true",
                    "transforms": "c",
                    "transforms.c.type": "org.apache.kafka.connect.transforms.Cast$Value",
                    "transforms.c.spec": "n:int32",
                }
            )
        )
    )
    good = p.sink_records(
        [raw(0, b'{"n": "1"}'), raw(1, b"{bad"), raw(2, b'{"n": "x"}'), raw(3, b'{"n": 2}')]
    )
    assert [r.value for _raw, r in good] == [{"n": 1}, {"n": 2}]
    letters = p.errors.drain()
    assert [d.value for d in letters] == [b"{bad", b'{"n": "x"}']
    assert letters[0].key == b"k" and letters[0].timestamp == 1001
    h = dict(letters[0].headers)
    assert h["h"] == b"1"  # the original headers come first
    assert {k: v for k, v in h.items() if k != "__connect.errors.exception.stacktrace"} == {
        "h": b"1",
        "__connect.errors.topic": b"in",
        "__connect.errors.partition": b"1",
        "__connect.errors.offset": b"1",
        "__connect.errors.connector.name": b"sink",
        "__connect.errors.task.id": b"0",
        "__connect.errors.stage": b"VALUE_CONVERTER",
        "__connect.errors.class.name": JSON.encode(),
        "__connect.errors.exception.class.name": b"org.apache.kafka.connect.errors.DataException",
        "__connect.errors.exception.message": h["__connect.errors.exception.message"],
    }
    assert h["__connect.errors.exception.message"].startswith(
        b"Converting byte[] to Kafka Connect data failed"
    )
    h2 = dict(letters[1].headers)
    assert h2["__connect.errors.stage"] == b"TRANSFORMATION"
    assert h2["__connect.errors.class.name"] == b"org.apache.kafka.connect.transforms.Cast$Value"
    assert p.errors.failed == 2


def test_without_context_headers_and_never_silent(caplog: pytest.LogCaptureFixture) -> None:
    p = Pipeline(
        parse_config(sink_cfg(**{"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "dlq"}))
    )
    p.sink_records([raw(5, b"{bad")])
    (letter,) = p.errors.drain()
    assert letter.headers == [("h", b"1")]  # the original record only
    # no DLQ and no errors.log.enable: Kafka would drop it silently; strom logs it
    q = Pipeline(parse_config(sink_cfg(**{"errors.tolerance": "all"})))
    with caplog.at_level(logging.ERROR, logger="strom.connect"):
        assert q.sink_records([raw(6, b"{bad"), raw(7, b"{}")])[0][0].offset == 7
    assert "Error encountered in task sink-0. Executing stage 'VALUE_CONVERTER'" in caplog.text
    assert "offset=6" in caplog.text and q.errors.drain() == []


def test_source_pipeline_order() -> None:
    from strom.connect.data import ConnectRecord

    cfg = parse_config(
        {
            "name": "src",
            "config": {
                "connector.class": "FileStreamSource",
                "file": "f",
                "topic": "lines",
                "errors.tolerance": "all",
                "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
                "transforms": "route",
                "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
                "transforms.route.regex": "lines",
                "transforms.route.replacement": "lines-out",
            },
        }
    )
    p = Pipeline(cfg)
    recs = [
        (
            ConnectRecord(topic="lines", value="text", value_schema={"type": "string"}),
            RawRecord(None, None, None, 1, None, b"text", source_ref="file=f, position=0"),
        )
    ]
    assert p.source_records(recs) == []  # ByteArrayConverter refuses a string: skipped, logged
    assert p.errors.failed == 1 and p.errors.logged == 1
