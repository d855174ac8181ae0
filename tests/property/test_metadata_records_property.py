"""Property: every metadata record type round-trips at every valid version; decoding arbitrary or
mutated bytes raises only MetadataParseError; re-encoding a decoded record gives the same bytes."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.metadata import records as mr

_INTS = {
    "int8": st.integers(-(2**7), 2**7 - 1),
    "int16": st.integers(-(2**15), 2**15 - 1),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1),
    "uint16": st.integers(0, 2**16 - 1),
}


def _value(f: Any, version: int) -> st.SearchStrategy[Any]:
    kind = f.kind
    base: st.SearchStrategy[Any]
    if kind in _INTS:
        base = _INTS[kind]
    elif kind == "float64":
        base = st.floats(allow_nan=False)
    elif kind == "bool":
        base = st.booleans()
    elif kind == "uuid":
        base = st.uuids()
    elif kind == "string":
        base = st.text(max_size=12)
    elif kind == "bytes":
        base = st.binary(max_size=12)
    elif kind == "[]int32":
        base = st.lists(_INTS["int32"], max_size=5).map(tuple)
    elif kind == "[]uuid":
        base = st.lists(st.uuids(), max_size=3).map(tuple)
    elif kind == "[]string":
        base = st.lists(st.text(max_size=6), max_size=3).map(tuple)
    else:
        base = st.lists(_struct(f.struct, version), max_size=3).map(tuple)
    return st.one_of(st.none(), base) if f.nullable(version) else base


def _struct(cls: type, version: int) -> st.SearchStrategy[Any]:
    fields = mr._STRUCT_FIELDS[cls]
    return st.fixed_dictionaries({f.attr: _value(f, version) for f in fields}).map(lambda d: cls(**d))


@st.composite
def record_and_version(draw: st.DrawFn) -> tuple[Any, int]:
    cls = draw(st.sampled_from(mr.RECORD_TYPES))
    lo, hi = mr.valid_versions(cls)
    version = draw(st.integers(lo, hi))
    schema = mr._SCHEMAS[cls]
    kwargs = {f.attr: draw(_value(f, version)) for f in schema.fields if f.present(version)}
    return cls(**kwargs), version


records = record_and_version()


@settings(max_examples=500)
@given(records)
def test_round_trip_every_type_and_version(rv: tuple[Any, int]) -> None:
    rec, version = rv
    data = mr.encode(rec, version)
    assert mr.decode_versioned(data) == (rec, version)
    assert mr.encode(mr.decode(data), version) == data


@settings(max_examples=200)
@given(records)
def test_default_version_round_trips(rv: tuple[Any, int]) -> None:
    rec, version = rv
    if version != mr.default_version(rec):
        return
    assert mr.decode(mr.encode(rec)) == rec


@settings(max_examples=200)
@given(st.lists(records, min_size=1, max_size=6), st.integers(0, 2**40))
def test_batches_round_trip(rvs: list[tuple[Any, int]], base: int) -> None:
    recs = [r for r, v in rvs if v == mr.default_version(r)]
    if not recs:
        return
    batch = mr.build_records_batch(recs, base_offset=base)
    assert list(mr.iter_batch_records(batch)) == [(base + i, r) for i, r in enumerate(recs)]


def _decode_or_parse_error(data: bytes) -> None:
    try:
        rec, version = mr.decode_versioned(data)
    except mr.MetadataParseError:
        return
    # whatever decodes is a well-formed record of its type: it re-encodes and decodes to itself
    again = mr.encode(rec, version)
    assert mr.decode_versioned(again) == (rec, version) or _has_nan(rec)


def _has_nan(rec: Any) -> bool:
    return any(isinstance(v, float) and math.isnan(v) for v in dataclasses.asdict(rec).values())


@settings(max_examples=1000)
@given(st.binary(max_size=80))
def test_fuzz_arbitrary_bytes(data: bytes) -> None:
    _decode_or_parse_error(b"\x01" + data)
    _decode_or_parse_error(data)


@settings(max_examples=1000)
@given(records, st.data())
def test_fuzz_mutated_records(rv: tuple[Any, int], data: st.DataObject) -> None:
    rec, version = rv
    buf = bytearray(mr.encode(rec, version))
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        pos = data.draw(st.integers(0, len(buf)))
        if op == "flip" and pos < len(buf):
            buf[pos] = data.draw(st.integers(0, 255))
        elif op == "cut":
            del buf[pos:]
        else:
            buf[pos:pos] = data.draw(st.binary(min_size=1, max_size=4))
    _decode_or_parse_error(bytes(buf))


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_fuzz_batches(data: bytes) -> None:
    with contextlib.suppress(mr.MetadataParseError):
        list(mr.iter_batch_records(data))


@settings(max_examples=300)
@given(st.lists(records, max_size=30))
def test_replaying_arbitrary_records_raises_only_replay_errors(rvs: list[tuple[Any, int]]) -> None:
    """A metadata log with nonsense in it (records that contradict each other) makes the delta
    raise MetadataReplayError, never anything else; what replayed applies into an image."""
    from strom.metadata.delta import MetadataDelta
    from strom.metadata.image import EMPTY_IMAGE, MetadataReplayError

    d = MetadataDelta(EMPTY_IMAGE)
    for rec, _ in rvs:
        with contextlib.suppress(MetadataReplayError):
            d.replay(rec)
    image = d.apply()
    for b in range(3):
        d.local_changes(b)
    d.changed_partitions()
    image.to_records()


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_loader_fed_garbage_raises_only_its_errors(data: bytes) -> None:
    from strom.metadata.image import MetadataReplayError
    from strom.metadata.loader import MetadataLoader

    with contextlib.suppress(mr.MetadataParseError, MetadataReplayError):
        MetadataLoader().handle_commit(data)
    with contextlib.suppress(mr.MetadataParseError, MetadataReplayError):
        MetadataLoader().handle_load_snapshot(10, 1, data)
