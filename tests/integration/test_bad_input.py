"""Bad input gets a clear error and loses nothing: raw frames against a real broker process."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.client.messages import decode_response, encode_request
from strom.protocol.records import build_batch
from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration


class Raw:
    """A blocking raw connection: send kio-encoded requests or arbitrary bytes."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.cid = 0

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._exact(4))[0]
        return self._exact(size)

    def _exact(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by broker")
            out += chunk
        return out

    def call(self, api_key: int, version: int, data: dict[str, Any]) -> Any:
        self.cid += 1
        frame, resp_cls = encode_request(api_key, version, self.cid, "bad-input-test", data)
        self.send_bytes(frame)
        body = self.read_frame()
        assert struct.unpack_from(">i", body)[0] == self.cid
        return decode_response(resp_cls, body)

    def is_closed_by_peer(self) -> bool:
        self.sock.settimeout(10)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def strict_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("bad") / "data",
        overrides=["auto.create.topics.enable=false", "socket.request.max.bytes=1048576"],
    )
    b.start()
    yield b
    assert b.stop() == 0, b.log()


def _api_versions_ok(port: int) -> None:
    r = Raw(port)
    resp = r.call(18, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert int(resp.error_code) == 0 and len(resp.api_keys) > 5
    r.close()


def _create(r: Raw, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> Any:
    return r.call(
        19,
        7,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": 1,
                    "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
                }
            ],
            "timeout": 5000,
        },
    ).topics[0]


def _produce(r: Raw, topic: str, records: bytes, version: int = 9) -> Any:
    resp = r.call(
        0,
        version,
        {
            "acks": -1,
            "timeout": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
        },
    )
    return resp.responses[0].partition_responses[0]


def _latest(r: Raw, topic: str) -> int:
    resp = r.call(
        2,
        7,
        {
            "replica_id": -1,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        },
    )
    return int(resp.topics[0].partitions[0].offset)


def test_garbage_closes_only_that_connection(strict_broker: BrokerProcess) -> None:
    good = Raw(strict_broker.port)
    _create(good, "survivor")
    assert int(_produce(good, "survivor", build_batch([(b"k", b"acked", [], 1)])).error_code) == 0
    bad = Raw(strict_broker.port)
    bad.send_bytes(b"\x00\x00\x00\x05\xff\xff")  # api key -1 and a truncated header
    bad.send_bytes(b"\x00\x00\x00\x02zz")
    assert bad.is_closed_by_peer()
    # the other connection and new ones are unaffected; the acknowledged record is still there
    assert _latest(good, "survivor") == 1
    _api_versions_ok(strict_broker.port)


def test_absurd_frame_size_is_refused(strict_broker: BrokerProcess) -> None:
    bad = Raw(strict_broker.port)
    bad.send_bytes(struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 10)
    assert bad.is_closed_by_peer()
    bad2 = Raw(strict_broker.port)
    bad2.send_bytes(struct.pack(">i", -7))
    assert bad2.is_closed_by_peer()
    _api_versions_ok(strict_broker.port)


def test_truncated_frame_then_disconnect(strict_broker: BrokerProcess) -> None:
    bad = Raw(strict_broker.port)
    bad.send_bytes(struct.pack(">i", 100) + b"\x00\x12\x00\x00")
    bad.close()
    _api_versions_ok(strict_broker.port)


def test_undecodable_body_closes_connection(strict_broker: BrokerProcess) -> None:
    bad = Raw(strict_broker.port)
    payload = struct.pack(">hhih", 3, 12, 1, 1) + b"x" + b"\x00" + b"\xff\xff\xff\xff\xff"
    bad.send_bytes(struct.pack(">i", len(payload)) + payload)
    assert bad.is_closed_by_peer()
    _api_versions_ok(strict_broker.port)


def test_unknown_api_versions_version_gets_ranges(strict_broker: BrokerProcess) -> None:
    r = Raw(strict_broker.port)
    # ApiVersions v99 with a v2 header: the broker answers in v0 format with UNSUPPORTED_VERSION
    payload = struct.pack(">hhih", 18, 99, 7, 1) + b"c" + b"\x00" + b"\x00\x00\x00"
    r.send_bytes(struct.pack(">i", len(payload)) + payload)
    body = r.read_frame()
    cid, err, n = struct.unpack_from(">ihi", body)
    assert (cid, err) == (7, 35)
    ranges = {
        struct.unpack_from(">hhh", body, 10 + 6 * i)[0]: struct.unpack_from(">hhh", body, 10 + 6 * i)[1:]
        for i in range(n)
    }
    assert ranges[18] == (0, 4) and ranges[0] == (0, 12)  # Produce v0 listed as Kafka 4.0 does (KAFKA-18659)
    # the connection stays usable
    assert int(r.call(18, 0, {}).error_code) == 0


def test_unsupported_version_of_other_api_keeps_connection(strict_broker: BrokerProcess) -> None:
    r = Raw(strict_broker.port)
    # Produce v2 is below Kafka 4's minimum (KIP-896), though listed (KAFKA-18659)
    payload = struct.pack(">hhih", 0, 2, 11, 1) + b"c" + b"\x00\x01\x00\x00\x13\x88\x00\x00\x00\x00"
    r.send_bytes(struct.pack(">i", len(payload)) + payload)
    body = r.read_frame()
    assert struct.unpack_from(">i", body)[0] == 11
    assert int(r.call(18, 0, {}).error_code) == 0


