# ruff: noqa: E501  (the evolution tables read best one row per line)
"""Schema registry compatibility rules against a table of schema evolutions, and the ``_schemas``
state machine (Confluent's record format, conflicts settled by log order)."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("fastavro")
pytest.importorskip("proto_schema_parser")

from strom.schema_registry import schemas
from strom.schema_registry.store import State, canonical_key


def rec(*fields: dict[str, Any], name: str = "R", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "ex", "fields": list(fields), **extra}


def f(name: str, type_: Any, **kw: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **kw}


ENUM2 = {"type": "enum", "name": "E", "symbols": ["A", "B"]}
ENUM3 = {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}
NODE = rec(f("v", "int"), f("next", ["null", "Node"], default=None), name="Node")

# (description, old, new, backward ok, forward ok)
AVRO_TABLE: list[tuple[str, Any, Any, bool, bool]] = [
    ("identical", rec(f("a", "int")), rec(f("a", "int")), True, True),
    ("add field with default", rec(f("a", "int")), rec(f("a", "int"), f("b", "string", default="x")), True, True),
    ("add field without default", rec(f("a", "int")), rec(f("a", "int"), f("b", "string")), False, True),
    ("remove field with default", rec(f("a", "int"), f("b", "int", default=0)), rec(f("a", "int")), True, True),
    ("remove field without default", rec(f("a", "int"), f("b", "int")), rec(f("a", "int")), True, False),
    ("int -> long", rec(f("a", "int")), rec(f("a", "long")), True, False),
    ("long -> int", rec(f("a", "long")), rec(f("a", "int")), False, True),
    ("int -> double", rec(f("a", "int")), rec(f("a", "double")), True, False),
    ("float -> double", rec(f("a", "float")), rec(f("a", "double")), True, False),
    ("string -> bytes", rec(f("a", "string")), rec(f("a", "bytes")), True, True),
    ("int -> string", rec(f("a", "int")), rec(f("a", "string")), False, False),
    ("enum symbol added", rec(f("e", ENUM2)), rec(f("e", ENUM3)), True, False),
    ("enum symbol removed", rec(f("e", ENUM3)), rec(f("e", ENUM2)), False, True),
    ("enum symbol added, reader default", rec(f("e", ENUM2)), rec(f("e", dict(ENUM3, default="A"))), True, False),
    ("string -> nullable string", rec(f("a", "string")), rec(f("a", ["null", "string"], default=None)), True, False),
    ("nullable string -> string", rec(f("a", ["null", "string"])), rec(f("a", "string")), False, True),
    ("union gains a branch", rec(f("a", ["int", "string"])), rec(f("a", ["int", "string", "boolean"])), True, False),
    ("record renamed", rec(f("a", "int"), name="R"), rec(f("a", "int"), name="S"), False, False),
    ("record renamed with alias", rec(f("a", "int"), name="R"), rec(f("a", "int"), name="S", aliases=["R"]),
     True, False),
    ("field renamed with alias", rec(f("a", "int")), rec(f("b", "int", aliases=["a"])), True, False),
    ("fixed size changed", rec(f("x", {"type": "fixed", "name": "F", "size": 4})),
     rec(f("x", {"type": "fixed", "name": "F", "size": 8})), False, False),
    ("array items int -> long", rec(f("xs", {"type": "array", "items": "int"})),
     rec(f("xs", {"type": "array", "items": "long"})), True, False),
    ("map values string -> int", rec(f("m", {"type": "map", "values": "string"})),
     rec(f("m", {"type": "map", "values": "int"})), False, False),
    ("array -> map", rec(f("xs", {"type": "array", "items": "int"})),
     rec(f("xs", {"type": "map", "values": "int"})), False, False),
    ("nested record field added with default",
     rec(f("inner", rec(f("a", "int"), name="I"))),
     rec(f("inner", rec(f("a", "int"), f("b", "int", default=1), name="I"))), True, True),
    ("nested record field added without default",
     rec(f("inner", rec(f("a", "int"), name="I"))),
     rec(f("inner", rec(f("a", "int"), f("b", "int"), name="I"))), False, True),
    ("recursive type unchanged", NODE, NODE, True, True),
    ("recursive type, field added with default", NODE,
     rec(f("v", "int"), f("next", ["null", "Node"], default=None), f("w", "long", default=0), name="Node"),
     True, True),
    ("logical type added (underlying unchanged)", rec(f("t", "long")),
     rec(f("t", {"type": "long", "logicalType": "timestamp-millis"})), True, True),
    ("primitive int -> long", "int", "long", True, False),
    ("primitive -> record", "string", rec(f("a", "string")), False, False),
]


def _parse(t: str, s: Any) -> schemas.Parsed:
    return schemas.parse(t, s if isinstance(s, str) and t == "PROTOBUF" else json.dumps(s))


@pytest.mark.parametrize(("desc", "old", "new", "backward", "forward"), AVRO_TABLE, ids=[r[0] for r in AVRO_TABLE])
def test_avro_evolutions(desc: str, old: Any, new: Any, backward: bool, forward: bool) -> None:
    o, n = _parse("AVRO", old), _parse("AVRO", new)
    assert (not schemas.check("BACKWARD", n, [o])) is backward
    assert (not schemas.check("FORWARD", n, [o])) is forward
    assert (not schemas.check("FULL", n, [o])) is (backward and forward)
    assert schemas.check("NONE", n, [o]) == []


def test_transitive_levels_check_every_version() -> None:
    v1 = _parse("AVRO", rec(f("a", "int")))
    v2 = _parse("AVRO", rec(f("a", "int"), f("b", "int", default=0)))
    v3 = _parse("AVRO", rec(f("a", "int"), f("b", "int")))  # b loses its default
    assert schemas.check("BACKWARD", v3, [v1, v2]) == []  # only against v2, which has b
    problems = schemas.check("BACKWARD_TRANSITIVE", v3, [v1, v2])
    assert problems and "no default" in problems[0]
    # FORWARD_TRANSITIVE: every old schema must read the new one
    w1 = _parse("AVRO", rec(f("a", "int"), f("c", "int")))
    w2 = _parse("AVRO", rec(f("a", "int"), f("c", "int", default=0)))
    w3 = _parse("AVRO", rec(f("a", "int")))  # c dropped: w2 copes (default), w1 does not
    assert schemas.check("FORWARD", w3, [w1, w2]) == []
    assert schemas.check("FORWARD_TRANSITIVE", w3, [w1, w2])
    assert schemas.check("FULL_TRANSITIVE", w3, [w1, w2])


def test_avro_named_type_from_reference() -> None:
    address = json.dumps(rec(f("city", "string"), name="Address"))
    person = json.dumps(rec(f("home", "ex.Address"), name="Person"))
    p = schemas.parse("AVRO", person, [address])
    assert schemas.check("FULL", p, [p]) == []
    with pytest.raises(schemas.InvalidSchema):
        schemas.parse("AVRO", person)  # the reference is needed


@pytest.mark.parametrize("bad", ["{", '{"type": "record"}', '{"type": "nope"}', '"strin"',
                                 json.dumps(rec(f("a", "int", default="x")))])
def test_invalid_avro(bad: str) -> None:
    with pytest.raises(schemas.InvalidSchema):
        schemas.parse("AVRO", bad)


def obj(props: dict[str, Any], required: list[str] | None = None, **kw: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required or [], **kw}


INT, NUM, STR = {"type": "integer"}, {"type": "number"}, {"type": "string"}
CLOSED = {"additionalProperties": False}

JSON_TABLE: list[tuple[str, Any, Any, bool, bool]] = [
    ("identical", obj({"a": INT}), obj({"a": INT}), True, True),
    ("integer -> number", obj({"a": INT}), obj({"a": NUM}), True, False),
    ("number -> integer", obj({"a": NUM}), obj({"a": INT}), False, True),
    ("string -> integer", obj({"a": STR}), obj({"a": INT}), False, False),
    ("required property added", obj({"a": INT}), obj({"a": INT, "b": STR}, ["b"]), False, True),
    ("property added to open model", obj({"a": INT}), obj({"a": INT, "b": STR}), False, True),
    ("property added to closed model", obj({"a": INT}, **CLOSED), obj({"a": INT, "b": STR}, **CLOSED), True, False),
    ("property removed from open model", obj({"a": INT, "b": STR}), obj({"a": INT}), True, False),
    ("property removed from closed model", obj({"a": INT, "b": STR}, **CLOSED), obj({"a": INT}, **CLOSED),
     False, True),
    ("closed -> open", obj({"a": INT}, **CLOSED), obj({"a": INT}), True, False),
    ("enum grows", {"enum": ["x", "y"]}, {"enum": ["x", "y", "z"]}, True, False),
    ("maxLength raised", {"type": "string", "maxLength": 5}, {"type": "string", "maxLength": 9}, True, False),
    ("minimum raised", {"type": "integer", "minimum": 0}, {"type": "integer", "minimum": 5}, False, True),
    ("array items widened", {"type": "array", "items": INT}, {"type": "array", "items": NUM}, True, False),
    ("type gains null", obj({"a": STR}), obj({"a": {"type": ["string", "null"]}}), True, False),
]


@pytest.mark.parametrize(("desc", "old", "new", "backward", "forward"), JSON_TABLE, ids=[r[0] for r in JSON_TABLE])
def test_json_evolutions(desc: str, old: Any, new: Any, backward: bool, forward: bool) -> None:
    o, n = _parse("JSON", old), _parse("JSON", new)
    assert (not schemas.check("BACKWARD", n, [o])) is backward
    assert (not schemas.check("FORWARD", n, [o])) is forward


def test_json_refs_are_followed() -> None:
    def doc(kind: str) -> dict[str, Any]:
        return {"type": "object", "properties": {"a": {"$ref": "#/definitions/A"}},
                "definitions": {"A": {"type": "object", "properties": {"n": {"type": kind}}}}}

    old, wide, bad = (_parse("JSON", doc(k)) for k in ("integer", "number", "string"))
    assert schemas.check("BACKWARD", wide, [old]) == []
    assert schemas.check("BACKWARD", bad, [old])  # the change is inside the definition
    # $defs and a recursive definition
    tree = {"$defs": {"T": {"type": "object", "properties": {"v": INT, "kids": {"type": "array", "items": {"$ref": "#/$defs/T"}}}}},
            "$ref": "#/$defs/T"}
    t = _parse("JSON", tree)
    assert schemas.check("FULL", t, [t]) == []
    # a registered reference, by its name
    ref_old = schemas.parse("JSON", json.dumps({"$ref": "item.json"}), named_refs={"item.json": json.dumps(INT)})
    ref_new = schemas.parse("JSON", json.dumps({"$ref": "item.json"}), named_refs={"item.json": json.dumps(STR)})
    assert schemas.check("BACKWARD", ref_new, [ref_old])


def test_invalid_json_schema() -> None:
    with pytest.raises(schemas.InvalidSchema):
        schemas.parse("JSON", '{"type": 12}')
    with pytest.raises(schemas.InvalidSchema):
        schemas.parse("JSON", "[1, 2]")


def proto(body: str, package: str = "shop") -> str:
    return f'syntax = "proto3";\npackage {package};\n{body}\n'


P1 = proto("message Item { string sku = 1; int32 qty = 2; }")
PROTO_TABLE: list[tuple[str, str, str, bool, bool]] = [
    ("identical", P1, P1, True, True),
    ("field added", P1, proto("message Item { string sku = 1; int32 qty = 2; double price = 3; }"), True, True),
    ("field removed", P1, proto("message Item { string sku = 1; }"), True, True),
    ("field renamed", P1, proto("message Item { string code = 1; int32 qty = 2; }"), True, True),
    ("int32 -> int64 (same group)", P1, proto("message Item { string sku = 1; int64 qty = 2; }"), True, True),
    ("int32 -> string", P1, proto("message Item { string sku = 1; string qty = 2; }"), False, False),
    ("string -> bytes", P1, proto("message Item { bytes sku = 1; int32 qty = 2; }"), True, True),
    ("sint32 -> int32", proto("message Item { sint32 n = 1; }"), proto("message Item { int32 n = 1; }"),
     False, False),
    ("message removed", proto("message Item { string sku = 1; } message Other { int32 x = 1; }"),
     proto("message Item { string sku = 1; }"), False, True),
    ("package changed", P1, proto("message Item { string sku = 1; int32 qty = 2; }", package="store"),
     False, False),
    ("singular -> repeated", P1, proto("message Item { repeated string sku = 1; int32 qty = 2; }"), False, False),
    ("field moved into oneof", P1, proto("message Item { oneof id { string sku = 1; } int32 qty = 2; }"),
     False, False),
    ("map value int32 -> int64", proto("message M { map<string, int32> m = 1; }"),
     proto("message M { map<string, int64> m = 1; }"), True, True),
    ("map value int32 -> string", proto("message M { map<string, int32> m = 1; }"),
     proto("message M { map<string, string> m = 1; }"), False, False),
    ("map -> repeated int32", proto("message M { map<string, int32> m = 1; }"),
     proto("message M { repeated int32 m = 1; }"), False, False),
    ("nested message field added", proto("message Item { message Tag { string k = 1; } Tag tag = 1; }"),
     proto("message Item { message Tag { string k = 1; string v = 2; } Tag tag = 1; }"), True, True),
]


@pytest.mark.parametrize(("desc", "old", "new", "backward", "forward"), PROTO_TABLE,
                         ids=[r[0] for r in PROTO_TABLE])
def test_protobuf_evolutions(desc: str, old: str, new: str, backward: bool, forward: bool) -> None:
    o, n = schemas.parse("PROTOBUF", old), schemas.parse("PROTOBUF", new)
    assert (not schemas.check("BACKWARD", n, [o])) is backward
    assert (not schemas.check("FORWARD", n, [o])) is forward


def test_protobuf_serialized_descriptor_matches_text() -> None:
    import base64

    from google.protobuf import descriptor_pb2

    fdp = descriptor_pb2.FileDescriptorProto(name="item.proto", package="shop", syntax="proto3")
    m = fdp.message_type.add(name="Item")
    m.field.add(name="sku", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    m.field.add(name="qty", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
                label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    serialized = base64.b64encode(fdp.SerializeToString()).decode()
    d, t = schemas.parse("PROTOBUF", serialized), schemas.parse("PROTOBUF", P1)
    assert schemas.check("FULL", d, [t]) == [] and schemas.check("FULL", t, [d]) == []


@pytest.mark.parametrize("bad", ["message {", "syntax = \"proto3\";", "!!!"])
def test_invalid_protobuf(bad: str) -> None:
    with pytest.raises(schemas.InvalidSchema):
        schemas.parse("PROTOBUF", bad)


# -- the _schemas state machine --------------------------------------------------------------

def key(subject: str, version: int) -> dict[str, Any]:
    return {"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1}


def value(subject: str, version: int, sid: int, schema: str, deleted: bool = False, **kw: Any) -> dict[str, Any]:
    return {"subject": subject, "version": version, "id": sid, "schema": schema, "deleted": deleted, **kw}


def test_state_applies_confluent_records() -> None:
    st = State()
    st.apply(key("s", 1), value("s", 1, 1, '"int"'))
    st.apply(key("s", 2), value("s", 2, 2, '"long"'))
    st.apply({"keytype": "CONFIG", "subject": None, "magic": 0}, {"compatibilityLevel": "FULL"})
    st.apply({"keytype": "CONFIG", "subject": "s", "magic": 0}, {"compatibilityLevel": "NONE"})
    st.apply({"keytype": "MODE", "subject": None, "magic": 0}, {"mode": "READONLY"})
    st.apply({"keytype": "NOOP", "magic": 0}, None)
    assert sorted(st.subjects["s"]) == [1, 2] and st.configs == {None: "FULL", "s": "NONE"}
    assert st.modes == {None: "READONLY"}
    st.apply({"keytype": "DELETE_SUBJECT", "subject": "s", "magic": 0}, {"subject": "s", "version": 2})
    assert all(v.deleted for v in st.subjects["s"].values())
    st.apply(key("s", 1), None)
    st.apply(key("s", 2), None)
    assert "s" not in st.subjects and sorted(st.schemas) == [1, 2]  # ids are kept
    st.apply({"keytype": "CONFIG", "subject": "s", "magic": 0}, None)
    assert st.configs == {None: "FULL"}
    # a PROTOBUF value names its type and references
    st.apply(key("p", 1), value("p", 1, 3, P1, schemaType="PROTOBUF",
                                references=[{"name": "x.proto", "subject": "x", "version": 1}]))
    assert st.schemas[3].schema_type == "PROTOBUF" and st.schemas[3].references[0]["subject"] == "x"


def test_state_conflicts_settled_by_log_order() -> None:
    st = State()
    st.apply(key("s", 1), value("s", 1, 1, '"int"'))
    # another writer claimed the same version with another id: ignored
    st.apply(key("s", 1), value("s", 1, 2, '"string"'))
    assert st.subjects["s"][1].id == 1 and 2 not in st.schemas
    # another writer gave id 1 to a different schema under another subject: ignored
    st.apply(key("t", 1), value("t", 1, 1, '"boolean"'))
    assert "t" not in st.subjects
    # the same schema under another subject shares its id
    st.apply(key("u", 1), value("u", 1, 1, '"int"'))
    assert st.subjects["u"][1].id == 1
    # soft delete of the winner (same id) applies
    st.apply(key("s", 1), value("s", 1, 1, '"int"', deleted=True))
    assert st.subjects["s"][1].deleted
    assert st.by_canonical[canonical_key("AVRO", '"int"', [])] == 1


def test_proto_text_to_serialized_descriptor() -> None:
    import base64

    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    from strom.schema_registry.protobuf_schema import to_serialized

    text = proto("""message Item {
      string sku = 1;
      optional int32 qty = 2;
      repeated Tag tags = 3;
      map<string, Tag> by_name = 4;
      oneof price { double amount = 5; string label = 6; }
      Kind kind = 7;
      message Tag { string k = 1; Kind kk = 2; }
      enum Kind { A = 0; B = 1; }
    }
    enum Top { X = 0; }""", package="shop.v1")
    fdp = descriptor_pb2.FileDescriptorProto()
    fdp.ParseFromString(base64.b64decode(to_serialized(text)))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.v1.Item"))
    m = cls(sku="a", qty=0, amount=2.5, kind=1)
    m.tags.add(k="x", kk=1)
    m.by_name["n"].k = "y"
    back = cls()
    back.ParseFromString(m.SerializeToString())
    assert back == m and back.HasField("qty") and back.WhichOneof("price") == "amount"
    assert back.by_name["n"].k == "y" and back.tags[0].kk == 1
    # and the model read from the descriptor equals the one read from the text
    d, t = schemas.parse("PROTOBUF", to_serialized(text)), schemas.parse("PROTOBUF", text)
    assert d.obj.messages.keys() == t.obj.messages.keys()
    assert schemas.check("FULL", d, [t]) == []
