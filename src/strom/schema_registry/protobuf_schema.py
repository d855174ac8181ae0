"""Protobuf schemas: ``.proto`` text (parsed with ``proto-schema-parser``) or a base64
``FileDescriptorProto`` (what confluent-kafka's Python serializer registers), reduced to a model
of messages and fields, and Confluent's compatibility rules on that model.

Rules (reader = new for BACKWARD): a message removed, a field's scalar kind changed outside
Confluent's wire-compatible groups, a field's label changed between repeated and singular, a
field moved into or out of a ``oneof``, a required field added or removed, or the package changed
is incompatible; adding or removing optional fields and renaming fields is compatible.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any


class ProtobufError(ValueError):
    pass


@dataclass(frozen=True)
class Field:
    name: str
    number: int
    type: str
    label: str  # "optional" | "repeated" | "required"
    oneof: str | None


@dataclass
class ProtoModel:
    package: str
    messages: dict[str, dict[int, Field]] = field(default_factory=dict)
    enums: dict[str, dict[str, int]] = field(default_factory=dict)
    imports: list[str] = field(default_factory=list)


# Confluent's groups of scalar kinds that can replace each other on the wire
_GROUPS = [
    {"int32", "uint32", "int64", "uint64", "bool"},
    {"sint32", "sint64"},
    {"fixed32", "sfixed32"},
    {"fixed64", "sfixed64"},
    {"string", "bytes"},
]
_SCALARS = {t for g in _GROUPS for t in g} | {"double", "float"}

_DESCRIPTOR_TYPES = {
    1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32", 8: "bool",
    9: "string", 10: "group", 11: "message", 12: "bytes", 13: "uint32", 14: "enum", 15: "sfixed32",
    16: "sfixed64", 17: "sint32", 18: "sint64",
}


def looks_like_descriptor(text: str) -> bool:
    s = text.strip()
    if not s or any(c.isspace() for c in s) or "{" in s:
        return False
    try:
        base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def parse(text: str) -> ProtoModel:
    if looks_like_descriptor(text):
        return _from_descriptor(base64.b64decode(text.strip()))
    return _from_text(text)


def _from_descriptor(data: bytes) -> ProtoModel:
    try:
        from google.protobuf import descriptor_pb2
        from google.protobuf.message import DecodeError
    except ImportError as e:  # pragma: no cover - protobuf is a dependency of the registry
        raise ProtobufError("the protobuf package is needed for serialized descriptors") from e
    fdp = descriptor_pb2.FileDescriptorProto()
    try:
        fdp.ParseFromString(data)
    except DecodeError as e:
        raise ProtobufError(f"invalid serialized FileDescriptorProto: {e}") from e
    if not fdp.message_type and not fdp.enum_type and not fdp.name:
        raise ProtobufError("serialized FileDescriptorProto defines nothing")
    model = ProtoModel(package=fdp.package, imports=list(fdp.dependency))

    def walk(msgs: Any, enums: Any, prefix: str) -> None:
        for e in enums:
            model.enums[prefix + e.name] = {v.name: v.number for v in e.value}
        def kind_of(f: Any) -> str:
            kind = _DESCRIPTOR_TYPES.get(f.type, "?")
            if kind in ("message", "enum", "group"):
                kind = f.type_name.lstrip(".")
                if model.package and kind.startswith(model.package + "."):
                    kind = kind[len(model.package) + 1:]
            return kind

        for m in msgs:
            if m.options.map_entry:
                continue  # a map field's synthetic entry: the field itself says map<k,v>
            name = prefix + m.name
            oneofs = [o.name for o in m.oneof_decl]
            entries = {f"{name}.{n.name}": n for n in m.nested_type if n.options.map_entry}
            fields: dict[int, Field] = {}
            for f in m.field:
                kind = kind_of(f)
                if kind in entries:
                    k, v = (kind_of(x) for x in entries[kind].field)
                    kind = f"map<{k},{v}>"
                label = {1: "optional", 2: "required", 3: "repeated"}.get(f.label, "optional")
                oneof = None
                if f.HasField("oneof_index") and not f.proto3_optional:
                    oneof = oneofs[f.oneof_index]
                fields[f.number] = Field(f.name, f.number, kind, label, oneof)
            model.messages[name] = fields
            walk(m.nested_type, m.enum_type, name + ".")

    walk(fdp.message_type, fdp.enum_type, "")
    return model


def _from_text(text: str) -> ProtoModel:
    try:
        from proto_schema_parser import ast
        from proto_schema_parser.parser import Parser
    except ImportError as e:  # pragma: no cover
        raise ProtobufError("the proto-schema-parser package is needed for .proto text") from e
    from antlr4.error.ErrorListener import ErrorListener

    class _Raise(ErrorListener):  # type: ignore[misc]
        def syntaxError(self, recognizer: Any, offending: Any, line: int, column: int, msg: str,
                        e: Any) -> None:
            raise ProtobufError(f"invalid .proto: line {line}:{column} {msg}")

    def strict(p: Any) -> None:
        p.removeErrorListeners()
        p.addErrorListener(_Raise())

    try:
        tree = Parser(setup_lexer=strict, setup_parser=strict).parse(text)
    except ProtobufError:
        raise
    except Exception as e:  # the parser raises its own exception types
        raise ProtobufError(f"invalid .proto: {e}") from e
    model = ProtoModel(package="")
    if not tree.file_elements:
        raise ProtobufError("invalid .proto: empty")
    for el in tree.file_elements:
        if isinstance(el, ast.Package):
            model.package = el.name
        elif isinstance(el, ast.Import):
            model.imports.append(el.name)

    def card(f: Any) -> str:
        c = getattr(f, "cardinality", None)
        return c.value.lower() if c is not None else "optional"

    def walk(elements: Any, prefix: str) -> None:
        for el in elements:
            if isinstance(el, ast.Enum):
                model.enums[prefix + el.name] = {
                    v.name: v.number for v in el.elements if isinstance(v, ast.EnumValue)}
            elif isinstance(el, ast.Message):
                name = prefix + el.name
                fields: dict[int, Field] = {}
                for f in el.elements:
                    if isinstance(f, ast.Field):
                        fields[f.number] = Field(f.name, f.number, f.type, card(f), None)
                    elif isinstance(f, ast.MapField):
                        fields[f.number] = Field(f.name, f.number, f"map<{f.key_type},{f.value_type}>",
                                                 "repeated", None)
                    elif isinstance(f, ast.OneOf):
                        for of in f.elements:
                            if isinstance(of, ast.Field):
                                fields[of.number] = Field(of.name, of.number, of.type, "optional", f.name)
                model.messages[name] = fields
                walk(el.elements, name + ".")

    walk(tree.file_elements, "")
    if not model.messages and not model.enums:
        raise ProtobufError("invalid .proto: no message or enum")
    return model


def _compatible_kind(a: str, b: str) -> bool:
    if a == b:
        return True
    if a.startswith("map<") and b.startswith("map<"):
        ak, _, av = a[4:-1].partition(",")
        bk, _, bv = b[4:-1].partition(",")
        return ak == bk and _compatible_kind(av, bv)
    if a.startswith("map<") or b.startswith("map<"):
        return False
    if a in _SCALARS and b in _SCALARS:
        return any(a in g and b in g for g in _GROUPS)
    # named types: compare by simple name (a package prefix may or may not be written)
    return a.rpartition(".")[2] == b.rpartition(".")[2]


def can_read(reader: ProtoModel, writer: ProtoModel) -> list[str]:
    problems: list[str] = []
    if reader.package != writer.package:
        problems.append(f"package changed from {writer.package!r} to {reader.package!r}")
    for mname, wfields in writer.messages.items():
        rfields = reader.messages.get(mname)
        if rfields is None:
            problems.append(f"message {mname} removed")
            continue
        for num, wf in wfields.items():
            rf = rfields.get(num)
            if rf is None:
                if wf.label == "required":
                    problems.append(f"{mname}: required field {num} ({wf.name}) removed")
                continue
            if not _compatible_kind(rf.type, wf.type):
                problems.append(f"{mname}: field {num} type changed from {wf.type} to {rf.type}")
            if (rf.label == "repeated") != (wf.label == "repeated"):
                problems.append(f"{mname}: field {num} label changed from {wf.label} to {rf.label}")
            if rf.oneof is None and wf.oneof is not None:
                problems.append(f"{mname}: field {num} moved out of oneof {wf.oneof}")
            if rf.oneof is not None and wf.oneof is None:
                problems.append(f"{mname}: field {num} moved into oneof {rf.oneof}")
        for num, rf in rfields.items():
            if num not in wfields and rf.label == "required":
                problems.append(f"{mname}: required field {num} ({rf.name}) added")
    return problems


_SCALAR_TYPES = {
    "double": 1, "float": 2, "int64": 3, "uint64": 4, "int32": 5, "fixed64": 6, "fixed32": 7, "bool": 8,
    "string": 9, "bytes": 12, "uint32": 13, "sfixed32": 15, "sfixed64": 16, "sint32": 17, "sint64": 18,
}


def to_serialized(text: str) -> str:
    """A ``.proto`` text schema as a base64 ``FileDescriptorProto`` (``?format=serialized``):
    messages (nested, oneofs, maps, proto3 ``optional``), enums, package, imports. Names are
    resolved within the file by protobuf's scoping rules; an imported type keeps its written name."""
    if looks_like_descriptor(text):
        return text.strip()
    from google.protobuf import descriptor_pb2
    from proto_schema_parser import ast
    from proto_schema_parser.parser import Parser

    _from_text(text)  # validates (raises ProtobufError)
    tree = Parser().parse(text)
    fdp = descriptor_pb2.FileDescriptorProto(name="schema.proto")
    if tree.syntax:
        fdp.syntax = tree.syntax
    for el in tree.file_elements:
        if isinstance(el, ast.Package):
            fdp.package = el.name
        elif isinstance(el, ast.Import):
            fdp.dependency.append(el.name)
    pkg = f".{fdp.package}" if fdp.package else ""
    kinds: dict[str, int] = {}  # fully qualified name -> TYPE_MESSAGE (11) / TYPE_ENUM (14)

    def index(elements: Any, scope: str) -> None:
        for el in elements:
            if isinstance(el, ast.Message):
                kinds[f"{scope}.{el.name}"] = 11
                index(el.elements, f"{scope}.{el.name}")
            elif isinstance(el, ast.Enum):
                kinds[f"{scope}.{el.name}"] = 14

    index(tree.file_elements, pkg)

    def resolve(name: str, scope: str) -> tuple[int, str]:
        if name.startswith("."):
            return kinds.get(name, 11), name
        s = scope
        while True:
            cand = f"{s}.{name}"
            if cand in kinds:
                return kinds[cand], cand
            if not s:
                return 11, name  # imported: left as written
            s = s.rpartition(".")[0]

    def field_into(msg: Any, f: Any, scope: str, oneof_index: int | None, proto3: bool) -> None:
        fd = msg.field.add(name=f.name, number=f.number)
        parts = f.name.split("_")
        fd.json_name = parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])
        card = getattr(f, "cardinality", None)
        card_s = card.value.lower() if card is not None else ""
        fd.label = 3 if card_s == "repeated" else 2 if card_s == "required" else 1
        if f.type in _SCALAR_TYPES:
            fd.type = _SCALAR_TYPES[f.type]  # type: ignore[assignment]
        else:
            kind, full = resolve(f.type, scope)
            fd.type = kind  # type: ignore[assignment]
            fd.type_name = full
        if oneof_index is not None:
            fd.oneof_index = oneof_index
        elif proto3 and card_s == "optional":
            fd.proto3_optional = True
            msg.oneof_decl.add(name=f"_{f.name}")
            fd.oneof_index = len(msg.oneof_decl) - 1

    def build_enum(target: Any, e: Any) -> None:
        en = target.add(name=e.name)
        for v in e.elements:
            if isinstance(v, ast.EnumValue):
                en.value.add(name=v.name, number=v.number)

    def build_message(target: Any, m: Any, scope: str) -> None:
        msg = target.add(name=m.name)
        here = f"{scope}.{m.name}"
        proto3 = fdp.syntax == "proto3"
        synthetic: list[Any] = []
        for el in m.elements:
            if isinstance(el, ast.Field):
                if proto3 and el.cardinality is not None and el.cardinality.value.lower() == "optional":
                    synthetic.append(el)  # synthetic oneofs come after the real ones
                else:
                    field_into(msg, el, here, None, proto3)
            elif isinstance(el, ast.OneOf):
                msg.oneof_decl.add(name=el.name)
                for of in el.elements:
                    if isinstance(of, ast.Field):
                        field_into(msg, of, here, len(msg.oneof_decl) - 1, proto3)
            elif isinstance(el, ast.MapField):
                entry_name = "".join(p[:1].upper() + p[1:] for p in el.name.split("_")) + "Entry"
                entry = msg.nested_type.add(name=entry_name)
                entry.options.map_entry = True
                kinds[f"{here}.{entry_name}"] = 11
                for num, (fname, ftype) in enumerate((("key", el.key_type), ("value", el.value_type)), 1):
                    fd = entry.field.add(name=fname, number=num, label=1, json_name=fname)
                    if ftype in _SCALAR_TYPES:
                        fd.type = _SCALAR_TYPES[ftype]  # type: ignore[assignment]
                    else:
                        kind, full = resolve(ftype, here)
                        fd.type = kind  # type: ignore[assignment]
                        fd.type_name = full
                fd = msg.field.add(name=el.name, number=el.number, label=3, type=11,
                                   type_name=f"{here}.{entry_name}")
            elif isinstance(el, ast.Message):
                build_message(msg.nested_type, el, here)
            elif isinstance(el, ast.Enum):
                build_enum(msg.enum_type, el)
        for el in synthetic:
            field_into(msg, el, here, None, proto3)

    for el in tree.file_elements:
        if isinstance(el, ast.Message):
            build_message(fdp.message_type, el, pkg)
        elif isinstance(el, ast.Enum):
            build_enum(fdp.enum_type, el)
    return base64.b64encode(fdp.SerializeToString()).decode()
