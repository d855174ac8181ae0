"""Metadata records: golden bytes built by hand from Kafka's JSON schemas (metadata/src/main/
resources/common/metadata/*.json) and MetadataRecordSerde's frame, plus the error contract."""

from __future__ import annotations

import struct
import uuid

import pytest

from strom.metadata import records as mr
from strom.metadata.records import (
    BrokerEndpoint,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    EntityData,
    FeatureLevelRecord,
    MetadataParseError,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    decode,
    decode_versioned,
    encode,
)
from strom.protocol.records import build_batch, build_control_batch, iter_batches

U1 = uuid.UUID("00010203-0405-0607-0809-0a0b0c0d0e0f")
U2 = uuid.UUID("10111213-1415-1617-1819-1a1b1c1d1e1f")
U3 = uuid.UUID("20212223-2425-2627-2829-2a2b2c2d2e2f")


def i32(*vs: int) -> bytes:
    return b"".join(struct.pack(">i", v) for v in vs)


def cstr(s: str) -> bytes:
    b = s.encode()
    assert len(b) + 1 < 0x80
    return bytes([len(b) + 1]) + b


def check(record: object, golden: bytes, version: int | None = None) -> None:
    assert encode(record, version) == golden  # type: ignore[arg-type]
    got, v = decode_versioned(golden)
    assert got == record
    assert v == golden[2]


def test_topic_record_golden() -> None:
    # frame 1 | apiKey 2 | version 0 | Name compact string | TopicId uuid | no tagged fields
    golden = b"\x01\x02\x00" + cstr("foo") + U1.bytes + b"\x00"
    check(TopicRecord(name="foo", topic_id=U1), golden)


def test_partition_record_v1_golden() -> None:
    rec = PartitionRecord(
        partition_id=0,
        topic_id=U1,
        replicas=(1, 2, 3),
        isr=(1, 2),
        leader=1,
        leader_epoch=5,
        partition_epoch=7,
        directories=(U1, U2, U3),
    )
    golden = (
        b"\x01\x03\x01"
        + i32(0)
        + U1.bytes
        + b"\x04"
        + i32(1, 2, 3)  # Replicas
        + b"\x03"
        + i32(1, 2)  # Isr
        + b"\x01"  # RemovingReplicas []
        + b"\x01"  # AddingReplicas []
        + i32(1)  # Leader (LeaderRecoveryState is tagged, default 0: not written)
        + i32(5)  # LeaderEpoch
        + i32(7)  # PartitionEpoch
        + b"\x04"
        + U1.bytes
        + U2.bytes
        + U3.bytes  # Directories (v1+)
        + b"\x00"
    )
    check(rec, golden, version=1)


def test_partition_record_v2_writes_elr_as_tags_and_recovery_state() -> None:
    rec = PartitionRecord(
        partition_id=3,
        topic_id=U2,
        replicas=(1,),
        isr=(1,),
        leader=1,
        leader_recovery_state=1,
        leader_epoch=0,
        partition_epoch=0,
        directories=(U3,),
        eligible_leader_replicas=(),
        last_known_elr=(4,),
    )
    golden = (
        b"\x01\x03\x02"
        + i32(3)
        + U2.bytes
        + b"\x02"
        + i32(1)
        + b"\x02"
        + i32(1)
        + b"\x01\x01"
        + i32(1, 0, 0)
        + b"\x02"
        + U3.bytes
        + b"\x03"  # three tagged fields in tag order
        + b"\x00\x01\x01"  # tag 0 LeaderRecoveryState = 1
        + b"\x01\x01\x01"  # tag 1 ELR = [] (empty, not null: written)
        + b"\x02\x05\x02"
        + i32(4)  # tag 2 LastKnownElr = [4]
    )
    check(rec, golden)


def test_partition_change_record_tags() -> None:
    rec = PartitionChangeRecord(partition_id=2, topic_id=U1, isr=(1,), leader=-1, leader_recovery_state=1)
    golden = (
        b"\x01\x05\x01"
        + i32(2)
        + U1.bytes
        + b"\x03"
        + b"\x00\x05\x02"
        + i32(1)  # tag 0 Isr
        + b"\x01\x04"
        + i32(-1)  # tag 1 Leader
        + b"\x05\x01\x01"  # tag 5 LeaderRecoveryState
    )
    check(rec, golden, version=1)
    # Directories is tag 8 and sorts after ELR's 6 and 7
    rec2 = PartitionChangeRecord(partition_id=0, topic_id=U1, directories=(U2,), last_known_elr=())
    golden2 = b"\x01\x05\x02" + i32(0) + U1.bytes + b"\x02" + b"\x07\x01\x01" + b"\x08\x11\x02" + U2.bytes
    check(rec2, golden2)


