"""The interactive-query state server (strom.streams.serve) on a real broker: 2 and 3 server
instances as subprocesses, data produced with confluent-kafka (murmur2 partitioner, as Java
clients), every answer checked against a reference computed in Python from the produced
records: the final value, and for every answer the value *as of the offset it claims*."""

from __future__ import annotations

import base64
import http.client
import json
import os
import random
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from strom.client.partitioner import partition_for_key  # noqa: E402
from strom.streams.iq_store import windowed_key  # noqa: E402
from strom.testing.broker_process import BrokerProcess, free_port  # noqa: E402

pytestmark = pytest.mark.integration
SRC = str(Path(__file__).resolve().parents[2] / "src")
PARTS = 6
WPARTS = 4
WSIZE = 60_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(
        tmp_path_factory.mktemp("iq") / "data", overrides=["group.initial.rebalance.delay.ms=0"]
    ) as b:
        yield b


class Instance:
    def __init__(self, broker: BrokerProcess, app: str, topic: str, wtopic: str, log_dir: Path,
                 *extra: str) -> None:
        self.port = free_port()
        self.server = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.server}"
        self.log = log_dir / f"iq-{self.port}.log"
        env = {**os.environ, "PYTHONPATH": SRC}
        with open(self.log, "wb") as f:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "strom.streams.serve", "--bootstrap-server", broker.bootstrap,
                 "--application-id", app, "--application-server", self.server,
                 "--table", f"t={topic}:json", "--windowed-table", f"w={wtopic}:string@{WSIZE}",
                 "--session-timeout-ms", "6000", "--metadata-refresh-ms", "300", *extra],
                stdout=f, stderr=subprocess.STDOUT, env=env)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


def get(url: str) -> tuple[int, dict[str, Any], dict[str, str]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers)
    except (ConnectionError, urllib.error.URLError):
        return 0, {}, {}


