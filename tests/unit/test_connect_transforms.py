"""Kafka Connect's single-message transforms and predicates, against Kafka's documented
behaviour (the examples of the Connect docs' transformation reference and the SMTs' javadoc)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from strom.connect.data import TIMESTAMP, ConfigError, ConnectRecord, DataException
from strom.connect.transforms import TransformChain, make_predicate, make_transform

T = "org.apache.kafka.connect.transforms."
STR = {"type": "string", "optional": False}
OPT_STR = {"type": "string", "optional": True}
INT32 = {"type": "int32", "optional": False}


def rec(value: Any = None, schema: Any = None, **kw: Any) -> ConnectRecord:
    base: dict[str, Any] = {"topic": "orders", "partition": 2, "timestamp": 1_700_000_000_123, "offset": 42}
    base.update(kw)
    return ConnectRecord(value=value, value_schema=schema, **base)


def struct(*fields: tuple[str, dict[str, Any]], name: str | None = None) -> dict[str, Any]:
    s: dict[str, Any] = {
        "type": "struct",
        "optional": False,
        "fields": [{**f, "field": n} for n, f in fields],
    }
    if name:
        s["name"] = name
    return s


def t(cls: str, **props: str) -> Any:
    return make_transform(T + cls, {k.replace("_", "."): v for k, v in props.items()})


# -- InsertField


def test_insert_field_schemaless() -> None:
    tr = t(
        "InsertField$Value",
        topic_field="t",
        partition_field="p",
        offset_field="o!",
        timestamp_field="ts",
        static_field="dc",
        static_value="eu-1",
    )
    out = tr.apply(rec({"a": 1}))
    assert out.value == {"a": 1, "t": "orders", "p": 2, "o": 42, "ts": 1_700_000_000_123, "dc": "eu-1"}
    assert out.value_schema is None
    # a tombstone passes untouched
    assert tr.apply(rec(None)).value is None
    # offset only exists on sink records
    with pytest.raises(DataException, match="SinkRecord"):
        tr.apply(rec({"a": 1}, offset=None))
    # schemaless values must be maps
    with pytest.raises(DataException, match="Only Map objects supported"):
        tr.apply(rec("text"))


def test_insert_field_with_schema() -> None:
    tr = t("InsertField$Value", topic_field="t!", timestamp_field="ts", static_field="dc", static_value="x")
    s = struct(("a", INT32), name="com.example.Order")
    out = tr.apply(rec({"a": 1}, s))
    assert out.value_schema["name"] == "com.example.Order"
    fields = {f["field"]: f for f in out.value_schema["fields"]}
    assert fields["t"]["type"] == "string" and fields["t"]["optional"] is False  # "!" = required
    assert fields["ts"]["name"] == TIMESTAMP and fields["ts"]["optional"] is True
    assert fields["dc"] == {"type": "string", "optional": True, "field": "dc"}
    assert out.value["ts"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.UTC)
    assert out.value == {"a": 1, "t": "orders", "ts": out.value["ts"], "dc": "x"}


def test_insert_field_key_variant_and_no_fields() -> None:
    tr = t("InsertField$Key", topic_field="topic")
    out = tr.apply(ConnectRecord(topic="x", key={"id": 1}, value="v"))
    assert out.key == {"id": 1, "topic": "x"} and out.value == "v"
    with pytest.raises(ConfigError):
        t("InsertField$Value")


# -- ReplaceField


def test_replace_field_schemaless_and_schema() -> None:
    tr = t("ReplaceField$Value", exclude="c", renames="a:alpha,b:beta")
    assert tr.apply(rec({"a": 1, "b": 2, "c": 3, "d": 4})).value == {"alpha": 1, "beta": 2, "d": 4}
    inc = t("ReplaceField$Value", include="a,c")
    assert inc.apply(rec({"a": 1, "b": 2, "c": 3})).value == {"a": 1, "c": 3}
    s = struct(("a", INT32), ("b", STR), ("c", STR))
    out = tr.apply(rec({"a": 1, "b": "x", "c": "y"}, s))
    assert [f["field"] for f in out.value_schema["fields"]] == ["alpha", "beta"]
    assert out.value == {"alpha": 1, "beta": "x"}
    # the older names still work (Kafka keeps blacklist/whitelist as aliases)
    assert t("ReplaceField$Value", blacklist="a").apply(rec({"a": 1, "b": 2})).value == {"b": 2}
    with pytest.raises(ConfigError, match="Invalid rename mapping"):
        t("ReplaceField$Value", renames="a")


# -- MaskField


def test_mask_field_defaults_and_replacement() -> None:
    tr = t("MaskField$Value", fields="s,i,f,b,l,m,n")
    out = tr.apply(
        rec({"s": "secret", "i": 7, "f": 1.5, "b": True, "l": [1], "m": {"k": 1}, "n": None, "x": 1})
    )
    assert out.value == {"s": "", "i": 0, "f": 0.0, "b": False, "l": [], "m": {}, "n": None, "x": 1}
    rep = t("MaskField$Value", fields="card,pin", replacement="****")
    assert rep.apply(rec({"card": "4111", "pin": "12"})).value == {"card": "****", "pin": "****"}
    num = t("MaskField$Value", fields="n", replacement="-1")
    assert num.apply(rec({"n": 5})).value == {"n": -1}
    with pytest.raises(DataException):
        t("MaskField$Value", fields="n", replacement="abc").apply(rec({"n": 5}))
    s = struct(("card", STR), ("ts", {"type": "int64", "name": TIMESTAMP, "optional": False}))
    out = t("MaskField$Value", fields="card,ts").apply(
        rec({"card": "4111", "ts": dt.datetime(2024, 1, 1, tzinfo=dt.UTC)}, s)
    )
    assert out.value == {"card": "", "ts": dt.datetime(1970, 1, 1, tzinfo=dt.UTC)}
    with pytest.raises(ConfigError):
        t("MaskField$Value", fields="")


# -- ValueToKey / ExtractField / HoistField


def test_value_to_key() -> None:
    tr = make_transform(T + "ValueToKey", {"fields": "id,region"})
    out = tr.apply(rec({"id": 1, "region": "eu", "qty": 3}))
    assert out.key == {"id": 1, "region": "eu"} and out.key_schema is None
    s = struct(("id", INT32), ("region", STR), ("qty", INT32))
    out = tr.apply(rec({"id": 1, "region": "eu", "qty": 3}, s))
    assert out.key_schema["type"] == "struct"
    assert [f["field"] for f in out.key_schema["fields"]] == ["id", "region"]
    with pytest.raises(DataException, match="Field does not exist: nope"):
        make_transform(T + "ValueToKey", {"fields": "nope"}).apply(rec({"id": 1}, struct(("id", INT32))))
    with pytest.raises(DataException):  # a tombstone has no fields to copy
        tr.apply(rec(None))


def test_extract_field() -> None:
    tr = t("ExtractField$Key", field="id")
    out = tr.apply(ConnectRecord(topic="x", key={"id": 7, "n": "a"}, value="v"))
    assert out.key == 7
    s = struct(("id", INT32))
    out = tr.apply(ConnectRecord(topic="x", key={"id": 7}, key_schema=s))
    assert out.key == 7 and out.key_schema == INT32
    with pytest.raises(DataException, match="Unknown field: nope"):
        t("ExtractField$Key", field="nope").apply(ConnectRecord(topic="x", key={"id": 7}, key_schema=s))
    # a null value stays null; a missing field gives null (schemaless)
    assert t("ExtractField$Value", field="a").apply(rec(None)).value is None
    assert t("ExtractField$Value", field="a").apply(rec({"b": 1})).value is None
    # KIP-821 nested paths
    v2 = t("ExtractField$Value", field="customer.name", field_syntax_version="V2")
    assert v2.apply(rec({"customer": {"name": "ann"}})).value == "ann"


def test_hoist_field() -> None:
    out = t("HoistField$Value", field="line").apply(rec("hello", STR))
    assert out.value == {"line": "hello"}
    assert out.value_schema == {"type": "struct", "fields": [{**STR, "field": "line"}], "optional": False}


# -- Cast


def test_cast_fields_and_whole_value() -> None:
    tr = t("Cast$Value", spec="a:int8,b:string,c:boolean,d:float64,e:int32")
    out = tr.apply(rec({"a": 300, "b": 1.0, "c": "TRUE", "d": "2.5", "e": 7.9, "z": 1}))
    assert out.value == {"a": 44, "b": "1.0", "c": True, "d": 2.5, "e": 7, "z": 1}  # (byte) 300 == 44
    s = struct(("a", {"type": "int64", "optional": True}), ("b", STR))
    out = t("Cast$Value", spec="a:string").apply(rec({"a": 5, "b": "x"}, s))
    assert out.value == {"a": "5", "b": "x"}
    assert out.value_schema["fields"][0] == {"field": "a", "type": "string", "optional": True}
    whole = t("Cast$Key", spec="int64")
    assert whole.apply(ConnectRecord(topic="x", key="42", key_schema=STR)).key == 42
    assert t("Cast$Value", spec="string").apply(rec(True)).value == "true"
    with pytest.raises(ConfigError, match="Invalid type found in casting spec"):
        t("Cast$Value", spec="a:uint8")
    with pytest.raises(ConfigError, match="single cast"):
        t("Cast$Value", spec="int8,string")
    with pytest.raises(DataException):
        t("Cast$Value", spec="a:int32").apply(rec({"a": "not a number"}))
    with pytest.raises(DataException, match="does not support casting"):
        t("Cast$Value", spec="a:int32").apply(rec({"a": {"x": 1}}, struct(("a", struct(("x", INT32))))))


# -- Flatten


def test_flatten() -> None:
    tr = t("Flatten$Value")
    out = tr.apply(rec({"id": 1, "customer": {"name": "ann", "address": {"city": "Oslo"}}, "tags": [1, 2]}))
    assert out.value == {"id": 1, "customer.name": "ann", "customer.address.city": "Oslo", "tags": [1, 2]}
    inner = {**struct(("city", STR)), "optional": True}
    s = struct(("id", INT32), ("addr", inner))
    out = t("Flatten$Value", delimiter="_").apply(rec({"id": 1, "addr": None}, s))
    assert out.value == {"id": 1, "addr_city": None}
    assert out.value_schema["fields"][1] == {"type": "string", "optional": True, "field": "addr_city"}
    assert tr.apply(rec(None)).value is None


# -- routers


def test_regex_router() -> None:
    tr = make_transform(T + "RegexRouter", {"regex": "(.*)-(v\\d+)", "replacement": "$1_$2_copy"})
    assert tr.apply(rec("x", topic="orders-v2")).topic == "orders_v2_copy"
    assert tr.apply(rec("x", topic="orders")).topic == "orders"  # matches() is a whole-name match
    named = make_transform(T + "RegexRouter", {"regex": "(?P<n>[a-z]+)\\.raw", "replacement": "${n}.clean"})
    assert named.apply(rec("x", topic="events.raw")).topic == "events.clean"
    lit = make_transform(T + "RegexRouter", {"regex": "a", "replacement": "\\$1"})
    assert lit.apply(rec("x", topic="a")).topic == "$1"
    with pytest.raises(ConfigError, match="Invalid regex"):
        make_transform(T + "RegexRouter", {"regex": "(", "replacement": "x"})


def test_timestamp_router() -> None:
    tr = make_transform(T + "TimestampRouter", {})
    assert tr.apply(rec("x")).topic == "orders-20231114"
    custom = make_transform(
        T + "TimestampRouter",
        {"topic.format": "${timestamp}/${topic}", "timestamp.format": "yyyy-MM-dd'T'HH"},
    )
    assert custom.apply(rec("x")).topic == "2023-11-14T22/orders"
    with pytest.raises(DataException, match="Timestamp missing"):
        tr.apply(rec("x", timestamp=None))


# -- TimestampConverter


def test_timestamp_converter() -> None:
    ms = 1_700_000_000_123
    to_str = t("TimestampConverter$Value", field="ts", target_type="string", format="yyyy-MM-dd HH:mm:ss.SSS")
    assert to_str.apply(rec({"ts": ms})).value == {"ts": "2023-11-14 22:13:20.123"}
    back = t("TimestampConverter$Value", field="ts", target_type="unix", format="yyyy-MM-dd HH:mm:ss.SSS")
    assert back.apply(rec({"ts": "2023-11-14 22:13:20.123"})).value == {"ts": ms}
    secs = t("TimestampConverter$Value", field="ts", target_type="unix", unix_precision="seconds")
    assert secs.apply(rec({"ts": dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC)})).value == {
        "ts": 1_700_000_000
    }
    whole = t("TimestampConverter$Value", target_type="Timestamp")
    out = whole.apply(rec(ms, {"type": "int64", "optional": False}))
    assert out.value_schema["name"] == TIMESTAMP and out.value == dt.datetime(
        2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.UTC
    )
    date = t("TimestampConverter$Value", target_type="Date")
    assert date.apply(rec(ms)).value == dt.datetime(2023, 11, 14, tzinfo=dt.UTC)
    s = struct(("ts", {"type": "string", "optional": True}), ("n", INT32))
    out = t("TimestampConverter$Value", field="ts", target_type="unix", format="yyyyMMdd").apply(
        rec({"ts": "20240102", "n": 1}, s)
    )
    assert out.value == {"ts": 1704153600000, "n": 1}
    assert out.value_schema["fields"][0] == {"type": "int64", "optional": True, "field": "ts"}
    with pytest.raises(ConfigError, match="format"):
        t("TimestampConverter$Value", target_type="string")
    with pytest.raises(ConfigError):
        t("TimestampConverter$Value", target_type="Millis")
    with pytest.raises(DataException):
        back.apply(rec({"ts": "yesterday"}))


# -- Filter, predicates, chains


def chain(steps: list[tuple[str, Any, Any, bool]]) -> TransformChain:
    return TransformChain(steps)


def test_filter_with_predicates_and_negate() -> None:
    f = make_transform(T + "Filter", {})
    topic = make_predicate(
        "org.apache.kafka.connect.transforms.predicates.TopicNameMatches", {"pattern": "log-.*"}
    )
    header = make_predicate("HasHeaderKey", {"name": "skip"})
    tomb = make_predicate("RecordIsTombstone", {})
    assert chain([("f", f, topic, False)]).apply(rec("x", topic="log-1")) is None
    assert chain([("f", f, topic, False)]).apply(rec("x", topic="xlog-1")) is not None  # whole-name match
    assert chain([("f", f, topic, True)]).apply(rec("x", topic="orders")) is None  # negate: drop the others
    assert chain([("f", f, header, False)]).apply(rec("x", headers=[("skip", None)])) is None
    assert chain([("f", f, tomb, False)]).apply(rec(None)) is None
    assert chain([("f", f, tomb, False)]).apply(rec("v")) is not None
    assert chain([("f", f, None, False)]).apply(rec("v")) is None


def test_chain_order_and_failure_context() -> None:
    steps = [
        ("hoist", t("HoistField$Value", field="line"), None, False),
        ("ins", t("InsertField$Value", static_field="src", static_value="file"), None, False),
        ("route", make_transform(T + "RegexRouter", {"regex": ".*", "replacement": "all"}), None, False),
    ]
    out = chain(steps).apply(rec("hello", STR))
    assert out.topic == "all" and out.value == {"line": "hello", "src": "file"}
    bad = chain([("cast", t("Cast$Value", spec="a:int32"), None, False)])
    with pytest.raises(DataException) as ei:
        bad.apply(rec({"a": "x"}))
    assert ei.value.transform_alias == "cast"  # type: ignore[attr-defined]
    assert ei.value.transform_class == T + "Cast$Value"  # type: ignore[attr-defined]


def test_unknown_classes_and_keys() -> None:
    with pytest.raises(ConfigError, match="could not be found"):
        make_transform("com.example.Nope", {})
    # an unknown key is ignored (Connect logs it as unused)
    from strom.connect.transforms import UNKNOWN_KEYS

    seen: list[str] = []
    token = UNKNOWN_KEYS.set(seen)
    try:
        make_transform(T + "Filter", {"fields": "a"})
    finally:
        UNKNOWN_KEYS.reset(token)
    assert seen == ["fields"]
    with pytest.raises(ConfigError, match='Missing required configuration "regex"'):
        make_transform(T + "RegexRouter", {"replacement": "x"})
    # simple class names work, as Connect's plugin aliases
    assert make_transform("InsertHeader", {"header": "h", "value.literal": "v"}).apply(rec("x")).headers == [
        ("h", b"v")
    ]
    assert make_transform("DropHeaders", {"headers": "a"}).apply(
        rec("x", headers=[("a", b""), ("b", b"")])
    ).headers == [("b", b"")]
