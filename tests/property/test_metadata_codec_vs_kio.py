"""The metadata records' generic flexible-version codec against kio's (an independent encoder
generated from Kafka's JSON schemas and checked against real clients): the same schema layout
described in strom.metadata.records' field language must give kio's bytes, and read them back.

ApiVersionsResponse v3 exercises tagged fields (struct arrays, an int64 with default -1 and a bool,
written only when not default, in tag order); BrokerRegistrationRequest v4 exercises what
RegisterBrokerRecord is made of (uuid, uint16, nullable string, struct arrays, []uuid, bool, int64).
"""

from __future__ import annotations

import datetime
import io
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v3 import response as av
from kio.schema.broker_registration.v4 import request as br
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32, i64, u16

from strom.metadata import records as mr

F = mr._Field


@dataclass(frozen=True, kw_only=True)
class AV:
    api_key: int = 0
    min_version: int = 0
    max_version: int = 0


@dataclass(frozen=True, kw_only=True)
class SF:
    name: str = ""
    min_version: int = 0
    max_version: int = 0


@dataclass(frozen=True, kw_only=True)
class FF:
    name: str = ""
    max_version_level: int = 0
    min_version_level: int = 0


@dataclass(frozen=True, kw_only=True)
class Resp:
    error_code: int = 0
    api_keys: tuple[AV, ...] = ()
    throttle_time_ms: int = 0
    supported_features: tuple[SF, ...] = ()
    finalized_features_epoch: int = -1
    finalized_features: tuple[FF, ...] = ()
    zk_migration_ready: bool = False


RESP_FIELDS = (
    F("error_code", "int16"),
    F("api_keys", "[]", struct=AV),
    F("throttle_time_ms", "int32"),
    F("supported_features", "[]", struct=SF, tag=0),
    F("finalized_features_epoch", "int64", tag=1),
    F("finalized_features", "[]", struct=FF, tag=2),
    F("zk_migration_ready", "bool", tag=3),
)


@dataclass(frozen=True, kw_only=True)
class Listener:
    name: str = ""
    host: str = ""
    port: int = 0
    security_protocol: int = 0


@dataclass(frozen=True, kw_only=True)
class Feature:
    name: str = ""
    min_supported_version: int = 0
    max_supported_version: int = 0


@dataclass(frozen=True, kw_only=True)
class Reg:
    broker_id: int = 0
    cluster_id: str = ""
    incarnation_id: uuid.UUID = mr.ZERO_UUID
    listeners: tuple[Listener, ...] = ()
    features: tuple[Feature, ...] = ()
    rack: str | None = ""
    is_migrating_zk_broker: bool = False
    log_dirs: tuple[uuid.UUID, ...] = ()
    previous_broker_epoch: int = -1


REG_FIELDS = (
    F("broker_id", "int32"),
    F("cluster_id", "string"),
    F("incarnation_id", "uuid"),
    F("listeners", "[]", struct=Listener),
    F("features", "[]", struct=Feature),
    F("rack", "string", nullable_since=0),
    F("is_migrating_zk_broker", "bool"),
    F("log_dirs", "[]uuid"),
    F("previous_broker_epoch", "int64"),
)


@pytest.fixture(autouse=True)
def _structs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        mr._STRUCT_FIELDS, AV, (F("api_key", "int16"), F("min_version", "int16"), F("max_version", "int16"))
    )
    monkeypatch.setitem(
        mr._STRUCT_FIELDS, SF, (F("name", "string"), F("min_version", "int16"), F("max_version", "int16"))
    )
    monkeypatch.setitem(
        mr._STRUCT_FIELDS,
        FF,
        (F("name", "string"), F("max_version_level", "int16"), F("min_version_level", "int16")),
    )
    monkeypatch.setitem(
        mr._STRUCT_FIELDS,
        Listener,
        (F("name", "string"), F("host", "string"), F("port", "uint16"), F("security_protocol", "int16")),
    )
    monkeypatch.setitem(
        mr._STRUCT_FIELDS,
        Feature,
        (F("name", "string"), F("min_supported_version", "int16"), F("max_supported_version", "int16")),
    )


def ours(fields: tuple[Any, ...], obj: Any, version: int) -> bytes:
    out = bytearray()
    mr._write_body(out, fields, obj, version)
    return bytes(out)