class Reference:
    """Every produced record with its offset, per partition."""

    def __init__(self) -> None:
        self.log: dict[int, list[tuple[int, str, Any]]] = {}
        self.wlog: dict[int, list[tuple[int, str, int, str | None]]] = {}

    def final(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for recs in self.log.values():
            for _, k, v in sorted(recs):
                if v is None:
                    out.pop(k, None)
                else:
                    out[k] = v
        return out

    def as_of(self, key: str, partition: int, position: int) -> Any:
        val = None
        for off, k, v in sorted(self.log.get(partition, [])):
            if off < position and k == key:
                val = v
        return val

    def windows_as_of(self, key: str, partition: int, position: int) -> dict[int, str]:
        out: dict[int, str] = {}
        for off, k, start, v in sorted(self.wlog.get(partition, [])):
            if off < position and k == key:
                if v is None:
                    out.pop(start, None)
                else:
                    out[start] = v
        return out


def create_topics(broker: BrokerProcess, *topics: tuple[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    fs = admin.create_topics([NewTopic(t, n, 1, config={"cleanup.policy": "compact"}) for t, n in topics])
    for f in fs.values():
        f.result(30)


def produce(broker: BrokerProcess, ref: Reference, topic: str, wtopic: str, rng: random.Random,
            n: int, keys: int) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random", "linger.ms": 5})

    def record(k: str, v: Any) -> Any:
        def cb(err: Any, msg: Any) -> None:
            assert err is None, err
            ref.log.setdefault(msg.partition(), []).append((msg.offset(), k, v))
        return cb

    def wrecord(k: str, start: int, v: str | None) -> Any:
        def cb(err: Any, msg: Any) -> None:
            assert err is None, err
            ref.wlog.setdefault(msg.partition(), []).append((msg.offset(), k, start, v))
        return cb

    for i in range(n):
        k = f"k{rng.randrange(keys):04d}"
        v = None if rng.random() < 0.15 else {"n": i, "k": k}
        p.produce(topic, key=k.encode(), value=None if v is None else json.dumps(v).encode(),
                  on_delivery=record(k, v))
        if i % 3 == 0:
            wk = f"w{rng.randrange(20):02d}"
            start = rng.randrange(10) * WSIZE
            wv = None if rng.random() < 0.1 else f"c{i}"
            p.produce(wtopic, key=windowed_key(wk.encode(), start), value=None if wv is None else wv.encode(),
                      partition=partition_for_key(wk.encode(), WPARTS), on_delivery=wrecord(wk, start, wv))
        p.poll(0)
    assert p.flush(30) == 0


def check_answer(
    ref: Reference, key: str, status: int, body: dict[str, Any], headers: dict[str, str]
) -> bool:
    """Asserts the answer is right as of the position it names (or a clear 503); returns whether
    it was an answer (200/404)."""
    if status == 503:
        assert headers.get("Retry-After"), body
        assert "try again" in body["error"], body
        return False
    assert status in (200, 404), (status, body)
    pos = body["position"]
    assert pos["partition"] == partition_for_key(key.encode(), PARTS)
    expected = ref.as_of(key, pos["partition"], pos["offset"])
    if expected is None:
        assert status == 404 and body["found"] is False, (key, body)
    else:
        assert status == 200 and body["value"] == expected, (key, body, expected)
    return True


def converge(ref: Reference, urls: list[str], keys: list[str], timeout: float = 90.0) -> dict[str, int]:
    """Ask every key of every instance until all answer the final reference; every answer on the
    way is checked against the reference as of its position."""
    final = ref.final()
    deadline = time.monotonic() + timeout
    stats = {"answers": 0, "unavailable": 0, "forwarded": 0, "standby": 0}
    pending = {(u, k) for u in urls for k in keys}
    while pending:
        assert time.monotonic() < deadline, f"{len(pending)} pairs not converged: {sorted(pending)[:5]}"
        for u, k in sorted(pending):
            status, body, headers = get(f"{u}/tables/t/keys/{k}")
            if status == 0:
                continue
            if check_answer(ref, k, status, body, headers):
                stats["answers"] += 1
                stats["forwarded"] += "forwarded_by" in body
                stats["standby"] += bool(body.get("standby"))
                if (body.get("value") if status == 200 else None) == final.get(k):
                    pending.discard((u, k))
            else:
                stats["unavailable"] += 1
        time.sleep(0.05)
    return stats


def wait_owners(insts: list[Instance], timeout: float = 60.0) -> None:
    """Until the group is stable with every instance owning partitions (range assignor: each of
    2 or 3 members gets some of the 6)."""
    want = {i.server for i in insts}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        owners = set()
        for p in range(PARTS):
            key = next(k for k in keyspace(500) if partition_for_key(k.encode(), PARTS) == p)
            status, body, _ = get(f"{insts[0].url}/metadata/t/{key}")
            owners.add(body.get("active_host") if status == 200 else None)
        if owners == want:
            return
        time.sleep(0.2)
    raise AssertionError(f"group never assigned partitions to all of {want}")


def keyspace(n: int) -> list[str]:
    return [f"k{i:04d}" for i in range(n)]


def test_two_instances_lookup_range_windows(broker: BrokerProcess, tmp_path: Path) -> None:
    topic, wtopic = "iq2-t", "iq2-w"
    create_topics(broker, (topic, PARTS), (wtopic, WPARTS))
    ref = Reference()
    rng = random.Random(2)
    produce(broker, ref, topic, wtopic, rng, 3000, 200)
    # a bytes-keyed, bytes-valued table too (keys in the URL are base64url, values base64)
    create_topics(broker, ("iq2-b", PARTS))
    bref: dict[bytes, bytes] = {}
    bp = Producer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random"})
    for _ in range(300):
        k, v = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 6))), rng.randbytes(10)
        bref[k] = v
        bp.produce("iq2-b", key=k, value=v)
    assert bp.flush(30) == 0
    insts = [Instance(broker, "iq2", topic, wtopic, tmp_path, "--table", "b=iq2-b:bytes:bytes")
             for _ in range(2)]
    try:
        urls = [i.url for i in insts]
        wait_owners(insts)
        stats = converge(ref, urls, keyspace(200))
        assert stats["forwarded"] > 0, stats  # half the keys live on the other instance
        final = ref.final()
        # range over all partitions of both instances, from either instance
        for u in urls:
            status, body, _ = get(f"{u}/tables/t/range?from=k0050&to=k0150")
            assert status == 200, body
            want = sorted((k, v) for k, v in final.items() if "k0050" <= k <= "k0150")
            assert [(e["key"], e["value"]) for e in body["entries"]] == want
            assert sorted(p["partition"] for p in body["positions"]) == list(range(PARTS))
            assert {p["served_by"] for p in body["positions"]} == {i.server for i in insts}
        # window fetches: each answer equals the reference as of its position
        for u in urls:
            for wk in (f"w{i:02d}" for i in range(20)):
                status, body, _ = get(f"{u}/tables/w/windows/{wk}?from={2 * WSIZE}&to={7 * WSIZE}")
                assert status == 200, body
                pos = body["position"]
                assert pos["partition"] == partition_for_key(wk.encode(), WPARTS)
                want_w = ref.windows_as_of(wk, pos["partition"], pos["offset"])
                got = {w["start"]: w["value"] for w in body["windows"]}
                assert got == {s: v for s, v in want_w.items() if 2 * WSIZE <= s <= 7 * WSIZE}
                assert all(w["end"] == w["start"] + WSIZE for w in body["windows"])
        # metadata: the partition producers use, and an owner among the instances
        for k in keyspace(20):
            status, body, _ = get(f"{urls[0]}/metadata/t/{k}")
            assert status == 200, body
            assert body["partition"] == partition_for_key(k.encode(), PARTS)
            assert body["active_host"] in {i.server for i in insts}
        for u in urls:
            for k, v in bref.items():
                b64 = base64.urlsafe_b64encode(k).decode().rstrip("=")
                deadline = time.monotonic() + 30
                while (answer := get(f"{u}/tables/b/keys/{b64}"))[0] == 503 and time.monotonic() < deadline:
                    time.sleep(0.1)  # its partitions may still be restoring
                status, body, _ = answer
                assert status == 200, body
                assert base64.b64decode(body["value"]) == v and base64.b64decode(body["key"]) == k
                assert body["position"]["partition"] == partition_for_key(k, PARTS)
        # live updates (and more tombstones) are reflected, consistently with their offsets
        produce(broker, ref, topic, wtopic, rng, 1000, 200)
        converge(ref, urls, keyspace(200))
        # bad requests are clear errors
        assert get(f"{urls[0]}/tables/nope/keys/x")[0] == 404
        assert get(f"{urls[0]}/tables/w/keys/x")[0] == 400
        assert get(f"{urls[0]}/tables/w/windows/w01?from=abc")[0] == 400
        assert get(f"{urls[0]}/nothing")[0] == 404
        conn = http.client.HTTPConnection("127.0.0.1", insts[0].port, timeout=10)
        conn.request("POST", "/tables", body=b"{}")
        resp = conn.getresponse()
        assert resp.status == 405 and "GET only" in json.loads(resp.read())["error"]
        conn.close()
        # an absent key is a 404 that still names the position it is consistent with
        status, body, _ = get(f"{urls[0]}/tables/t/keys/{urllib.parse.quote('no such/key', safe='')}")
        assert status == 404 and body["found"] is False and "offset" in body["position"]
        status, body, _ = get(f"{urls[0]}/tables")
        assert status == 200 and {t["name"] for t in body["tables"]} == {"t", "w", "b"}
    finally:
        for i in insts:
            i.stop()