def test_register_broker_record_v3_golden() -> None:
    rec = RegisterBrokerRecord(
        broker_id=1,
        incarnation_id=U2,
        broker_epoch=10,
        end_points=(BrokerEndpoint(name="PLAINTEXT", host="localhost", port=9092, security_protocol=0),),
        features=(BrokerFeature(name="metadata.version", min_supported_version=7, max_supported_version=25),),
        rack=None,
        fenced=True,
        log_dirs=(U3,),
    )
    golden = (
        b"\x01\x00\x03"
        + i32(1)
        + b"\x00"  # IsMigratingZkBroker (v2+)
        + U2.bytes
        + struct.pack(">q", 10)
        + b"\x02"
        + cstr("PLAINTEXT")
        + cstr("localhost")
        + struct.pack(">Hh", 9092, 0)
        + b"\x00"
        + b"\x02"
        + cstr("metadata.version")
        + struct.pack(">hh", 7, 25)
        + b"\x00"
        + b"\x00"  # Rack null
        + b"\x01"  # Fenced
        + b"\x00"  # InControlledShutdown (v1+)
        + b"\x01\x00\x11\x02"
        + U3.bytes  # tag 0 LogDirs
    )
    check(rec, golden)


def test_register_broker_record_v0_has_no_later_fields() -> None:
    rec = RegisterBrokerRecord(broker_id=2, broker_epoch=1, rack="r1", fenced=False)
    golden = b"\x01\x00\x00" + i32(2) + bytes(16) + struct.pack(">q", 1) + b"\x01\x01"
    golden += cstr("r1") + b"\x00\x00"  # Rack, Fenced=false, no tagged fields
    check(rec, golden, version=0)
    with pytest.raises(ValueError):
        encode(RegisterBrokerRecord(in_controlled_shutdown=True), 0)


def test_broker_registration_change_and_client_quota_and_config() -> None:
    check(
        BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=5, fenced=-1),
        b"\x01\x11\x02" + i32(1) + struct.pack(">q", 5) + b"\x01\x00\x01\xff",
    )
    check(
        ClientQuotaRecord(
            entity=(EntityData(entity_type="user", entity_name=None),), key="producer_byte_rate", value=1024.0
        ),
        b"\x01\x0e\x00\x02"
        + cstr("user")
        + b"\x00\x00"
        + cstr("producer_byte_rate")
        + struct.pack(">d", 1024.0)
        + b"\x00\x00",
    )
    check(
        ConfigRecord(resource_type=2, resource_name="t", name="cleanup.policy", value=None),
        b"\x01\x04\x00\x02" + cstr("t") + cstr("cleanup.policy") + b"\x00\x00",
    )
    check(
        FeatureLevelRecord(name="metadata.version", feature_level=25),
        b"\x01\x0c\x00" + cstr("metadata.version") + b"\x00\x19\x00",
    )
    check(NoOpRecord(), b"\x01\x14\x00\x00")


def test_delegation_token_and_controller_records_golden() -> None:
    check(
        mr.DelegationTokenRecord(
            owner="User:a",
            requester="User:b",
            renewers=("User:c", "User:d"),
            issue_timestamp=1,
            max_timestamp=2,
            expiration_timestamp=3,
            token_id="t",
        ),
        b"\x01\x0a\x00"
        + cstr("User:a")
        + cstr("User:b")
        + b"\x03"
        + cstr("User:c")
        + cstr("User:d")
        + struct.pack(">qqq", 1, 2, 3)
        + cstr("t")
        + b"\x00",
    )
    check(
        mr.RegisterControllerRecord(
            controller_id=3000, incarnation_id=U1, end_points=(BrokerEndpoint(name="C", host="h", port=9093),)
        ),
        b"\x01\x1b\x00"
        + i32(3000)
        + U1.bytes
        + b"\x00"
        + b"\x02"
        + cstr("C")
        + cstr("h")
        + struct.pack(">Hh", 9093, 0)
        + b"\x00"
        + b"\x01"
        + b"\x00",
    )