def theirs(obj: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(obj))(buf, obj)
    return buf.getvalue()


small = st.integers(-(2**15), 2**15 - 1)
names = st.text(max_size=8)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(small, small, small), max_size=3),
    st.lists(st.tuples(names, small, small), max_size=2),
    st.one_of(st.just(-1), st.integers(-(2**63), 2**63 - 1)),
    st.lists(st.tuples(names, small, small), max_size=2),
    st.booleans(),
    st.integers(0, 2**31 - 1),
)
def test_tagged_fields_match_kio(
    keys: list[Any], supported: list[Any], epoch: int, finalized: list[Any], zk: bool, throttle: int
) -> None:
    mine = Resp(
        error_code=0,
        api_keys=tuple(AV(api_key=a, min_version=b, max_version=c) for a, b, c in keys),
        throttle_time_ms=throttle,
        supported_features=tuple(SF(name=n, min_version=a, max_version=b) for n, a, b in supported),
        finalized_features_epoch=epoch,
        finalized_features=tuple(
            FF(name=n, max_version_level=a, min_version_level=b) for n, a, b in finalized
        ),
        zk_migration_ready=zk,
    )
    kio_obj = av.ApiVersionsResponse(
        error_code=ErrorCode.none,
        api_keys=tuple(
            av.ApiVersion(api_key=i16(a), min_version=i16(b), max_version=i16(c)) for a, b, c in keys
        ),
        throttle_time=datetime.timedelta(milliseconds=throttle),
        supported_features=tuple(
            av.SupportedFeatureKey(name=n, min_version=i16(a), max_version=i16(b)) for n, a, b in supported
        ),
        finalized_features_epoch=i64(epoch),
        finalized_features=tuple(
            av.FinalizedFeatureKey(name=n, max_version_level=i16(a), min_version_level=i16(b))
            for n, a, b in finalized
        ),
        zk_migration_ready=zk,
    )
    data = theirs(kio_obj)
    assert ours(RESP_FIELDS, mine, 3) == data
    r = mr._Reader(data)
    assert mr._read_body(r, Resp, RESP_FIELDS, 3) == mine and r.pos == len(data)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(-(2**31), 2**31 - 1),
    names,
    st.uuids(),
    st.lists(st.tuples(names, names, st.integers(0, 65535), small), max_size=3),
    st.lists(st.tuples(names, small, small), max_size=3),
    st.one_of(st.none(), names),
    st.booleans(),
    st.lists(st.uuids(), max_size=3),
    st.integers(-(2**63), 2**63 - 1),
)
def test_register_broker_shapes_match_kio(
    bid: int,
    cluster: str,
    inc: uuid.UUID,
    listeners: list[Any],
    features: list[Any],
    rack: str | None,
    zk: bool,
    dirs: list[uuid.UUID],
    prev: int,
) -> None:
    mine = Reg(
        broker_id=bid,
        cluster_id=cluster,
        incarnation_id=inc,
        listeners=tuple(Listener(name=a, host=b, port=c, security_protocol=d) for a, b, c, d in listeners),
        features=tuple(
            Feature(name=n, min_supported_version=a, max_supported_version=b) for n, a, b in features
        ),
        rack=rack,
        is_migrating_zk_broker=zk,
        log_dirs=tuple(dirs),
        previous_broker_epoch=prev,
    )
    kio_obj = br.BrokerRegistrationRequest(
        broker_id=i32(bid),  # type: ignore[arg-type]
        cluster_id=cluster,
        incarnation_id=inc,
        listeners=tuple(
            br.Listener(name=a, host=b, port=u16(c), security_protocol=i16(d)) for a, b, c, d in listeners
        ),
        features=tuple(
            br.Feature(name=n, min_supported_version=i16(a), max_supported_version=i16(b))
            for n, a, b in features
        ),
        rack=rack,
        is_migrating_zk_broker=zk,
        log_dirs=tuple(dirs),
        previous_broker_epoch=i64(prev),
    )
    data = theirs(kio_obj)
    assert ours(REG_FIELDS, mine, 4) == data
    r = mr._Reader(data)
    assert mr._read_body(r, Reg, REG_FIELDS, 4) == mine
    assert entity_reader(br.BrokerRegistrationRequest)(data, 0)[0] == kio_obj