def test_three_instances_kill_one_rebalance(broker: BrokerProcess, tmp_path: Path) -> None:
    topic, wtopic = "iq3-t", "iq3-w"
    create_topics(broker, (topic, PARTS), (wtopic, WPARTS))
    ref = Reference()
    rng = random.Random(3)
    produce(broker, ref, topic, wtopic, rng, 3000, 150)
    insts = [Instance(broker, "iq3", topic, wtopic, tmp_path) for _ in range(3)]
    try:
        wait_owners(insts)
        converge(ref, [i.url for i in insts], keyspace(150))
        insts[1].kill()
        survivors = [insts[0].url, insts[2].url]
        produce(broker, ref, topic, wtopic, rng, 500, 150)
        stats = converge(ref, survivors, keyspace(150), timeout=120)
        assert stats["answers"] > 0
        # after the rebalance the survivors own all partitions between them
        owners = set()
        for k in keyspace(150):
            status, body, _ = get(f"{survivors[0]}/metadata/t/{k}")
            assert status == 200, body
            owners.add(body["active_host"])
        assert owners == {insts[0].server, insts[2].server}
    finally:
        for i in insts:
            i.stop()


def test_standby_answers_flagged_when_owner_dies(broker: BrokerProcess, tmp_path: Path) -> None:
    topic, wtopic = "iqs-t", "iqs-w"
    create_topics(broker, (topic, PARTS), (wtopic, WPARTS))
    ref = Reference()
    rng = random.Random(4)
    produce(broker, ref, topic, wtopic, rng, 2000, 100)
    # a long session timeout: after the kill the group still names the dead instance as owner
    extra = ("--num-standby-replicas", "1", "--session-timeout-ms", "45000")
    insts = [Instance(broker, "iqs", topic, wtopic, tmp_path, *extra) for _ in range(2)]
    try:
        wait_owners(insts)
        converge(ref, [i.url for i in insts], keyspace(100))
        dead_owned = [k for k in keyspace(100)
                      if get(f"{insts[0].url}/metadata/t/{k}")[1]["active_host"] == insts[1].server]
        assert dead_owned
        insts[1].kill()
        final = ref.final()
        for k in dead_owned:
            status, body, headers = get(f"{insts[0].url}/tables/t/keys/{k}")
            assert check_answer(ref, k, status, body, headers)
            assert body["standby"] is True and body["served_by"] == insts[0].server
            assert body.get("value") == final.get(k)
    finally:
        for i in insts:
            i.stop()


