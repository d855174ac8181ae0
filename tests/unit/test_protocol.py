from __future__ import annotations

import struct

import pytest

from strom.config import BrokerConfig, ConfigError, LogConfig, parse_properties
from strom.protocol import codec
from strom.protocol.api_versions import KAFKA_API_RANGES, advertised
from strom.protocol.connection import ServerConnection
from strom.protocol.errors import ProtocolError
from strom.protocol.framing import FrameDecoder, parse_request_header


def _request(api_key: int, version: int, corr: int, client: bytes | None = b"c", body: bytes = b"") -> bytes:
    head = struct.pack(">hhi", api_key, version, corr)
    head += struct.pack(">h", -1) if client is None else struct.pack(">h", len(client)) + client
    payload = head + body
    return struct.pack(">i", len(payload)) + payload


def test_frames_split_across_reads_are_reassembled() -> None:
    data = _request(18, 0, 1) + _request(3, 1, 2, body=b"\x00\x00\x00\x00")
    dec = FrameDecoder(1000)
    frames = []
    for i in range(len(data)):
        frames += dec.feed(data[i : i + 1])
    assert len(frames) == 2
    h1, _ = parse_request_header(frames[0])
    h2, _ = parse_request_header(frames[1])
    assert (h1.api_key, h1.correlation_id, h1.client_id) == (18, 1, "c")
    assert (h2.api_key, h2.api_version, h2.correlation_id) == (3, 1, 2)
    assert dec.buffered == 0


def test_large_frames_come_whole_however_the_bytes_are_split() -> None:
    """Frames of at least 64 KiB are kept as the chunks they arrive in and joined once; mixed
    with small frames, split anywhere, from bytes or from a reused bytearray, they come out
    unchanged, and buffered/pending_frame_size follow the partial frame."""
    import random

    rnd = random.Random(7)
    sizes = [10, 70_000, 5, 300_000, 65_536, 1, 200_000, 64 * 1024 - 1]
    payloads = [bytes([i]) * n for i, n in enumerate(sizes)]
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
    for reuse in (False, True):
        dec = FrameDecoder(1 << 20)
        got: list[bytes] = []
        pos = 0
        scratch = bytearray(80_000)
        while pos < len(stream):
            n = rnd.choice([1, 3, 4, 7, 1000, 65_536, 80_000])
            chunk = stream[pos : pos + n]
            if reuse:  # the caller's buffer is overwritten after each feed
                view = memoryview(scratch)[: len(chunk)]
                view[:] = chunk
                frames = dec.feed(view)
                scratch[:] = b"\xff" * len(scratch)
            else:
                frames = dec.feed(chunk)
            got += [bytes(f) for f in frames]
            pos += len(chunk)
            done = sum(4 + len(p) for p in payloads[: len(got)])
            assert dec.buffered == pos - done
            if pos - done >= 4:
                assert dec.pending_frame_size == len(payloads[len(got)])
        assert got == payloads
        assert dec.buffered == 0 and dec.pending_frame_size == 0


def test_oversized_frame_is_refused_before_buffering() -> None:
    dec = FrameDecoder(100)
    with pytest.raises(ProtocolError, match=r"socket\.request\.max\.bytes"):
        dec.feed(struct.pack(">i", 101))


def test_oversized_frame_error_names_the_limit_in_force() -> None:
    """Before SASL authentication the limit is sasl.server.max.receive.size, and the error says so."""
    conn = ServerConnection(1000)
    conn.max_frame_size, conn.limit_name = 100, "sasl.server.max.receive.size"
    with pytest.raises(ProtocolError, match=r"exceeds sasl\.server\.max\.receive\.size \(100\)"):
        conn.receive_data(struct.pack(">i", 101))


def test_negative_size_and_short_header_are_protocol_errors() -> None:
    with pytest.raises(ProtocolError):
        FrameDecoder(100).feed(struct.pack(">i", -5))
    conn = ServerConnection(100)
    with pytest.raises(ProtocolError):
        conn.receive_data(struct.pack(">i", 3) + b"abc")


def test_bad_client_id_length_is_protocol_error() -> None:
    payload = struct.pack(">hhih", 18, 0, 1, 50) + b"x"
    with pytest.raises(ProtocolError):
        ServerConnection(1000).receive_data(struct.pack(">i", len(payload)) + payload)


def test_null_client_id() -> None:
    reqs = ServerConnection(1000).receive_data(_request(18, 0, 9, client=None))
    assert reqs[0].header.client_id is None


def test_responses_must_follow_request_order() -> None:
    conn = ServerConnection(1000)
    conn.receive_data(_request(18, 0, 1) + _request(18, 0, 2))
    with pytest.raises(ProtocolError):
        conn.send(2, [b"x"])
    conn.send(1, [b"a"])
    conn.send(2, [b"b"])
    assert conn.data_to_send() == [b"a", b"b"]


def test_decode_garbage_body_raises_protocol_error_only() -> None:
    reqs = ServerConnection(1000).receive_data(_request(3, 12, 1, body=b"\xff\xff\xff"))
    with pytest.raises(ProtocolError):
        codec.decode_request(3, 12, reqs[0].frame, reqs[0].body_pos)


def test_build_fills_defaults_and_drops_unknown_fields() -> None:
    cls = codec.response_type(3, 1)
    obj = codec.build(
        cls,
        {
            "brokers": [{"node_id": 1, "host": "h", "port": 9, "rack": None}],
            "cluster_id": "x",
            "topics": [],
            "throttle_time": 5,
        },
    )
    assert obj.brokers[0].port == 9
    assert not hasattr(obj, "cluster_id")  # v1 has no cluster id
    assert codec.encode_response(obj)


def test_version_table_is_kafka4_shaped() -> None:
    assert KAFKA_API_RANGES[0][1:] == (3, 12)  # Produce: KIP-896 minimum 3 accepted ...
    assert advertised({0})[0] == (0, 0, 12)  # ... yet v0 advertised, as Kafka 4.0 (KAFKA-18659)
    assert KAFKA_API_RANGES[1][1:] == (4, 17)
    assert advertised({18, 3}) == [(3, 0, 13), (18, 0, 4)]


def test_properties_and_overrides() -> None:
    props = parse_properties("# c\nnode.id=3\nlog.dirs = /tmp/x\nnum.partitions: 4\n")
    assert props == {"node.id": "3", "log.dirs": "/tmp/x", "num.partitions": "4"}
    cfg = BrokerConfig.from_sources(None, ["num.partitions=2", "auto.create.topics.enable=false"])
    assert cfg["num.partitions"] == 2 and cfg["auto.create.topics.enable"] is False
    assert cfg.topic_defaults()["retention.ms"] == 168 * 3600 * 1000


def test_bad_configs_are_clear_errors() -> None:
    with pytest.raises(ConfigError, match=r"num\.partitions"):
        BrokerConfig.from_sources(None, ["num.partitions=many"])
    with pytest.raises(ConfigError, match="key=value"):
        BrokerConfig.from_sources(None, ["oops"])
    with pytest.raises(ConfigError, match="listener"):
        BrokerConfig.from_sources(None, ["listeners=nonsense"])
    with pytest.raises(ConfigError, match=r"cleanup\.policy"):
        LogConfig.from_topic_configs({}, {"cleanup.policy": "shred"})
