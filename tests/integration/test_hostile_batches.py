"""Hostile produce input against a real broker process: decompression bombs, batches with a valid
CRC around corrupt contents, and many clients slowly sending huge frames. The broker answers as
Kafka would, appends nothing it refuses, keeps its memory bounded and keeps serving others."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_bad_input import Raw, _create, _latest, _produce  # same directory (rootdir import mode)

from strom.protocol.records import build_batch, compress
from strom.testing.broker_process import BrokerProcess
from strom.testing.hostile import bomb_payload, raw_batch

pytestmark = pytest.mark.integration

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
GIB = 1 << 30


def _status(pid: int, field: str) -> int:
    """A /proc/<pid>/status figure in bytes (VmRSS, VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _peak_baseline(pid: int) -> int:
    """Reset the process's peak RSS to its current RSS (Linux: 5 > clear_refs) where allowed,
    and return the figure later peaks are measured from."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    return _status(pid, "VmHWM")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("hostile") / "data",
        overrides=["auto.create.topics.enable=false", "queued.max.request.bytes=134217728"],
    )
    b.start()
    yield b
    assert b.stop() == 0, b.log()


def _records(i: int, key: bytes | None = b"k") -> bytes:
    return build_batch([(key, b"value-%d" % i, [], 1)])


def _encode(records: list[tuple[bytes | None, bytes]], deltas: list[int] | None = None) -> bytes:
    from strom.protocol.records import _encode_record

    out = bytearray()
    for i, (k, v) in enumerate(records):
        _encode_record(out, i if deltas is None else deltas[i], 0, k, v, [])
    return bytes(out)


def _still_readable(r: Raw, topic: str, expect_next: int) -> None:
    """The partition takes and serves a good batch after refusing a bad one."""
    ok = _produce(r, topic, _records(expect_next))
    assert (int(ok.error_code), int(ok.base_offset)) == (0, expect_next)
    resp = r.call(
        1,
        11,
        {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": 0,
                            "current_leader_epoch": -1,
                            "fetch_offset": 0,
                            "log_start_offset": -1,
                            "partition_max_bytes": 1 << 20,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )
    part = resp.responses[0].partitions[0]
    assert int(part.error_code) == 0 and int(part.high_watermark) == expect_next + 1
    from strom.protocol.records import decode_records

    assert [r.offset for r in decode_records(part.records)] == list(range(expect_next + 1))


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_corrupt_compressed_payload_with_valid_crc(broker: BrokerProcess, codec: int) -> None:
    r = Raw(broker.port)
    topic = f"corrupt-payload-{codec}"
    _create(r, topic)
    assert int(_produce(r, topic, _records(0)).error_code) == 0
    payload = bytearray(compress(codec, _encode([(b"k", b"v" * 200)] * 5)))
    payload[len(payload) // 2] ^= 0xFF
    del payload[-3:]
    part = _produce(r, topic, raw_batch(bytes(payload), 5, codec))
    assert int(part.error_code) in (2, 87), part  # CORRUPT_MESSAGE (or INVALID_RECORD if it decodes)
    assert _latest(r, topic) == 1
    _still_readable(r, topic, 1)


@pytest.mark.parametrize("codec", [0, GZIP, ZSTD])
def test_records_that_do_not_add_up_are_refused(broker: BrokerProcess, codec: int) -> None:
    r = Raw(broker.port)
    topic = f"bad-records-{codec}"
    _create(r, topic)
    body = _encode([(b"k", b"value")] * 3)
    cases = {
        "truncated": raw_batch(compress(codec, body[:-2]), 3, codec),
        "count too high": raw_batch(compress(codec, body), 4, codec),
        "count too low": raw_batch(compress(codec, body), 2, codec),
        "record length": raw_batch(compress(codec, bytes([body[0] + 2]) + body[1:]), 3, codec),
    }
    for name, batch in cases.items():
        part = _produce(r, topic, batch)
        assert int(part.error_code) == 87, (name, part)  # INVALID_RECORD
        assert part.error_message, name
    assert _latest(r, topic) == 0
    _still_readable(r, topic, 0)


def test_bad_offset_deltas_get_record_errors(broker: BrokerProcess) -> None:
    r = Raw(broker.port)
    _create(r, "bad-deltas")
    batch = raw_batch(compress(ZSTD, _encode([(b"k", b"v")] * 3, deltas=[0, 2, 1])), 3, ZSTD)
    part = _produce(r, "bad-deltas", batch)
    assert int(part.error_code) == 87
    assert [int(e.batch_index) for e in part.record_errors] == [1, 2]
    assert str(part.error_message).startswith("One or more records have been rejected")
    assert _latest(r, "bad-deltas") == 0


def test_compacted_topic_refuses_null_keys_with_record_errors(broker: BrokerProcess) -> None:
    r = Raw(broker.port)
    _create(r, "compact-keys", configs={"cleanup.policy": "compact"})
    batch = build_batch([(b"a", b"1", [], 1), (None, b"2", [], 1), (b"c", b"3", [], 1)], compression=LZ4)
    part = _produce(r, "compact-keys", batch)
    assert int(part.error_code) == 87
    assert [int(e.batch_index) for e in part.record_errors] == [1]
    assert "Compacted topic cannot accept message without key" in str(part.error_message)
    old = _produce(r, "compact-keys", batch, version=7)  # before record_errors: the code alone
    assert int(old.error_code) == 87
    assert _latest(r, "compact-keys") == 0
    _still_readable(r, "compact-keys", 0)


class _Pinger(threading.Thread):
    """Another client: ApiVersions round trips in a loop, recording the slowest."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.raw = Raw(port)
        self.stop = threading.Event()
        self.worst = 0.0
        self.count = 0

    def run(self) -> None:
        while not self.stop.is_set():
            t = time.monotonic()
            self.raw.call(18, 3, {"client_software_name": "p", "client_software_version": "1"})
            self.worst = max(self.worst, time.monotonic() - t)
            self.count += 1
            time.sleep(0.01)


@pytest.fixture(scope="module")
def bombs() -> dict[int, bytes]:
    return {ZSTD: bomb_payload(ZSTD, GIB), GZIP: bomb_payload(GZIP, GIB)}


@pytest.mark.slow
@pytest.mark.parametrize("compacted", [True, False])
@pytest.mark.parametrize("codec", [ZSTD, GZIP])
def test_decompression_bomb(
    broker: BrokerProcess, bombs: dict[int, bytes], codec: int, compacted: bool
) -> None:
    """A 1 GiB bomb: a valid record is valid data (Kafka accepts it too); the same payload
    declaring two records is refused. Either way the broker's peak RSS grows by tens of MB at
    most and another client's requests stay fast."""
    r = Raw(broker.port)
    r.sock.settimeout(120)
    topic = f"bomb-{codec}-{'compact' if compacted else 'delete'}"
    configs = {"max.message.bytes": str(4 << 20)}
    if compacted:
        configs["cleanup.policy"] = "compact"
    _create(r, topic, configs=configs)
    assert pid_ok(broker)
    pid = broker.proc.pid  # type: ignore[union-attr]
    pinger = _Pinger(broker.port)
    pinger.start()
    time.sleep(0.3)
    hwm_before = _peak_baseline(pid)
    try:
        t = time.monotonic()
        bad = _produce(r, topic, raw_batch(bombs[codec], 2, codec))  # the stream ends after one record
        refused_in = time.monotonic() - t
        good = _produce(r, topic, raw_batch(bombs[codec], 1, codec))
    finally:
        pinger.stop.set()
        pinger.join()
    growth = _status(pid, "VmHWM") - hwm_before
    print(
        f"bomb codec={codec} compacted={compacted}: refused in {refused_in:.2f}s, peak RSS growth "
        f"{growth / 2**20:.1f} MiB, other client's worst latency {pinger.worst * 1000:.0f} ms "
        f"over {pinger.count} requests"
    )
    assert int(bad.error_code) == 87 and "premature EOF" in str(bad.error_message)
    assert (int(good.error_code), int(good.base_offset)) == (0, 0)
    assert _latest(r, topic) == 1
    assert growth < 64 << 20, growth
    assert pinger.worst < 0.5, pinger.worst


def pid_ok(broker: BrokerProcess) -> bool:
    return broker.proc is not None and broker.proc.poll() is None


@pytest.mark.slow
def test_slow_large_frames_are_bounded_by_queued_max_request_bytes(broker: BrokerProcess) -> None:
    """20 connections each trickling a 50 MB frame (900 MB in all, never completed): the broker
    holds about the pool's 128 MiB of them (half for large frames, plus one frame on the
    overdraft), mutes the rest, and keeps answering other clients."""
    pid = broker.proc.pid  # type: ignore[union-attr]
    hwm_before = _peak_baseline(pid)
    header = struct.pack(">hhih", 0, 9, 1, 1) + b"x"
    frame_size = 50_000_000
    socks = []
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", broker.port))
        s.sendall(struct.pack(">i", frame_size) + header)
        s.setblocking(False)
        socks.append(s)
    sent = [4 + len(header)] * len(socks)
    zeros = b"\x00" * (256 * 1024)
    limit = frame_size - 5_000_000  # never complete a frame: each holds what it sent
    deadline = time.monotonic() + 30
    last_progress = time.monotonic()
    try:
        # send round-robin until every socket is full: the broker stopped reading them all
        while time.monotonic() < deadline and time.monotonic() - last_progress < 2.0:
            for i, s in enumerate(socks):
                if sent[i] >= limit:
                    continue
                try:
                    sent[i] += s.send(zeros[: limit - sent[i]])
                    last_progress = time.monotonic()
                except BlockingIOError:
                    pass
            time.sleep(0.01)
        # other clients are still served, quickly
        t = time.monotonic()
        r = Raw(broker.port)
        resp = r.call(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        latency = time.monotonic() - t
        assert int(resp.error_code) == 0
        _create(r, "after-slow-frames")
        assert int(_produce(r, "after-slow-frames", _records(0)).error_code) == 0
        growth = _status(pid, "VmHWM") - hwm_before
        print(
            f"slow frames: clients pushed {sum(sent) / 2**20:.0f} MiB in total, broker peak RSS growth "
            f"{growth / 2**20:.0f} MiB, another client's ApiVersions answered in {latency * 1000:.0f} ms"
        )
        assert latency < 1.0
        assert growth < (128 + 48) << 20, growth
        assert sum(sent) < len(socks) * limit // 2  # the broker muted them: they could not send on
    finally:
        for s in socks:
            with contextlib.suppress(OSError):
                s.close()
    # the memory comes back: a large request after the hostile ones still goes through
    time.sleep(0.5)
    r = Raw(broker.port)
    big = build_batch([(b"k", b"v" * 500_000, [], 1)])
    _create(r, "after-slow-frames-2", configs={"max.message.bytes": str(2 << 20)})
    assert int(_produce(r, "after-slow-frames-2", big).error_code) == 0


@pytest.mark.slow
def test_appends_keep_arrival_order_while_a_batch_is_validated(
    broker: BrokerProcess, bombs: dict[int, bytes]
) -> None:
    """A batch that takes seconds to validate (a 1 GiB gzip bomb of one valid record) and an
    uncompressed batch sent after it on another connection: the second waits for the first, so
    offsets follow arrival order."""
    from strom.client.messages import decode_response, encode_request

    r = Raw(broker.port)
    _create(r, "order", configs={"max.message.bytes": str(4 << 20)})
    slow, fast = Raw(broker.port), Raw(broker.port)
    slow.sock.settimeout(120)
    frames = []
    for conn, records in ((slow, raw_batch(bombs[GZIP], 1, GZIP)), (fast, _records(1))):
        data = {
            "acks": -1,
            "timeout": 30000,
            "topic_data": [{"name": "order", "partition_data": [{"index": 0, "records": records}]}],
        }
        frames.append((conn, *encode_request(0, 9, 1, "order-test", data)))
    t = time.monotonic()
    for conn, frame, _cls in frames:
        conn.send_bytes(frame)
        time.sleep(0.2)  # the broker is validating the bomb when the small batch arrives
    fast_resp = decode_response(frames[1][2], fast.read_frame())
    fast_after = time.monotonic() - t
    slow_resp = decode_response(frames[0][2], slow.read_frame())
    slow_part = slow_resp.responses[0].partition_responses[0]
    fast_part = fast_resp.responses[0].partition_responses[0]
    assert (int(slow_part.error_code), int(slow_part.base_offset)) == (0, 0)
    assert (int(fast_part.error_code), int(fast_part.base_offset)) == (0, 1)
    assert fast_after > 0.5  # it did wait for the bomb's validation