def test_restoring_answers_are_503_or_right(broker: BrokerProcess, tmp_path: Path) -> None:
    """Queries from the moment the instance starts: each is a 503 with Retry-After or an answer
    right as of its offset; none wrong."""
    topic, wtopic = "iqr-t", "iqr-w"
    create_topics(broker, (topic, PARTS), (wtopic, WPARTS))
    ref = Reference()
    produce(broker, ref, topic, wtopic, random.Random(5), 20000, 50)
    # small fetches make the restore take a while, so queries arrive while it runs
    inst = Instance(broker, "iqr", topic, wtopic, tmp_path,
                    "--consumer-property", "max.partition.fetch.bytes=512")
    try:
        stats = converge(ref, [inst.url], keyspace(50))
        assert stats["answers"] >= 50
        assert stats["unavailable"] > 0, stats  # the restore was seen and answered 503, not wrong
    finally:
        inst.stop()


def test_cli_bad_table_spec_is_a_clear_error(broker: BrokerProcess) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "strom", "streams", "serve", "--bootstrap-server", broker.bootstrap,
         "--application-id", "x", "--application-server", f"127.0.0.1:{free_port()}",
         "--table", "t=topic:yaml"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC}, timeout=60)
    assert r.returncode == 2
    assert "unknown value format 'yaml'" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "strom.streams.serve", "--bootstrap-server", broker.bootstrap,
         "--application-id", "x", "--application-server", f"127.0.0.1:{free_port()}",
         "--table", "t=no-such-topic", "--consumer-property", "fetch.max.bytes=10"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC}, timeout=60)
    assert r.returncode == 2 and "consumer configuration" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
