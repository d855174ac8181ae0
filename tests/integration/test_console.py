"""``strom console`` against a real broker: a real ``strom console`` process (uvicorn), pages read
over HTTP, data put in with confluent-kafka; mutations through the console's forms; read-only mode;
basic auth; an unreachable cluster; the scan cap of a search; a huge value cut in the list; ACLs.
(In a real browser: test_console_browser.py.)"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.testing.broker_process import BrokerProcess, free_port

pytestmark = pytest.mark.integration

confluent_kafka = pytest.importorskip("confluent_kafka")


class Console:
    def __init__(self, bootstrap: str, *extra: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (a pipe nobody reads could fill and block it)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "strom", "console", "--bootstrap-server", bootstrap,
             "--port", str(self.port), *extra],
            stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(self.log.read().decode())
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.1)
        self.close()
        raise RuntimeError("console did not start")

    def request(self, path: str, form: dict[str, str] | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, str]:
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def get(self, path: str) -> str:
        status, body = self.request(path)
        assert status == 200, body
        assert "Traceback" not in body
        return body

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("console") / "data",
                      overrides=["group.initial.rebalance.delay.ms=0"])
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def console(cluster: BrokerProcess) -> Iterator[Console]:
    c = Console(cluster.bootstrap, "--scan-cap", "30")
    try:
        yield c
    finally:
        c.close()


def _produce(b: BrokerProcess, topic: str, values: list[bytes], partition: int = 0) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap, "message.max.bytes": 2_000_000})
    for i, v in enumerate(values):
        p.produce(topic, v, key=f"key-{i}".encode(), partition=partition, headers={"trace": f"t{i}".encode()})
    assert p.flush(30) == 0


def test_overview_topics_topic_messages_groups(cluster: BrokerProcess, console: Console) -> None:
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    group = f"billing-{uuid.uuid4().hex[:6]}"
    _produce(cluster, topic, [json.dumps({"order": i}).encode() for i in range(12)])
    c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    c.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 4)], asynchronous=False)
    c.close()

    overview = console.get("/")
    assert 'id="brokers">1<' in overview
    assert '<span class="tag">controller</span>' in overview
    assert 'id="offline">0<' in overview and 'id="under-replicated">0<' in overview

    topics = console.get("/topics")
    assert f">{topic}</a>" in topics
    row = topics[topics.index(f">{topic}</a>"):]
    assert "<td>1</td><td>1</td><td>12</td>" in row.replace("\n", "")  # partitions, replication, messages

    page = console.get(f"/topics/{topic}")
    assert "<td>0</td><td>12</td><td>12</td>" in page.replace("\n", "")  # earliest, latest, messages
    assert "cleanup.policy" in page and "DEFAULT_CONFIG" in page

    newest = console.get(f"/topics/{topic}/messages?limit=3")
    offsets = [int(x.split("</td>")[0]) for x in newest.split("<tr><td>")[1:]]
    assert offsets == [11, 10, 9]
    assert "&#34;order&#34;: 11" in newest  # pretty JSON
    assert "trace=t11" in newest  # headers
    oldest = console.get(f"/topics/{topic}/messages?order=oldest&limit=2")
    assert [int(x.split("</td>")[0]) for x in oldest.split("<tr><td>")[1:]] == [0, 1]
    found = console.get(f"/topics/{topic}/messages?q=key-7")
    assert [int(x.split("</td>")[0]) for x in found.split("<tr><td>")[1:]] == [7]

    topics = console.get("/topics")  # the groups reading each topic, with their lag
    row = topics[topics.index(f">{topic}</a>"):].split("</tr>")[0]
    assert f'<a href="/groups/{group}">{group}</a> (8)' in row
    groups = console.get("/groups")
    assert f">{group}</a>" in groups
    detail = console.get(f"/groups/{group}")
    assert 'id="total-lag">8<' in detail  # 12 - 4
    assert '<td class="lag">8</td>' in detail


def test_create_produce_delete_through_the_forms(cluster: BrokerProcess, console: Console) -> None:
    topic = f"made-{uuid.uuid4().hex[:6]}"
    status, body = console.request("/topics", {"name": topic, "partitions": "2", "replication_factor": "1"})
    assert status == 200 and f"Topic {topic}" in body  # redirected to the new topic's page
    assert body.count('<tr><td><a href="/topics/' + topic + '/messages?partition=') == 2
    status, body = console.request(f"/topics/{topic}/produce",
                                   {"partition": "1", "key": "k", "value": "hello console", "headers": "a=b"})
    assert status == 200 and "hello console" in body and "a=b" in body
    c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "check",
                                  "auto.offset.reset": "earliest"})
    c.assign([confluent_kafka.TopicPartition(topic, 1, 0)])
    msg = c.poll(15)
    c.close()
    assert msg is not None and msg.value() == b"hello console" and msg.key() == b"k"
    assert msg.headers() == [("a", b"b")]
    # alter a config, then back to the default; grow the partitions
    status, body = console.request(f"/topics/{topic}/alter", {"config": "retention.ms", "value": "3600000"})
    assert status == 200
    row = '<td>retention.ms</td><td>3600000</td><td class="ok">DYNAMIC_TOPIC_CONFIG</td>'
    assert row in body.replace("\n", "")
    status, body = console.request(f"/topics/{topic}/alter", {"config": "retention.ms", "delete": "1"})
    assert "<td>retention.ms</td><td>604800000</td>" in body.replace("\n", "")
    status, body = console.request(f"/topics/{topic}/alter", {"config": "retention.ms", "value": "soon"})
    assert status == 502 and "retention.ms" in body
    status, body = console.request(f"/topics/{topic}/alter", {"partitions": "3"})
    assert status == 200 and body.count(f'<tr><td><a href="/topics/{topic}/messages?partition=') == 3
    # a delete needs the name typed
    status, body = console.request(f"/topics/{topic}/delete", {"confirm": "wrong"})
    assert status == 400 and "type its name" in body
    assert f">{topic}</a>" in console.get("/topics")
    status, body = console.request(f"/topics/{topic}/delete", {"confirm": topic})
    assert status == 200 and f">{topic}</a>" not in body
    # bad input: a clear page, no traceback
    status, body = console.request("/topics", {"name": "x", "partitions": "many", "replication_factor": "1"})
    assert status == 400 and "partitions must be a whole number" in body and "Traceback" not in body
    status, body = console.request("/topics/no-such-topic")
    assert status == 404 and "does not exist" in body


def test_search_stops_at_the_scan_cap_and_huge_values_are_cut(
    cluster: BrokerProcess, console: Console
) -> None:
    topic = f"big-{uuid.uuid4().hex[:6]}"
    _produce(cluster, topic, [b"x" * 10] * 50 + [b"y" * 100_000])
    body = console.get(f"/topics/{topic}/messages?q=nothing-matches&order=oldest")
    assert 'id="capped"' in body and "scan cap of 30" in body and "30 scanned (offsets 0..29)" in body
    # the search goes on from where it stopped, to the end without the cap
    more = _continue(body)
    assert "offset=30" in more and "order=oldest" in more
    body = console.get(f"/topics/{topic}/messages?{more}")
    assert 'id="capped"' not in body and "21 scanned (offsets 30..50)" in body
    # newest first: the newest 30, then the older ones
    body = console.get(f"/topics/{topic}/messages?q=nothing-matches")
    assert 'id="capped"' in body and "(offsets 21..50)" in body
    more = _continue(body)
    assert "before=21" in more
    body = console.get(f"/topics/{topic}/messages?{more}")
    assert 'id="capped"' not in body and "21 scanned (offsets 0..20)" in body
    body = console.get(f"/topics/{topic}/messages?{more.replace('q=nothing-matches', 'q=x')}")
    assert [int(x.split("</td>")[0]) for x in body.split("<tr><td>")[1:]][:2] == [20, 19]
    body = console.get(f"/topics/{topic}/messages?limit=1")
    assert "100000 bytes, cut" in body
    assert body.count("y") < 5000  # not the whole value
    status, dl = console.request(f"/topics/{topic}/download?partition=0&offset=50")
    assert status == 200
    assert json.loads(dl.splitlines()[0])["value"] == "y" * 100_000


def _continue(body: str) -> str:
    """The query of the "continue the search" link."""
    href = body.split('id="continue" href="')[1].split('"')[0].replace("&amp;", "&")
    assert href.startswith("/topics/") and "/messages?" in href
    return href.split("?", 1)[1]


def _offsets(body: str) -> list[int]:
    return [int(x.split("</td>")[0]) for x in body.split("<tr><td>")[1:]]


PAUSE = {"STROM_CONSOLE_SCAN_PAUSE_MS": "400"}  # a search pauses 0.4 s every 500 records (a test hook)


@pytest.fixture(scope="module")
def big_topic(cluster: BrokerProcess) -> str:
    topic = f"large-{uuid.uuid4().hex[:6]}"
    _produce(cluster, topic, [b"v" * 20] * 4000)  # keys key-0 .. key-3999
    return topic


def _poll(console: Console, job_url: str) -> tuple[list[tuple[int, int]], str]:
    """Poll a search's progress fragment (as HTMX does) until its answer comes: the
    (scanned, matches) seen on the way, and the answer."""
    seen: list[tuple[int, int]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        body = console.get(job_url)
        if 'id="search-progress"' not in body:
            return seen, body
        assert 'hx-trigger="every 500ms"' in body and "<html" not in body  # a fragment, polling on
        scanned = int(body.split('class="scanned">')[1].split("<")[0])
        matches = int(body.split('class="matches">')[1].split("<")[0])
        assert int(body.split('class="to-scan">')[1].split("<")[0]) == 3500
        seen.append((scanned, matches))
        time.sleep(0.1)
    raise AssertionError("the search did not finish")


def test_search_shows_its_progress_while_it_runs(cluster: BrokerProcess, big_topic: str) -> None:
    c = Console(cluster.bootstrap, "--scan-cap", "3500", env=PAUSE)
    try:
        t0 = time.monotonic()
        body = c.get(f"/topics/{big_topic}/messages?q=key-%5B123%5D999%24&mode=regex&order=oldest")
        # not done within the page's first second: the progress, polled by HTMX
        assert 'id="search-progress"' in body and 'id="message-table"' not in body
        job_url = re.search(r'hx-get="([^"]+)"', body).group(1).replace("&amp;", "&")  # type: ignore[union-attr]
        assert job_url.startswith(f"/topics/{big_topic}/search/") and job_url.endswith("?fragment=1")
        assert 'http-equiv="refresh"' in body  # (without JavaScript the page reloads itself)
        seen, answer = _poll(c, job_url)
        # the scanned count grew while it ran, matches came in on the way
        scanned = [s for s, _ in seen]
        assert scanned == sorted(scanned) and len(set(scanned)) >= 3, seen
        assert 0 < scanned[0] < scanned[-1] < 3500, seen
        assert any(m == 1 for _, m in seen), seen  # key-1999 found before key-2999
        assert time.monotonic() - t0 > 2  # (seven 0.4 s pauses)
        # the answer: the matches, the cap said, a link to go on
        assert 'id="search-results"' in answer and "<html" not in answer
        assert _offsets(answer) == [1999, 2999]
        assert 'id="capped"' in answer and "scan cap of 3500" in answer
        assert "3500 scanned (offsets 0..3499)" in answer
        more = _continue(answer)
        assert "offset=3500" in more and "order=oldest" in more
        # the job's own page (no JavaScript: the refresh target) shows the same answer in full
        full = c.get(job_url.split("?")[0])
        assert "<html" in full and _offsets(full) == [1999, 2999] and 'id="capped"' in full
        # the rest: 500 records, done at once (no progress page)
        body = c.get(f"/topics/{big_topic}/messages?{more}")
        assert 'id="search-progress"' not in body and 'id="capped"' not in body
        assert "500 scanned (offsets 3500..3999)" in body and _offsets(body) == [3999]
        # the matches download as JSON lines (these offsets, not a run from the first)
        href = body.split('download these as JSON lines')[0].rsplit('href="', 1)[1].split('"')[0]
        status, dl = c.request(href.replace("&amp;", "&"))
        assert status == 200 and [json.loads(x)["offset"] for x in dl.splitlines()] == [3999]
    finally:
        c.close()


def test_searches_are_bounded_stoppable_and_time_out(cluster: BrokerProcess, big_topic: str) -> None:
    # 1 s pauses and a 6 s timeout (eight pauses take 8 s): the stop below has ~5 s to arrive
    # before the timeout wins (with 0.4 s pauses and 2.5 s it had ~1.3 s, tight on a busy machine)
    c = Console(cluster.bootstrap, "--read-only", "--max-searches", "1", "--search-timeout", "6",
                env={"STROM_CONSOLE_SCAN_PAUSE_MS": "1000"})
    try:
        query = f"/topics/{big_topic}/messages?q=no-such-thing&order=oldest"
        body = c.get(query)
        # (read-only: a GET link stops it)
        assert 'id="search-progress"' in body and 'method="post"' not in body
        stop = body.split('id="search-stop" href="')[1].split('"')[0].replace("&amp;", "&")
        # one search at a time here: a second is refused while the first runs
        status, refused = c.request(query)
        assert status == 503 and "Too many searches" in refused and "Traceback" not in refused
        # stop the first where it is: its answer, and a link that goes on from there
        stopped = c.get(stop)
        assert 'id="stopped"' in stopped and "was stopped at offset" in stopped
        at = int(stopped.split("was stopped at offset ")[1].split("<")[0])
        assert at % 500 == 0 and 0 < at < 4000
        assert f"{at} scanned (offsets 0..{at - 1})" in stopped and f"offset={at}" in _continue(stopped)
        # now a search may start again; this one runs out of time (6 s < eight 1 s pauses)
        body = c.get(query)
        job_url = re.search(r'hx-get="([^"]+)"', body).group(1).replace("&amp;", "&")  # type: ignore[union-attr]
        deadline = time.monotonic() + 60
        while 'id="search-progress"' in body:
            assert time.monotonic() < deadline
            time.sleep(0.2)
            body = c.get(job_url)
        assert 'id="stopped"' in body and "ran out of time at offset" in body and 'id="continue"' in body
        # a search nobody knows (over and forgotten): a clear page
        status, body = c.request(f"/topics/{big_topic}/search/nope")
        assert status == 404 and "No such search" in body
    finally:
        c.close()


def test_read_only_has_no_mutating_controls(cluster: BrokerProcess) -> None:
    ro = Console(cluster.bootstrap, "--read-only")
    try:
        topic = f"ro-{uuid.uuid4().hex[:6]}"
        _produce(cluster, topic, [b"v"])
        for path in ("/", "/topics", f"/topics/{topic}", f"/topics/{topic}/messages", "/groups", "/security"):
            body = ro.get(path)
            assert 'method="post"' not in body, path
            assert "read-only" in body
        status, _ = ro.request("/topics", {"name": "sneaky", "partitions": "1", "replication_factor": "1"})
        assert status == 403
        status, _ = ro.request(f"/topics/{topic}/delete", {"confirm": topic})
        assert status == 403
        assert f">{topic}</a>" in ro.get("/topics")
    finally:
        ro.close()


def test_basic_auth(cluster: BrokerProcess, tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text("# console users\nalice:s3cret\n")
    c = Console(cluster.bootstrap, "--basic-auth-file", str(users))
    try:
        assert c.request("/")[0] == 401
        bad = base64.b64encode(b"alice:wrong").decode()
        assert c.request("/", headers={"Authorization": f"Basic {bad}"})[0] == 401
        good = base64.b64encode(b"alice:s3cret").decode()
        assert c.request("/", headers={"Authorization": f"Basic {good}"})[0] == 200
    finally:
        c.close()


def test_unreachable_cluster_is_an_error_page() -> None:
    for bootstrap in (f"127.0.0.1:{free_port()}", "no-such-host.invalid:9092"):
        c = Console(bootstrap)
        try:
            for path in ("/", "/topics", "/topics/t/messages?q=x", "/groups"):
                status, body = c.request(path)
                assert status == 502, (bootstrap, path)
                assert "Cannot reach the cluster" in body and bootstrap in body and "Traceback" not in body
        finally:
            c.close()


def test_bad_flags_are_clear_errors(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "strom", "console", "--basic-auth-file", str(tmp_path / "none")],
        capture_output=True, text=True, timeout=60,
    )
    assert r.returncode == 2 and "cannot read --basic-auth-file" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "strom", "console", "--bootstrap-server", "host:notaport",
                        "--port", str(free_port())], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "bootstrap" in r.stderr and "Traceback" not in r.stderr


def test_reset_group_offsets_preview_then_execute_and_delete(
    cluster: BrokerProcess, console: Console
) -> None:
    topic = f"reset-{uuid.uuid4().hex[:6]}"
    group = f"rg-{uuid.uuid4().hex[:6]}"
    _produce(cluster, topic, [b"v"] * 10)
    c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    c.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 7)], asynchronous=False)
    c.close()
    assert 'id="reset"' in console.get(f"/groups/{group}")
    # preview: shift by -5 from 7 -> 2; nothing committed yet
    preview = {"strategy": "shift", "value": "-5", "topic": ""}
    status, body = console.request(f"/groups/{group}/reset", preview)
    assert status == 200 and "Preview" in body
    flat = body.replace("\n", "")
    assert '<td>7</td><td class="new">2</td>' in flat
    assert 'id="total-lag">3<' in console.get(f"/groups/{group}")  # unchanged: 10 - 7
    # out of range is clamped to the log (Kafka's checkOffsetsRange)
    status, body = console.request(f"/groups/{group}/reset", {"strategy": "offset", "value": "99"})
    assert '<td class="new">10</td>' in body.replace("\n", "")
    # execute the previewed reset
    status, body = console.request(f"/groups/{group}/reset",
                                   {"strategy": "earliest", "value": "", "topic": topic, "execute": "1"})
    assert status == 200 and "Offsets reset." in body
    assert 'id="total-lag">10<' in console.get(f"/groups/{group}")
    check = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    (tp,) = check.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=15)
    check.close()
    assert tp.offset == 0
    status, body = console.request(f"/groups/{group}/reset", {"strategy": "sideways"})
    assert status == 400 and "choose a reset" in body
    # delete the group's offsets of one topic (OffsetDelete), its name typed; another topic's stay
    other = f"{topic}-b"
    _produce(cluster, other, [b"v"] * 3)
    c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    c.commit(offsets=[confluent_kafka.TopicPartition(other, 0, 1)], asynchronous=False)
    c.close()
    body = console.get(f"/groups/{group}")
    assert 'id="delete-offsets"' in body and f"<option>{other}</option>" in body
    status, body = console.request(f"/groups/{group}/delete-offsets", {"topic": other, "confirm": "nope"})
    assert status == 400 and "type the topic name" in body
    status, body = console.request(f"/groups/{group}/delete-offsets", {"topic": other, "confirm": other})
    assert status == 200 and f">{other}</a>" not in body and f">{topic}</a>" in body
    check = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    tps = [confluent_kafka.TopicPartition(other, 0), confluent_kafka.TopicPartition(topic, 0)]
    gone, kept = check.committed(tps, timeout=15)
    check.close()
    assert gone.offset == confluent_kafka.OFFSET_INVALID and kept.offset == 0
    status, body = console.request(f"/groups/{group}/delete-offsets", {"topic": other, "confirm": other})
    assert status == 400 and "no committed offsets on" in body
    # delete needs the id typed
    assert console.request(f"/groups/{group}/delete", {"confirm": "nope"})[0] == 400
    status, body = console.request(f"/groups/{group}/delete", {"confirm": group})
    assert status == 200 and f">{group}</a>" not in body


def test_browse_by_time_sizes_and_live_tail(cluster: BrokerProcess, console: Console) -> None:
    topic = f"tail-{uuid.uuid4().hex[:6]}"
    p = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(6):
        p.produce(topic, f"v{i}".encode(), partition=0, timestamp=1_700_000_000_000 + i * 1000)
    assert p.flush(30) == 0
    # from a time: the first record at or after it, oldest first
    body = console.get(f"/topics/{topic}/messages?timestamp=1700000003000&limit=2")
    assert [int(x.split("</td>")[0]) for x in body.split("<tr><td>")[1:]] == [3, 4]
    body = console.get(f"/topics/{topic}/messages?timestamp=2023-11-14T22:13:24Z&limit=1")  # = ...004000
    assert [int(x.split("</td>")[0]) for x in body.split("<tr><td>")[1:]] == [4]
    status, body = console.request(f"/topics/{topic}/messages?timestamp=yesterday")
    assert status == 400 and "timestamp" in body
    # sizes from DescribeLogDirs
    page = console.get(f"/topics/{topic}")
    size = int(page.split('<span id="size">')[1].split("<")[0])
    assert size > 6 * 2
    # live tail: records produced after it started arrive as server-sent events
    url = f"http://127.0.0.1:{console.port}/topics/{topic}/tail?partition=0"
    stream = urllib.request.urlopen(url, timeout=30)
    try:
        assert stream.headers["Content-Type"].startswith("text/event-stream")
        assert stream.readline() == b"event: ready\n"
        assert json.loads(stream.readline().decode()[len("data: "):]) == {"offset": 6}
        assert stream.readline() == b"\n"
        p.produce(topic, b'{"live": true}', key=b"k", partition=0)
        assert p.flush(30) == 0
        line = stream.readline().decode()
        event = json.loads(line[len("data: "):])
        assert event["offset"] == 6 and event["key"] == "k" and event["kind"] == "json"
        assert json.loads(event["value"]) == {"live": True}
    finally:
        stream.close()


def test_search_modes_and_replay(cluster: BrokerProcess, console: Console) -> None:
    topic = f"search-{uuid.uuid4().hex[:6]}"
    values = [json.dumps({"customer": {"id": i, "tier": "gold" if i % 3 == 0 else "basic"}}).encode()
              for i in range(9)]
    _produce(cluster, topic, values)

    def offsets(query: str) -> list[int]:
        body = console.get(f"/topics/{topic}/messages?order=oldest&{query}")
        return [int(x.split("</td>")[0]) for x in body.split("<tr><td>")[1:]]

    assert offsets("q=customer.tier%3Dgold&mode=json") == [0, 3, 6]
    assert offsets("q=customer.id%3D4&mode=json") == [4]
    jsonpath = urllib.parse.quote("$['customer'].id=5")  # JSONPath's spelling
    assert offsets(f"q={jsonpath}&mode=json") == [5]
    assert offsets("q=customer.missing&mode=json") == []
    assert offsets("q=%22id%22%3A+%5B57%5D&mode=regex") == [5, 7]  # "id": [57]
    assert offsets("q=trace%3Dt2&mode=header") == [2]
    assert offsets("q=key-&mode=key") == list(range(9)) and offsets("q=y-8&mode=key") == [8]
    assert offsets("q=customer&mode=key") == [] and offsets("q=customer&mode=text") == list(range(9))
    status, body = console.request(f"/topics/{topic}/messages?q=%28&mode=regex")
    assert status == 400 and "regular expression" in body
    # replay offset 4 to another topic (created by the console first)
    other = f"{topic}-copy"
    assert console.request("/topics", {"name": other, "partitions": "1", "replication_factor": "1"})[0] == 200
    again = {"partition": "0", "offset": "4", "target": other, "target_partition": "0"}
    status, body = console.request(f"/topics/{topic}/replay", again)
    assert status == 200 and "&#34;id&#34;: 4" in body and "trace=t4" in body
    c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "replay-check",
                                  "auto.offset.reset": "earliest"})
    c.assign([confluent_kafka.TopicPartition(other, 0, 0)])
    msg = c.poll(15)
    c.close()
    assert msg is not None and msg.value() == values[4] and msg.key() == b"key-4"
    status, body = console.request(f"/topics/{topic}/replay", again | {"offset": "99"})
    assert status == 400 and "no record at offset 99" in body


def test_metrics_page_charts_the_brokers_metrics(cluster: BrokerProcess, console: Console) -> None:
    assert 'id="no-metrics"' in console.get("/metrics")  # (this console has no --metrics-url)
    url = cluster.http_url + "/metrics"
    m = Console(cluster.bootstrap, "--metrics-url", url, "--metrics-interval", "0.5")
    try:
        topic = f"rate-{uuid.uuid4().hex[:6]}"
        deadline = time.monotonic() + 30
        while True:  # produce between samples until the bytes-in rate shows
            _produce(cluster, topic, [b"z" * 1000] * 20)
            time.sleep(0.6)
            body = m.get("/metrics")
            row = body.split("<th>bytes in/s</th>")[1].split("</tr>")[0]
            if "<polyline" in row and float(row.split('class="now">')[1].split("<")[0]) > 0:
                break
            assert time.monotonic() < deadline, body
        assert cluster.http_url + "/metrics" in body and "last sample failed" not in body
    finally:
        m.close()
    bad = Console(cluster.bootstrap, "--metrics-url", f"http://127.0.0.1:{free_port()}/metrics",
                  "--metrics-interval", "0.2")
    try:
        time.sleep(1)
        assert "last sample failed" in bad.get("/metrics")
    finally:
        bad.close()


def test_time_range_search(cluster: BrokerProcess, console: Console) -> None:
    topic = f"range-{uuid.uuid4().hex[:6]}"
    p = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(10):
        p.produce(topic, f"v{i % 2}".encode(), partition=0, timestamp=1_700_000_000_000 + i * 1000)
    assert p.flush(30) == 0

    def offsets(query: str) -> list[int]:
        body = console.get(f"/topics/{topic}/messages?{query}")
        return [int(x.split("</td>")[0]) for x in body.split("<tr><td>")[1:]]

    # [from, until): offsets 3..6; oldest first from the start of the range
    assert offsets("timestamp=1700000003000&until=1700000007000") == [3, 4, 5, 6]
    # until alone, newest first: the newest records before it
    assert offsets("until=2023-11-14T22:13:25Z&limit=3") == [4, 3, 2]  # until ...005000
    # a search inside a range
    assert offsets("timestamp=1700000002000&until=1700000008000&q=v1") == [3, 5, 7]
    status, body = console.request(f"/topics/{topic}/messages?until=soon")
    assert status == 400 and "timestamp" in body


def test_metrics_page_discovers_the_brokers(cluster: BrokerProcess) -> None:
    m = Console(cluster.bootstrap, "--metrics-port", str(cluster.http_port), "--metrics-interval", "0.3")
    try:
        deadline = time.monotonic() + 30
        while True:
            _produce(cluster, f"disc-{uuid.uuid4().hex[:4]}", [b"z" * 100] * 5)
            body = m.get("/metrics")
            if "<polyline" in body:
                break
            assert time.monotonic() < deadline, body
            time.sleep(0.3)
        # the broker of the metadata (host 127.0.0.1) at the given port, no --metrics-url
        assert f"<h2>http://127.0.0.1:{cluster.http_port}/metrics</h2>" in body
    finally:
        m.close()
    r = subprocess.run([sys.executable, "-m", "strom", "console", "--bootstrap-server", cluster.bootstrap,
                        "--metrics-port", "70000"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--metrics-port 70000 is not a port" in r.stderr


def test_acls_list_create_delete_with_confirmation(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", overrides=[
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:ANONYMOUS"])  # the console's PLAINTEXT connection administers
    b.start()
    c = Console(b.bootstrap)
    ro = Console(b.bootstrap, "--read-only")
    try:
        body = c.get("/security")
        assert 'id="acl-table"' in body and "no ACLs" in body and 'id="add-acl"' in body
        acl = {"action": "create", "resource_type": "TOPIC", "resource_name": "orders",
               "pattern_type": "PREFIXED", "principal": "User:alice", "host": "*", "operation": "READ",
               "permission": "ALLOW"}
        status, body = c.request("/security/acls", acl)  # first: the confirmation
        assert status == 200 and 'id="acl-confirm"' in body and "Yes, add it" in body
        assert "no ACLs" in c.get("/security")  # nothing created yet
        status, body = c.request("/security/acls", acl | {"confirm": "1"})
        row = '<tr class="acl"><td>TOPIC:orders</td><td>PREFIXED</td><td>User:alice</td>'
        assert status == 200 and row in body
        # seen by a real client too
        from confluent_kafka import admin as ck

        admin = ck.AdminClient({"bootstrap.servers": b.bootstrap})
        flt = ck.AclBindingFilter(ck.ResourceType.ANY, None, ck.ResourcePatternType.ANY, None, None,
                                  ck.AclOperation.ANY, ck.AclPermissionType.ANY)
        found = admin.describe_acls(flt).result(30)
        assert [(x.name, x.principal, x.operation.name) for x in found] == [("orders", "User:alice", "READ")]
        # read-only: listed, no controls, POST refused
        body = ro.get("/security")
        assert "User:alice" in body and 'method="post"' not in body
        assert ro.request("/security/acls", acl | {"action": "delete", "confirm": "1"})[0] == 403
        # delete: confirmation, then gone
        gone = acl | {"action": "delete"}
        status, body = c.request("/security/acls", gone)
        assert status == 200 and "Yes, delete it" in body and "User:alice" in body
        status, body = c.request("/security/acls", gone | {"confirm": "1"})
        assert status == 200 and "no ACLs" in body
        assert admin.describe_acls(flt).result(30) == []
        # bad input
        status, body = c.request("/security/acls", acl | {"principal": "alice", "confirm": "1"})
        assert status == 400 and "principal: type:name" in body
        status, body = c.request("/security/acls", acl | {"operation": "FLY"})
        assert status == 400 and "operation: one of" in body
    finally:
        ro.close()
        c.close()
        b.stop()


def test_acls_without_an_authorizer(console: Console) -> None:
    body = console.get("/security")
    assert 'id="acl-error"' in body and "no authorizer" in body


def test_scram_users_page(cluster: BrokerProcess, console: Console) -> None:
    user = f"svc-{uuid.uuid4().hex[:6]}"
    status, body = console.request("/security", {"user": user, "mechanism": "SCRAM-SHA-512",
                                                 "password": "pw-1", "iterations": "8192"})
    assert status == 200 and user in body and "SCRAM-SHA-512 (8192)" in body
    assert 'id="add-user"' in body
    status, body = console.request("/security", {"user": user, "mechanism": "SCRAM-SHA-512", "password": ""})
    assert status == 400 and "needs a password" in body
    status, body = console.request("/security", {"delete": "1", "user": user, "mechanism": "SCRAM-SHA-512",
                                                 "confirm": "other"})
    assert status == 400
    status, body = console.request("/security", {"delete": "1", "user": user, "mechanism": "SCRAM-SHA-512",
                                                 "confirm": user})
    assert status == 200 and f"<td>{user}</td>" not in body


def test_a_search_no_page_polls_is_cancelled(cluster: BrokerProcess, big_topic: str) -> None:
    """The console app in process (its ASGI interface called directly) against the real broker:
    a search whose page went away (nothing polls its progress) is cancelled and frees its slot;
    leaving the app cancels the searches still running."""
    import asyncio

    from strom.console.app import ConsoleSettings, build_app

    async def call(app: Any, path: str, query: str = "") -> tuple[int, str]:
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
                 "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
                 "query_string": query.encode(), "headers": [], "client": ("127.0.0.1", 1),
                 "server": ("127.0.0.1", 80)}
        sent: list[Any] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Any) -> None:
            sent.append(message)

        await app(scope, receive, send)
        return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:]).decode()

    async def main() -> None:
        settings = ConsoleSettings(cluster.bootstrap, max_searches=1, search_abandon_s=1.0, search_wait_s=0.1,
                                   scan_pause_s=0.3)
        app = build_app(settings)
        path, query = f"/topics/{big_topic}/messages", "q=no-such-thing&order=oldest"
        async with app.router.lifespan_context(app):
            status, body = await call(app, path, query)
            assert status == 200 and 'id="search-progress"' in body
            job = body.split('hx-get="')[1].split("?")[0]
            assert (await call(app, path, query))[0] == 503  # the slot is taken
            await asyncio.sleep(2.5)  # nobody polls: cancelled at its next pause after 1 s
            status, body = await call(app, job, "fragment=1")
            assert "No such search" in body
            status, body = await call(app, path, query)  # the slot is free again
            assert status == 200 and 'id="search-progress"' in body
            running = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            assert running  # (this search, and the metrics sampler)
            leaving = time.monotonic()
        # leaving the app cancelled the running search (not waited for its 1 s abandonment)
        assert time.monotonic() - leaving < 0.8
        await asyncio.sleep(0)
        left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
        assert not left, left

    asyncio.run(main())


def test_search_across_all_partitions(cluster: BrokerProcess, console: Console) -> None:
    topic = f"parts-{uuid.uuid4().hex[:6]}"
    assert console.request("/topics", {"name": topic, "partitions": "3", "replication_factor": "1"})[0] == 200
    p = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap})
    base = 1_700_000_000_000
    for i in range(15):
        for part in range(3):  # partition 2's record i is the newest of the three
            p.produce(topic, f"p{part}-{i}".encode(), key=f"k{i}".encode(), partition=part,
                      timestamp=base + i * 10 + part)
    assert p.flush(30) == 0

    def rows(body: str) -> list[tuple[int, int]]:  # (partition, offset) per row
        return [(int(x.split('class="partition">')[1].split("<")[0]), int(x.split("</td>")[0]))
                for x in body.split("<tr><td>")[1:]]

    # newest first, by timestamp across the partitions; this console's cap of 30 is 10 a partition
    body = console.get(f"/topics/{topic}/messages?partition=all&q=k&mode=key")
    assert rows(body)[:4] == [(2, 14), (1, 14), (0, 14), (2, 13)] and len(rows(body)) == 30
    assert "all 3 partitions: 30 shown (by timestamp), 30 scanned, at most 10 per partition" in body
    assert body.count('class="bad capped"') == 3 and 'id="tail"' not in body
    links = [h.replace("&amp;", "&") for h in re.findall(r'class="continue" href="([^"]+)"', body)]
    assert len(links) == 3 and all("before=5" in h for h in links)
    assert [urllib.parse.parse_qs(h.split("?")[1])["partition"] for h in links] == [["0"], ["1"], ["2"]]
    # a continue link searches on in its own partition
    more = console.get(links[1])
    assert _offsets(more) == [4, 3, 2, 1, 0] and "5 scanned (offsets 0..4)" in more
    # oldest first, 4 records: the oldest four of the topic
    body = console.get(f"/topics/{topic}/messages?partition=all&order=oldest&limit=4")
    assert rows(body) == [(0, 0), (1, 0), (2, 0), (0, 1)]
    # the matches download as JSON lines, from their partitions
    href = body.split('id="download-these" href="')[1].split('"')[0].replace("&amp;", "&")
    assert "records=0:0,0:1,1:0,2:0" in href
    status, dl = console.request(href)
    got = [(json.loads(x)["partition"], json.loads(x)["value"]) for x in dl.splitlines()]
    assert status == 200 and got == [(0, "p0-0"), (0, "p0-1"), (1, "p1-0"), (2, "p2-0")]


def test_a_search_whose_topic_goes_away_ends_with_an_error(cluster: BrokerProcess, console: Console) -> None:
    topic = f"doomed-{uuid.uuid4().hex[:6]}"
    _produce(cluster, topic, [b"v" * 1000] * 3000)  # ~250 records a fetch of 256 KiB
    # 2 s pauses: the scan takes over 10 s, so the delete lands while it runs even on a busy
    # machine (with 0.4 s pauses the whole scan could finish first)
    slow = Console(cluster.bootstrap, env={"STROM_CONSOLE_SCAN_PAUSE_MS": "2000"})
    try:
        body = slow.get(f"/topics/{topic}/messages?q=nothing&order=oldest")
        job_url = re.search(r'hx-get="([^"]+)"', body).group(1).replace("&amp;", "&")  # type: ignore[union-attr]
        assert console.request(f"/topics/{topic}/delete", {"confirm": topic})[0] == 200
        deadline = time.monotonic() + 60
        while 'id="search-progress"' in body:
            assert time.monotonic() < deadline
            time.sleep(0.2)
            body = slow.get(job_url)  # (a fragment answered 200: HTMX swaps it in)
        assert 'id="search-results"' in body and "The cluster answered with an error" in body
        assert "UNKNOWN_TOPIC" in body and "Traceback" not in body
        status, full = slow.request(job_url.split("?")[0])
        assert status == 502 and "UNKNOWN_TOPIC" in full
    finally:
        slow.close()


def test_binary_values_as_hex_cut_and_downloaded_as_base64(cluster: BrokerProcess, console: Console) -> None:
    topic = f"bin-{uuid.uuid4().hex[:6]}"
    blob = bytes(range(256)) * 40  # 10 KiB, not UTF-8
    _produce(cluster, topic, [b"\xff\xfe\x00\x01", blob])
    body = console.get(f"/topics/{topic}/messages?order=oldest")
    cells = body.split("<tr><td>")[1:]
    assert '<span class="tag">hex</span><pre>ff fe 00 01</pre>' in cells[0] and "cut" not in cells[0]
    assert '<span class="tag">hex</span><pre>00 01 02 03' in cells[1] and "10240 bytes, cut" in cells[1]
    assert len(cells[1].split("<pre>")[2].split("</pre>")[0]) == 2048 * 3 - 1  # 2 KiB shown, as hex
    status, dl = console.request(f"/topics/{topic}/download?partition=0&offset=1")
    assert status == 200 and base64.b64decode(json.loads(dl)["value"]["base64"]) == blob
