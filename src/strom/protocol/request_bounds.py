"""Bounds check of a request body before it is decoded (sans-IO).

Theory of operation
-------------------
kio's native decoder sizes each array from the count on the wire before reading a single
element (``Vec::with_capacity(n)``): a 17-byte Metadata request declaring 2^32-2 topics makes it
ask for 32 GiB and the process aborts (a Rust allocation failure is no Python exception). It also
returns ``None`` for a null array whatever the schema says, which handlers then trip over.

So every request body is walked once here, against the same kio schema the decoder will use,
before the decoder sees it. The walk allocates nothing per element; it checks what Kafka's
generated ``read`` methods check, and a little more:

- every length and count against the bytes left in the frame: a string or bytes field may not
  run past the end, and an array of ``n`` elements needs at least ``n`` times the smallest
  encoding of one element (Kafka's ``readArraySize`` checks ``n`` against the bytes remaining;
  the element's minimum size makes the bound tight, so the decoder can never be asked to
  allocate more than a small multiple of the frame);
- the total number of array elements in one request is bounded (:data:`MAX_ELEMENTS` plus one
  per :data:`BYTES_PER_ELEMENT` bytes of frame), so a large frame of one-byte elements cannot
  turn into gigabytes of Python objects;
- null is refused where the schema does not allow it ("non-nullable field ... was serialized as
  null", as Kafka says), for arrays, strings, bytes and structs;
- tagged fields: the count against the bytes left, each field's size against the bytes left,
  unknown tags refused (the decoder cannot skip them), known ones walked within their size.

The walk mirrors how kio reads (legacy int16/int32 lengths in non-flexible versions, compact
uvarint lengths plus one in flexible ones, nullable structs behind an int8 marker, request
header fields skipped by the caller). Plans are compiled once per request class and cached.

Error contract: :func:`check_request` raises only :class:`ProtocolError`, naming the field.
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any

from .errors import ProtocolError

MAX_ELEMENTS = 100_000
"""Array elements any request may carry, plus one per :data:`BYTES_PER_ELEMENT` bytes of frame."""
BYTES_PER_ELEMENT = 4

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

_FIXED_SIZES = {
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}

# op kinds of a compiled plan
_FIXED, _STRING, _BYTES, _ENTITY, _ARRAY = range(5)


@dataclasses.dataclass(slots=True, eq=False)
class _Op:
    kind: int
    name: str
    size: int = 0  # _FIXED: bytes
    nullable: bool = False
    entity: _Plan | None = None  # _ENTITY, or an _ARRAY of entities
    element: _Op | None = None  # _ARRAY
    min_size: int = 0  # smallest encoding of this op (arrays: of one element)


@dataclasses.dataclass(slots=True, eq=False)
class _Plan:
    name: str
    flexible: bool
    ops: list[_Op]
    tagged: dict[int, _Op]
    min_size: int


class _Budget:
    """The array elements one request may still declare."""

    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left


def _uvarint_slow(buf: Any, pos: int, end: int, what: str) -> tuple[int, int]:
    result = 0
    shift = 0
    for _ in range(5):  # kio reads at most 5 bytes (35 bits)
        if pos >= end:
            raise ProtocolError(f"truncated varint in {what}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
    raise ProtocolError(f"varint too long in {what}")


def _short(what: str, n: int, left: int) -> ProtocolError:
    return ProtocolError(f"{what} needs {n} bytes but only {left} are left in the request")


def _null(field: str) -> ProtocolError:
    return ProtocolError(f"non-nullable field {field} was serialized as null")


def _negative(field: str, n: int) -> ProtocolError:
    return ProtocolError(f"negative length {n} of field {field}")


def _too_many(field: str, n: int, left: int) -> ProtocolError:
    return ProtocolError(f"array {field} declares {n} elements but only {left} bytes are left in the request")


def _over_budget(field: str) -> ProtocolError:
    return ProtocolError(f"request carries too many array elements (at {field})")


def _tagged(plan: _Plan, buf: Any, pos: int, end: int, budget: _Budget) -> int:
    count, pos = _uvarint_slow(buf, pos, end, f"{plan.name} tagged fields")
    if count * 2 > end - pos:  # a tag and a size, at least one byte each
        raise ProtocolError(f"{plan.name} declares {count} tagged fields but the request is shorter")
    for _ in range(count):
        tag, pos = _uvarint_slow(buf, pos, end, f"{plan.name} tag")
        size, pos = _uvarint_slow(buf, pos, end, f"{plan.name} tagged field {tag}")
        if size > end - pos:
            raise _short(f"{plan.name} tagged field {tag}", size, end - pos)
        op = plan.tagged.get(tag)
        if op is None:
            raise ProtocolError(f"unknown tagged field {tag} in {plan.name}")
        field_end = pos + size
        after = _op_walker(op, True)(buf, pos, field_end, budget)
        if after != field_end:
            raise ProtocolError(f"tagged field {op.name} is {size} bytes but its value is not")
        pos = after
    return pos


# ------------------------------------------------------------------ walkers generated per plan
#
# Each plan becomes one Python function ``walk(buf, pos, end, budget) -> pos`` with its fields
# inlined (runs of fixed-size fields merged into one check, one-byte varints read inline): an
# interpreter over the plan cost 3-5x more per request on the Produce and Fetch hot paths.


class _Gen:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {}
        self.counter = 0

    def const(self, value: Any) -> str:
        self.counter += 1
        name = f"_c{self.counter}"
        self.consts[name] = value
        return name

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def uvarint(self, indent: int, var: str, what: str) -> None:
        e = self.emit
        e(indent, f"if pos >= end: raise _short({what}, 1, 0)")
        e(indent, f"{var} = buf[pos]; pos += 1")
        e(indent, f"if {var} & 0x80: {var}, pos = _uvarint_slow(buf, pos - 1, end, {what})")

    def op(self, op: _Op, indent: int, flexible: bool) -> None:
        e = self.emit
        what = self.const(op.name)
        if op.kind == _FIXED:
            e(indent, f"if end - pos < {op.size}: raise _short({what}, {op.size}, end - pos)")
            e(indent, f"pos += {op.size}")
        elif op.kind in (_STRING, _BYTES):
            if flexible:
                self.uvarint(indent, "n", what)
                e(indent, "n -= 1")
            else:
                width, fmt = (2, "_I16") if op.kind == _STRING else (4, "_I32")
                e(indent, f"if end - pos < {width}: raise _short({what}, {width}, end - pos)")
                e(indent, f"(n,) = {fmt}.unpack_from(buf, pos); pos += {width}")
            e(indent, "if n < 0:")
            e(indent + 1, f"if n != -1: raise _negative({what}, n)")
            if not op.nullable:
                e(indent + 1, f"raise _null({what})")
            e(indent, "else:")
            e(indent + 1, f"if n > end - pos: raise _short({what}, n, end - pos)")
            e(indent + 1, "pos += n")
        elif op.kind == _ENTITY:
            assert op.entity is not None
            fn = self.const(_plan_walker(op.entity))
            if op.nullable:
                e(indent, f"if pos >= end: raise _short({what}, 1, 0)")
                e(indent, "pos += 1")
                e(indent, f"if buf[pos - 1] != 0xFF: pos = {fn}(buf, pos, end, budget)")
            else:
                e(indent, f"pos = {fn}(buf, pos, end, budget)")
        else:
            element = op.element
            assert element is not None
            if flexible:
                self.uvarint(indent, "n", what)
                e(indent, "n -= 1")
            else:
                e(indent, f"if end - pos < 4: raise _short({what}, 4, end - pos)")
                e(indent, "(n,) = _I32.unpack_from(buf, pos); pos += 4")
            e(indent, "if n < 0:")
            e(indent + 1, f"if n != -1: raise _negative({what}, n)")
            if not op.nullable:
                e(indent + 1, f"raise _null({what})")
            e(indent, "elif n:")
            e(indent + 1, f"if n * {max(op.min_size, 1)} > end - pos: raise _too_many({what}, n, end - pos)")
            e(indent + 1, "budget.left -= n")
            e(indent + 1, f"if budget.left < 0: raise _over_budget({what})")
            if element.kind == _FIXED:
                e(indent + 1, f"pos += n * {element.size}")
            elif element.kind == _ENTITY:
                assert element.entity is not None
                fn = self.const(_plan_walker(element.entity))
                e(indent + 1, "for _ in range(n):")
                e(indent + 2, f"pos = {fn}(buf, pos, end, budget)")
            else:
                fn = self.const(_op_walker(element, flexible))
                e(indent + 1, "for _ in range(n):")
                e(indent + 2, f"pos = {fn}(buf, pos, end, budget)")


_Walker = Callable[[Any, int, int, _Budget], int]
_GLOBALS = {
    "_uvarint_slow": _uvarint_slow,
    "_short": _short,
    "_null": _null,
    "_negative": _negative,
    "_too_many": _too_many,
    "_over_budget": _over_budget,
    "_tagged": _tagged,
    "_I16": _I16,
    "_I32": _I32,
    "ProtocolError": ProtocolError,
}


def _compile_function(gen: _Gen, body_ops: Callable[[_Gen], None]) -> _Walker:
    gen.emit(0, "def walk(buf, pos, end, budget):")
    body_ops(gen)
    gen.emit(1, "return pos")
    namespace: dict[str, Any] = dict(_GLOBALS)
    namespace.update(gen.consts)
    exec("\n".join(gen.lines), namespace)
    return namespace["walk"]  # type: ignore[no-any-return]


@cache
def _plan_walker(plan: _Plan) -> _Walker:
    def body(gen: _Gen) -> None:
        pending = 0  # a run of fixed-size fields, checked and skipped at once
        for op in plan.ops:
            if op.kind == _FIXED:
                pending += op.size
                continue
            if pending:
                gen.op(_Op(_FIXED, f"{plan.name} fields", size=pending), 1, plan.flexible)
                pending = 0
            gen.op(op, 1, plan.flexible)
        if pending:
            gen.op(_Op(_FIXED, f"{plan.name} fields", size=pending), 1, plan.flexible)
        if plan.flexible:
            p = gen.const(plan)
            gen.emit(1, "if pos < end and buf[pos] == 0: pos += 1")
            gen.emit(1, f"else: pos = _tagged({p}, buf, pos, end, budget)")

    return _compile_function(_Gen(), body)


def _op_walker(op: _Op, flexible: bool) -> _Walker:
    return _op_walker_cached(id(op), op, flexible)


@cache
def _op_walker_cached(_key: int, op: _Op, flexible: bool) -> _Walker:
    return _compile_function(_Gen(), lambda gen: gen.op(op, 1, flexible))


# --------------------------------------------------------------------------- compiling plans


def _optional(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0], len(args) != len(typing.get_args(tp))
    return tp, False


def _primitive(name: str, kafka_type: str, nullable: bool, flexible: bool) -> _Op:
    if kafka_type in _FIXED_SIZES:
        size = _FIXED_SIZES[kafka_type]
        return _Op(_FIXED, name, size=size, min_size=size)
    if kafka_type == "string":
        return _Op(_STRING, name, nullable=nullable, min_size=1 if flexible else 2)
    if kafka_type in ("bytes", "records"):
        return _Op(_BYTES, name, nullable=nullable, min_size=1 if flexible else 4)
    raise ProtocolError(f"field {name}: kafka type {kafka_type} has no bounds rule")


def _field_op(cls: type, f: dataclasses.Field[Any], hint: Any, flexible: bool, tagged: bool) -> _Op:
    name = f"{cls.__name__}.{f.name}"
    tp, nullable = _optional(hint)
    if typing.get_origin(tp) is tuple:
        inner = typing.get_args(tp)[0]
        inner, _ = _optional(inner)
        if dataclasses.is_dataclass(inner):
            plan = _compile(inner)  # type: ignore[arg-type]
            element = _Op(_ENTITY, name, entity=plan, min_size=plan.min_size)
        else:
            element = _primitive(name, f.metadata["kafka_type"], False, flexible)
        return _Op(
            _ARRAY,
            name,
            nullable=nullable,
            element=element,
            min_size=element.min_size,
        )
    if dataclasses.is_dataclass(tp):
        plan = _compile(tp)  # type: ignore[arg-type]
        return _Op(_ENTITY, name, nullable=nullable, entity=plan, min_size=1 if nullable else plan.min_size)
    return _primitive(name, f.metadata["kafka_type"], nullable and not tagged, flexible)


def _op_size(op: _Op, flexible: bool) -> int:
    """The smallest encoding of a field (an array's: its count)."""
    if op.kind == _ARRAY:
        return 1 if flexible else 4
    return op.min_size


@cache
def _compile(cls: type) -> _Plan:
    flexible = bool(getattr(cls, "__flexible__", False))
    hints = typing.get_type_hints(cls)
    ops: list[_Op] = []
    tagged: dict[int, _Op] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        tag = f.metadata.get("tag")
        op = _field_op(cls, f, hints[f.name], flexible, tag is not None)
        if tag is not None:
            tagged[int(tag)] = op
        else:
            ops.append(op)
    min_size = sum(_op_size(op, flexible) for op in ops) + (1 if flexible else 0)
    return _Plan(cls.__name__, flexible, ops, tagged, min_size)


def prepare(cls: type) -> None:
    """Compile the walkers of request class ``cls`` now rather than on its first request (its
    tagged fields' walkers too, which are otherwise made when a request first carries one)."""
    plans: list[_Plan] = [_compile(cls)]
    seen: set[int] = set()
    while plans:
        plan = plans.pop()
        if id(plan) in seen:
            continue
        seen.add(id(plan))
        _plan_walker(plan)
        for op in plan.tagged.values():
            _op_walker(op, True)
        for op in [*plan.ops, *plan.tagged.values()]:
            while op is not None:
                if op.entity is not None:
                    plans.append(op.entity)
                op = op.element  # type: ignore[assignment]


def check_request(cls: type, buf: memoryview | bytes, pos: int) -> None:
    """Walk a request body of kio class ``cls`` in ``buf[pos:]`` (after the request header,
    tagged fields included). Raises ProtocolError if the decoder could be asked to allocate
    more than the frame justifies, or a non-nullable field is null."""
    end = len(buf)
    budget = _Budget(MAX_ELEMENTS + (end - pos) // BYTES_PER_ELEMENT)
    _plan_walker(_compile(cls))(buf, pos, end, budget)
