"""The robustness issue's whole scene on one broker under ``ulimit -n 4096``: the crafted frames
that once aborted the process, a fuzzing run over TCP, corrupt batches and a decompression bomb,
all against the same process; then it still serves, its peak RSS stayed under 768 MB and its log
holds no traceback. (10,000 partitions under the same limit: test_fd_limits.py.)"""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import pytest
from test_bad_input import CRAFTED_BODIES, Raw, _api_versions_ok, _create, _latest, _produce

from strom.testing.broker_process import BrokerProcess
from strom.testing.fuzzer import fuzz_remote
from strom.testing.hostile import bomb_payload, raw_batch

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ZSTD, GZIP = 4, 1


def _vm_hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_hostile_clients_against_one_broker_under_ulimit_4096(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "d", nofile=4096, overrides=["group.initial.rebalance.delay.ms=0"]).start()
    try:
        r = Raw(b.port)
        r.sock.settimeout(120)
        _create(r, "kept", configs={"max.message.bytes": str(4 << 20)})
        _create(r, "compacted", configs={"cleanup.policy": "compact", "max.message.bytes": str(4 << 20)})
        from strom.protocol.records import build_batch

        assert int(_produce(r, "kept", build_batch([(b"k", b"acknowledged", [], 1)])).error_code) == 0

        # 1. the crafted frames: each closes its own connection, nothing else
        for _api, key, version, body in CRAFTED_BODIES:
            s = socket.create_connection(("127.0.0.1", b.port), timeout=10)
            payload = struct.pack(">hhih", key, version, 1, 4) + b"evil" + body
            s.sendall(struct.pack(">i", len(payload)) + payload)
            assert s.recv(1) == b""
            s.close()

        # 2. a fuzzing run over TCP (every API x version, structure and wire mutations)
        sent, findings, outcomes = fuzz_remote("127.0.0.1", b.port, 20_000, seed=7)
        assert sent == 20_000 and not findings, findings[:3]
        assert outcomes["answered"] > 5_000 and outcomes["closed"] > 5_000

        # 3. corrupt contents with a valid CRC, and a 1 GiB zstd bomb, to a compacted topic
        corrupt = raw_batch(b"\x28\xb5\x2f\xfd" + b"\x00" * 40, 1, ZSTD)
        assert int(_produce(r, "compacted", corrupt).error_code) in (2, 87)
        assert int(_produce(r, "compacted", raw_batch(bomb_payload(ZSTD, 1 << 30), 2, ZSTD)).error_code) == 87
        gzip_bomb = raw_batch(bomb_payload(GZIP, 256 << 20), 1, GZIP)
        assert int(_produce(r, "compacted", gzip_bomb).error_code) == 0  # valid data, as for Kafka

        # the acknowledged record is still there, the broker serves, memory and log are clean
        assert _latest(r, "kept") == 1
        _api_versions_ok(b.port)
        assert b.proc is not None
        peak = _vm_hwm_mb(b.proc.pid)
        print(f"fuzz outcomes {dict(outcomes)}; broker peak RSS {peak:.0f} MB")
        assert peak < 768
        r.close()
    finally:
        rc = b.stop()
    log = b.log_path.read_text(errors="replace")
    assert rc == 0, log[-3000:]
    assert "Traceback" not in log
    assert " ERROR " not in log, [ln for ln in log.splitlines() if " ERROR " in ln][:5]