def test_unknown_tags_are_skipped() -> None:
    golden = b"\x01\x02\x00" + cstr("foo") + U1.bytes + b"\x01\x07\x02ab"
    assert decode(golden) == TopicRecord(name="foo", topic_id=U1)


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "truncated"),
        (b"\x00\x02\x00", "frame version 0"),
        (b"\x02\x02\x00", "frame version 2"),
        (b"\x01\x06\x00", "unknown metadata record type 6"),
        (b"\x01\x02\x01", "no version 1"),
        (b"\x01\x02\x00\x04fo", "beyond the record"),
        (b"\x01\x02\x00\x00" + bytes(16) + b"\x00", "non-nullable"),
        (b"\x01\x02\x00\x03\xff\xfe" + bytes(16) + b"\x00", "UTF-8"),
        (b"\x01\x02\x00\x01" + bytes(16) + b"\x00\x00", "garbage"),
        (b"\x01\x02\x00\x01" + bytes(16) + b"\x02\x05\x00\x04\x00", "out of order"),
        (b"\x01\x02\x00\x01" + bytes(16) + b"\x01\x00\x09", "truncated"),
        (b"\x01\x05\x00" + bytes(20) + b"\x01\x01\x05" + i32(1) + b"\x00", "left over"),
        (b"\x01\x03\x00" + bytes(20) + b"\xff\xff\xff\x0f", "beyond the record"),
        (b"\x01\xff\xff\xff\xff\xff\x01", "varint too long"),
    ],
)
def test_malformed_input_raises_metadata_parse_error(data: bytes, message: str) -> None:
    with pytest.raises(MetadataParseError, match=message):
        decode(data)


def test_string_length_limits() -> None:
    with pytest.raises(ValueError, match="too long"):
        encode(TopicRecord(name="x" * 0x8000))
    body = b"\x01\x02\x00" + b"\x81\x80\x02" + b"x" * 0x8000 + bytes(16) + b"\x00"
    with pytest.raises(MetadataParseError, match="invalid length"):
        decode(body)


def test_encode_rejects_nulls_and_bad_versions() -> None:
    with pytest.raises(ValueError, match="not nullable"):
        encode(PartitionRecord(replicas=None))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no version"):
        encode(TopicRecord(), 1)
    with pytest.raises(ValueError, match="non-default"):
        encode(PartitionRecord(directories=(U1,)), 0)
    with pytest.raises(ValueError):
        encode(PartitionRecord(partition_id=2**31))


def test_default_versions_are_what_kafka_4_writes() -> None:
    assert encode(RegisterBrokerRecord())[2] == 3
    assert encode(BrokerRegistrationChangeRecord())[2] == 2
    assert encode(PartitionRecord())[2] == 2
    assert encode(PartitionRecord(eligible_leader_replicas=()))[2] == 2
    assert encode(PartitionChangeRecord())[2] == 2
    # v2 without ELR is v1 plus nothing: only the version differs
    assert encode(PartitionRecord(replicas=(1,)), 1)[3:] == encode(PartitionRecord(replicas=(1,)))[3:]
    assert encode(TopicRecord())[2] == 0


def test_batches_round_trip_and_skip_control_batches() -> None:
    recs = [FeatureLevelRecord(name="metadata.version", feature_level=25), TopicRecord(name="a", topic_id=U1)]
    batch = mr.build_records_batch(recs, base_offset=10, timestamp_ms=5, leader_epoch=3)
    control = build_control_batch(1, 0, True, 0, 5)
    tail = mr.build_records_batch([NoOpRecord()], base_offset=13)
    got = list(mr.iter_batch_records(batch + control + tail))
    assert got == [(10, recs[0]), (11, recs[1]), (13, NoOpRecord())]


def test_batch_errors_are_metadata_parse_errors() -> None:
    batch = mr.build_records_batch([NoOpRecord()])
    with pytest.raises(MetadataParseError):
        list(mr.iter_batch_records(batch[:-1]))
    with pytest.raises(MetadataParseError, match="no value"):
        list(mr.iter_batch_records(build_batch([(None, None, [], 0)])))
    with pytest.raises(MetadataParseError):
        list(mr.iter_batch_records(build_batch([(None, b"\x01\x63\x00", [], 0)])))


def test_every_record_type_has_a_unique_api_key() -> None:
    keys = [t.API_KEY for t in mr.RECORD_TYPES]  # type: ignore[attr-defined]
    assert len(set(keys)) == len(keys) == 26
    for t in mr.RECORD_TYPES:
        assert mr.api_key_of(t()) == t.API_KEY  # type: ignore[attr-defined]


def test_records_split_into_batches() -> None:
    recs = [TopicRecord(name=f"t{i}", topic_id=uuid.UUID(int=i)) for i in range(7)]
    data = mr.build_records_batches(recs, base_offset=5, max_batch_records=3)
    assert len(list(iter_batches(data))) == 3
    assert list(mr.iter_batch_records(data)) == [(5 + i, rec) for i, rec in enumerate(recs)]
    assert mr.build_records_batches([]) == b""
    with pytest.raises(ValueError):
        mr.build_records_batches(recs, max_batch_records=0)