def test_corrupt_batch_is_rejected_and_nothing_appended(strict_broker: BrokerProcess) -> None:
    r = Raw(strict_broker.port)
    _create(r, "crc-topic")
    batch = bytearray(build_batch([(b"k", b"value-one", [], 1)]))
    batch[-2] ^= 0x5A  # flip a record byte: CRC32C no longer matches
    part = _produce(r, "crc-topic", bytes(batch))
    assert int(part.error_code) == 2  # CORRUPT_MESSAGE
    assert _latest(r, "crc-topic") == 0
    truncated = build_batch([(b"k", b"v", [], 1)])[:-3]
    assert int(_produce(r, "crc-topic", truncated).error_code) in (2, 87)
    assert _latest(r, "crc-topic") == 0
    ok = _produce(r, "crc-topic", build_batch([(b"k", b"good", [], 1)]))
    assert (int(ok.error_code), int(ok.base_offset)) == (0, 0)


def test_too_large_batch(strict_broker: BrokerProcess) -> None:
    r = Raw(strict_broker.port)
    _create(r, "small-max", configs={"max.message.bytes": "1000"})
    part = _produce(r, "small-max", build_batch([(None, b"x" * 5000, [], 1)]))
    assert int(part.error_code) == 10  # MESSAGE_TOO_LARGE
    assert _latest(r, "small-max") == 0


def test_request_over_socket_request_max_bytes_closes(strict_broker: BrokerProcess) -> None:
    r = Raw(strict_broker.port)
    r.send_bytes(struct.pack(">i", 2 * 1048576) + b"\x00" * 64)
    assert r.is_closed_by_peer()
    _api_versions_ok(strict_broker.port)


def test_invalid_topic_names(strict_broker: BrokerProcess) -> None:
    r = Raw(strict_broker.port)
    for name in ("bad/name", "x" * 250, "..", "spaces are bad"):
        res = _create(r, name)
        assert int(res.error_code) == 17, name  # INVALID_TOPIC_EXCEPTION
    md = r.call(
        3, 12, {"topics": [{"name": "bad/name", "topic_id": None}], "allow_auto_topic_creation": True}
    )
    assert int(md.topics[0].error_code) == 17


def test_unknown_topic_without_auto_create(strict_broker: BrokerProcess) -> None:
    r = Raw(strict_broker.port)
    md = r.call(3, 12, {"topics": [{"name": "nope", "topic_id": None}], "allow_auto_topic_creation": True})
    assert int(md.topics[0].error_code) == 3  # UNKNOWN_TOPIC_OR_PARTITION
    part = _produce(r, "nope", build_batch([(None, b"v", [], 1)]))
    assert int(part.error_code) == 3
    dup = _create(r, "dup-topic")
    assert int(dup.error_code) == 0
    assert int(_create(r, "dup-topic").error_code) == 36  # TOPIC_ALREADY_EXISTS


def test_bad_config_fails_startup_with_clear_message(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "d", overrides=["num.partitions=lots"])
    with pytest.raises(RuntimeError) as err:
        b.start(timeout=15)
    assert "num.partitions" in str(err.value)
    assert "Traceback" not in str(err.value)


def test_port_in_use_is_a_clear_startup_error(strict_broker: BrokerProcess, tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "d2", port=strict_broker.port)
    b.start(timeout=15)  # returns at once: the port answers (it is the other broker's)
    assert b.proc is not None
    assert b.proc.wait(20) == 1
    assert "address already in use" in b.log().lower()
    assert "Traceback" not in b.log()


# The crafted frames of the robustness report: each declares a count or length far beyond its
# frame (compact 2^32-2, classic int32), which once made the native decoder abort the process.
CRAFTED_BODIES = [
    ("Metadata", 3, 12, b"\x00\xff\xff\xff\xff\x0f"),
    ("Produce", 0, 9, b"\x00\x00\x00\x01\x00\x00\x00\x01\xff\xff\xff\xff\x0f"),
    ("Produce", 0, 8, b"\xff\xff\x00\x01\x00\x00\x00\x01\x7f\xff\xff\xff"),
    ("CreateTopics", 19, 5, b"\x00\xff\xff\xff\xff\x0f"),
    ("Fetch", 1, 4, b"\xff\xff\xff\xff" + b"\x00" * 12 + b"\x7f\xff\xff\xff"),
    ("JoinGroup", 11, 5, b"\x00\x01g" + b"\x00" * 8 + b"\x00\x01m\xff\xff\x00\x01c\x7f\xff\xff\xff"),
    ("Metadata", 3, 12, b"\xff\xff\xff\xff\x0f"),  # the header's tagged-field count
    ("Produce", 0, 9, b"\x00\x00\x00\x01\x00\x00\x75\x30\x00\x00"),  # topic_data null
]


@pytest.mark.parametrize(("api", "key", "version", "body"), CRAFTED_BODIES)
def test_crafted_counts_close_the_connection_and_log_one_warning(
    strict_broker: BrokerProcess, api: str, key: int, version: int, body: bytes
) -> None:
    bad = Raw(strict_broker.port)
    payload = struct.pack(">hhih", key, version, 4242, 4) + b"evil" + body  # body: header tags first
    bad.send_bytes(struct.pack(">i", len(payload)) + payload)
    assert bad.is_closed_by_peer()
    port = bad.sock.getsockname()[1]
    _api_versions_ok(strict_broker.port)
    text = strict_broker.log_path.read_text(errors="replace")
    lines = [ln for ln in text.splitlines() if f"127.0.0.1:{port}" in ln]
    assert len(lines) == 1, lines
    assert "WARNING" in lines[0] and f"cannot decode {api} v{version} request" in lines[0], lines[0]
    assert "Traceback" not in text
