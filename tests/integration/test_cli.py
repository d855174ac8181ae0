"""The ``strom`` CLI as a subprocess against real Kafka-compatible brokers.

Brokers: tansu (Rust, from the compat cache), librdkafka's mock cluster (produce/consume only:
it has no CreateTopics), and ``strom serve``. A broker whose binary is missing is skipped with
the reason.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

COMPAT = Path(os.environ.get("STROM_COMPAT_HOME", Path.home() / ".cache" / "strom-compat"))
TANSU = COMPAT / "bin" / "tansu"
COMPAT_PY = COMPAT / "venv" / "bin" / "python"
REPO = Path(__file__).resolve().parents[2]
COMPAT_DIR = Path(os.environ.get("STROM_COMPAT_DIR", REPO.parent / "shared" / "compat"))  # ../shared/compat
MOCK_SCRIPT = COMPAT_DIR / "mock_broker.py"
STROM = shutil.which("strom", path=str(Path(sys.executable).parent)) or "strom"


@dataclass
class Broker:
    kind: str
    bootstrap: str
    admin: bool = True  # supports CreateTopics/DeleteTopics


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("broker did not listen in time")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def tansu() -> Iterator[Broker]:
    if not TANSU.exists():
        pytest.skip(f"tansu not found at {TANSU} (run ../shared/compat/setup.sh)")
    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            str(TANSU),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_port(port, proc)
        yield Broker("tansu", f"127.0.0.1:{port}")
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def strom_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    try:
        import strom.server.broker  # noqa: F401
    except ImportError as e:
        pytest.skip(f"strom broker not importable yet: {e}")
    from strom.testing.broker_process import BrokerProcess

    b = BrokerProcess(tmp_path_factory.mktemp("cli") / "data")
    b.start()
    try:
        yield Broker("strom", b.bootstrap)
    finally:
        b.stop()


@pytest.fixture(scope="module")
def mock() -> Iterator[Broker]:
    if not COMPAT_PY.exists() or not MOCK_SCRIPT.exists():
        pytest.skip(f"librdkafka mock broker needs {COMPAT_PY} and {MOCK_SCRIPT}")
    proc = subprocess.Popen(
        [str(COMPAT_PY), str(MOCK_SCRIPT), "--topic", "mock3:3", "--seconds", "600"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().decode().strip()
    if not line:
        _stop(proc)
        pytest.skip("mock broker did not start")
    try:
        yield Broker("mock", line.split(",")[0], admin=False)
    finally:
        _stop(proc)


@pytest.fixture(params=["tansu", "strom"])
def broker(request: pytest.FixtureRequest) -> Broker:
    b: Broker = request.getfixturevalue("tansu" if request.param == "tansu" else "strom_broker")
    return b


def cli(*args: str, stdin: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([STROM, *args], input=stdin, capture_output=True, timeout=timeout, check=False)


def ok(*args: str, stdin: bytes | None = None) -> str:
    r = cli(*args, stdin=stdin)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout.decode()


def _lines(n: int, tag: str) -> list[tuple[str, str, str]]:
    return [(f"key{i % 7}", f"{tag}-value-{i}", f"{i}") for i in range(n)]


def _round_trip(b: Broker, topic: str, compression: str, n: int = 200) -> None:
    data = _lines(n, compression)
    stdin = "".join(f"n:{idx}\t{k}\t{v}\n" for k, v, idx in data).encode()
    ok(
        "produce",
        "--bootstrap-server",
        b.bootstrap,
        "--topic",
        topic,
        "--compression-type",
        compression,
        "--property",
        "parse.headers=true",
        "--property",
        "parse.key=true",
        "--header",
        "src=cli,codec=" + compression,
        stdin=stdin,
    )
    out = ok(
        "consume",
        "--bootstrap-server",
        b.bootstrap,
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        str(n),
        "--timeout-ms",
        "20000",
        "--property",
        "print.key=true",
        "--property",
        "print.headers=true",
        "--property",
        "print.partition=true",
        "--property",
        "print.offset=true",
    )
    got = [line.split("\t") for line in out.splitlines()]
    assert len(got) == n
    seen: dict[str, list[int]] = {}
    by_value = {}
    for part, off, headers, key, value in got:
        assert part.startswith("Partition:") and off.startswith("Offset:")
        by_value[value] = (key, headers, int(part.split(":")[1]))
        seen.setdefault(key, []).append(int(value.rsplit("-", 1)[1]))
    for k, v, idx in data:
        key, headers, _ = by_value[v]
        assert key == k
        assert headers == f"n:{idx},src:cli,codec:{compression}"
    # one key -> one partition, and per-key order is preserved
    for key, values in seen.items():
        assert values == sorted(values), key
        assert len({by_value[f"{compression}-value-{i}"][2] for i in values}) == 1


def test_round_trip(broker: Broker) -> None:
    topic = f"cli-rt-{uuid.uuid4().hex[:8]}"
    b = broker.bootstrap
    assert (
        ok(
            "topics",
            "--bootstrap-server",
            b,
            "create",
            "--topic",
            topic,
            "--partitions",
            "3",
            "--replication-factor",
            "1",
        ).strip()
        == f"Created topic {topic}."
    )
    assert topic in ok("topics", "--bootstrap-server", b, "list").split()
    desc = ok("topics", "--bootstrap-server", b, "--describe", "--topic", topic).splitlines()
    assert (
        desc[0].startswith(f"Topic: {topic}\tTopicId: ")
        and "\tPartitionCount: 3\tReplicationFactor: 1\t" in desc[0]
    )
    assert [line.split("\t")[2] for line in desc[1:]] == ["Partition: 0", "Partition: 1", "Partition: 2"]
    ok_time = time.monotonic()
    _round_trip(broker, topic, "none")
    assert time.monotonic() - ok_time < 60
    r = cli("topics", "--bootstrap-server", b, "create", "--topic", topic)
    assert r.returncode == 1 and b"already exists" in r.stderr and b"Traceback" not in r.stderr
    assert (
        cli("topics", "--bootstrap-server", b, "create", "--topic", topic, "--if-not-exists").returncode == 0
    )
    ok("topics", "--bootstrap-server", b, "delete", "--topic", topic)
    for _ in range(50):  # deletion may be asynchronous
        if topic not in ok("topics", "--bootstrap-server", b, "list").split():
            break
        time.sleep(0.1)
    else:
        pytest.fail("topic still listed after delete")
    r = cli("topics", "--bootstrap-server", b, "describe", "--topic", topic)
    assert r.returncode == 1 and b"does not exist" in r.stderr


@pytest.mark.parametrize("compression", ["gzip", "snappy", "lz4", "zstd"])
def test_compression_round_trip(broker: Broker, compression: str) -> None:
    topic = f"cli-{compression}-{uuid.uuid4().hex[:8]}"
    ok("topics", "--bootstrap-server", broker.bootstrap, "create", "--topic", topic, "--partitions", "2")
    _round_trip(broker, topic, compression, n=300)


def test_partition_offset_and_timestamp_format(broker: Broker) -> None:
    topic = f"cli-p-{uuid.uuid4().hex[:8]}"
    b = broker.bootstrap
    ok("topics", "--bootstrap-server", b, "create", "--topic", topic, "--partitions", "2")
    ok(
        "produce",
        "--bootstrap-server",
        b,
        "--topic",
        topic,
        "--partition",
        "1",
        "--key-separator",
        ":",
        stdin=b"a:1\nb:2\nc:3\n",
    )
    out = ok(
        "consume",
        "--bootstrap-server",
        b,
        "--topic",
        topic,
        "--partition",
        "1",
        "--offset",
        "1",
        "--max-messages",
        "2",
        "--timeout-ms",
        "20000",
        "--property",
        "print.timestamp=true",
        "--property",
        "print.key=true",
        "--property",
        "key.separator=|",
    )
    lines = out.splitlines()
    assert [line.split("|", 1)[1] for line in lines] == ["b|2", "c|3"]
    assert all(line.startswith("CreateTime:") for line in lines)
    # nothing in partition 0: times out cleanly with exit 0
    r = cli(
        "consume",
        "--bootstrap-server",
        b,
        "--topic",
        topic,
        "--partition",
        "0",
        "--from-beginning",
        "--timeout-ms",
        "1000",
    )
    assert r.returncode == 0 and r.stdout == b"" and b"Processed a total of 0 messages" in r.stderr


def test_errors_are_one_line(broker: Broker) -> None:
    b = broker.bootstrap
    for args in (
        # (produce creates a missing topic where the broker allows it, as Kafka's console producer
        # does: see test_cli_console_tools.py)
        ("consume", "--bootstrap-server", b, "--topic", "no-such-topic-x", "--timeout-ms", "500"),
        ("topics", "--bootstrap-server", b, "delete", "--topic", "no-such-topic-x"),
    ):
        r = cli(*args, stdin=b"x\n")
        assert r.returncode == 1, args
        assert b"does not exist" in r.stderr and b"Traceback" not in r.stderr
        assert r.stderr.decode().count("\n") == 1, r.stderr


def test_unreachable_broker() -> None:
    r = cli("topics", "--bootstrap-server", f"127.0.0.1:{_free_port()}", "list")
    assert r.returncode == 1 and b"no broker reachable" in r.stderr and b"Traceback" not in r.stderr


def test_mock_cluster_produce_consume(mock: Broker) -> None:
    n = 50
    stdin = "".join(f"k{i}\tv{i}\n" for i in range(n)).encode()
    ok(
        "produce",
        "--bootstrap-server",
        mock.bootstrap,
        "--topic",
        "mock3",
        "--property",
        "parse.key=true",
        "--compression-type",
        "lz4",
        stdin=stdin,
    )
    out = ok(
        "consume",
        "--bootstrap-server",
        mock.bootstrap,
        "--topic",
        "mock3",
        "--from-beginning",
        "--max-messages",
        str(n),
        "--timeout-ms",
        "20000",
        "--property",
        "print.key=true",
    )
    assert sorted(out.splitlines()) == sorted(f"k{i}\tv{i}" for i in range(n))
