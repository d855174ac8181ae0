"""The web console served by a real broker's HTTP listener under ``/console/``
(``strom.http.console.enable``): every page, the forms (create a topic, produce, search), the live
tail's server-sent events through the listener, the metrics page finding the broker's own
``/metrics``, read-only with basic auth, and the console off by default."""

from __future__ import annotations

import base64
import json
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.testing.broker_process import BrokerProcess, free_port

pytestmark = pytest.mark.integration

confluent_kafka = pytest.importorskip("confluent_kafka")


def request(base: str, path: str, form: dict[str, str] | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    """(status, body, final URL) after redirects."""
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    req = urllib.request.Request(base + path, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode(), r.geturl()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), base + path


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("console-broker") / "data",
                      overrides=["strom.http.console.enable=true", "group.initial.rebalance.delay.ms=0",
                                 "strom.http.console.metrics.interval.ms=300",
                                 "strom.http.console.max.searches=2"],
                      env={"STROM_CONSOLE_SCAN_PAUSE_MS": "400"})  # a search pauses every 500 records
    b.start()
    try:
        yield b
    finally:
        b.stop()


def test_pages_forms_and_search_on_the_brokers_listener(broker: BrokerProcess) -> None:
    base = broker.http_url
    status, body, url = request(base, "/console")
    assert status == 200 and url == base + "/console/"  # redirected to the mount
    assert 'id="cluster-id"' in body and 'id="brokers">1<' in body
    assert 'src="/console/static/htmx-2.0.4.min.js"' in body and 'href="/console/topics"' in body
    status, js, _ = request(base, "/console/static/htmx-2.0.4.min.js")
    assert status == 200 and "htmx" in js

    topic = f"web-{uuid.uuid4().hex[:6]}"
    status, body, url = request(base, "/console/topics",
                                {"name": topic, "partitions": "2", "replication_factor": "1"})
    assert status == 200 and url == f"{base}/console/topics/{topic}", body[-500:]
    assert body.count(f'href="/console/topics/{topic}/messages?partition=') == 2
    status, body, url = request(base, f"/console/topics/{topic}/produce",
                                {"partition": "1", "key": "order-7", "value": json.dumps({"tier": "gold"}),
                                 "headers": "source=web"})
    assert status == 200 and "/console/topics/" in url and "source=web" in body
    p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(20):
        p.produce(topic, json.dumps({"tier": "basic", "n": i}).encode(), key=f"k{i}".encode(), partition=1)
    assert p.flush(30) == 0
    status, body, _ = request(base, f"/console/topics/{topic}/messages?partition=1&q=tier%3Dgold&mode=json")
    assert status == 200
    assert [int(x.split("</td>")[0]) for x in body.split("<tr><td>")[1:]] == [0]
    status, body, _ = request(base, f"/console/topics/{topic}/messages?partition=1&q=k1&limit=5")
    # keys k1 and k10..k19 are offsets 2 and 11..20: the newest five
    assert [int(x.split("</td>")[0]) for x in body.split("<tr><td>")[1:]] == [20, 19, 18, 17, 16]
    for path, marker in [("/console/topics", f">{topic}</a>"), (f"/console/topics/{topic}", "cleanup.policy"),
                         ("/console/groups", "<h1"), ("/console/security", 'id="user-table"'),
                         ("/console/metrics", "<h1>Metrics</h1>")]:
        status, body, _ = request(base, path)
        assert status == 200 and marker in body, path
        assert "Traceback" not in body
    # the broker's own routes are still there; an unknown console path is a 404
    assert request(base, "/metrics")[0] == 200 and request(base, "/healthz")[0] == 200
    assert request(base, "/console/no-such-page")[0] == 404
    status, body, _ = request(base, "/console/topics", {"name": "x", "partitions": "many",
                                                        "replication_factor": "1"})
    assert status == 400 and "partitions must be a whole number" in body


def test_search_progress_and_huge_values_under_the_prefix(broker: BrokerProcess) -> None:
    base = broker.http_url
    topic = f"large-{uuid.uuid4().hex[:6]}"
    p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "message.max.bytes": 2_000_000})
    for i in range(4000):
        p.produce(topic, b"v" * 20, key=f"key-{i}".encode(), partition=0)
    p.produce(topic, b"{" + b"z" * 900_000 + b"}", key=b"huge", partition=0)  # offset 4000
    assert p.flush(30) == 0
    # a search that takes seconds: its progress, polled under /console/, grows before its answer
    status, body, _ = request(base, f"/console/topics/{topic}/messages?q=key-3998&order=oldest")
    assert status == 200 and 'id="search-progress"' in body
    job_url = re.search(r'hx-get="([^"]+)"', body).group(1).replace("&amp;", "&")  # type: ignore[union-attr]
    assert job_url.startswith(f"/console/topics/{topic}/search/")
    assert f'href="/console/topics/{topic}/search/' in body  # the stop and refresh links
    seen = []
    deadline = time.monotonic() + 60
    while 'id="search-progress"' in body:
        assert time.monotonic() < deadline
        seen.append(int(body.split('class="scanned">')[1].split("<")[0]))
        time.sleep(0.1)
        status, body, _ = request(base, job_url)
        assert status == 200 and "<html" not in body
    assert seen == sorted(seen) and len(set(seen)) >= 3 and seen[-1] <= 4000, seen
    assert [int(x.split("</td>")[0]) for x in body.split("<tr><td>")[1:]] == [3998]
    assert "4001 scanned (offsets 0..4000)" in body  # (oldest first: on to the end for up to 50 matches)
    # strom.http.console.max.searches=2: a third search at once gets a 503 page
    jobs = []
    for _ in range(2):
        status, body, _ = request(base, f"/console/topics/{topic}/messages?q=nothing&order=oldest")
        assert status == 200 and 'id="search-progress"' in body
        jobs.append(body.split('id="search-stop" href="')[1].split('"')[0].replace("&amp;", "&"))
    status, body, _ = request(base, f"/console/topics/{topic}/messages?q=nothing&order=oldest")
    assert status == 503 and "at most 2" in body
    for stop in jobs:
        status, body, _ = request(base, stop)
        assert status == 200 and 'id="stopped"' in body
    # the huge value: cut in the list, downloadable in full through the listener
    status, body, _ = request(base, f"/console/topics/{topic}/messages?limit=1")
    assert status == 200 and "900002 bytes, cut" in body and body.count("z") < 5000
    link = body.split("900002 bytes, cut: <a")[1].split('href="')[1].split('"')[0].replace("&amp;", "&")
    assert link == f"/console/topics/{topic}/download?partition=0&offset=4000"
    status, dl, _ = request(base, link)
    assert status == 200 and json.loads(dl)["value"] == "{" + "z" * 900_000 + "}"


def test_live_tail_streams_through_the_listener(broker: BrokerProcess) -> None:
    topic = f"tail-{uuid.uuid4().hex[:6]}"
    p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    p.produce(topic, b"before", partition=0)
    assert p.flush(30) == 0
    s = socket.create_connection(("127.0.0.1", broker.http_port), 10)
    try:
        s.sendall(f"GET /console/topics/{topic}/tail?partition=0 HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        s.settimeout(15)
        got = b""
        while b"event: ready" not in got:
            chunk = s.recv(65536)
            assert chunk, got
            got += chunk
        assert got.startswith(b"HTTP/1.1 200") and b"text/event-stream" in got
        assert b'"offset": 1' in got  # from the log end
        p.produce(topic, b"live record", partition=0)
        assert p.flush(30) == 0
        while b"live record" not in got:
            chunk = s.recv(65536)
            assert chunk, got
            got += chunk
        assert b"before" not in got.split(b"event: ready", 1)[1]
    finally:
        s.close()
    # the broker serves on after the browser went away
    assert request(broker.http_url, "/healthz")[0] == 200


def test_metrics_page_finds_the_brokers_own_metrics(broker: BrokerProcess) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    topic = f"rate-{uuid.uuid4().hex[:6]}"
    deadline = time.monotonic() + 30
    body = ""
    while time.monotonic() < deadline:
        p.produce(topic, b"x" * 1000)
        p.flush(10)
        _, body, _ = request(broker.http_url, "/console/metrics")
        if "<polyline" in body:
            break
        time.sleep(0.3)
    assert f"<h2>{broker.http_url}/metrics</h2>" in body  # found from the metadata, no flag
    assert "<polyline" in body, body[-2000:]


def test_read_only_with_basic_auth_and_off_by_default(tmp_path: Path) -> None:
    users = tmp_path / "users.txt"
    users.write_text("# console users\nalice:s3cret\n")
    b = BrokerProcess(tmp_path / "data", overrides=["strom.http.console.enable=true",
                                                    "strom.http.console.read.only=true",
                                                    f"strom.http.console.basic.auth.file={users}"])
    b.start()
    try:
        status, body, _ = request(b.http_url, "/console/topics")
        assert status == 401
        assert request(b.http_url, "/metrics")[0] == 200  # the scrape needs no console password
        auth = {"Authorization": "Basic " + base64.b64encode(b"alice:s3cret").decode()}
        status, body, _ = request(b.http_url, "/console/topics", headers=auth)
        assert status == 200 and "read-only" in body
        assert 'method="post"' not in body.lower()
        form = {"name": "nope", "partitions": "1", "replication_factor": "1"}
        status, body, _ = request(b.http_url, "/console/topics", form, headers=auth)
        assert status == 403
        wrong = {"Authorization": "Basic " + base64.b64encode(b"alice:nope").decode()}
        assert request(b.http_url, "/console/", headers=wrong)[0] == 401
    finally:
        b.stop()
    plain = BrokerProcess(tmp_path / "data2")
    plain.start()
    try:
        status, body, _ = request(plain.http_url, "/console/")
        assert status == 404 and "/console/" not in body
    finally:
        plain.stop()


def test_a_wrong_bootstrap_address_is_an_error_page(tmp_path: Path) -> None:
    wrong = f"127.0.0.1:{free_port()}"
    b = BrokerProcess(tmp_path / "data", overrides=["strom.http.console.enable=true",
                                                    f"strom.http.console.bootstrap.servers={wrong}"])
    b.start()
    try:
        for path in ("/console/", "/console/topics", "/console/topics/t/messages?q=x", "/console/groups"):
            status, body, _ = request(b.http_url, path)
            assert status == 502, path
            assert "Cannot reach the cluster" in body and wrong in body and "Traceback" not in body
        assert request(b.http_url, "/healthz")[0] == 200  # the broker itself is fine
    finally:
        b.stop()


def test_a_missing_auth_file_fails_the_start(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", overrides=["strom.http.console.enable=true",
                                                    f"strom.http.console.basic.auth.file={tmp_path}/none"])
    with pytest.raises(RuntimeError) as e:
        b.start()
    assert "strom.http.console.basic.auth.file" in str(e.value)
    assert "Traceback" not in str(e.value)


def test_console_over_the_https_listener(tmp_path: Path) -> None:
    import ssl

    trustme = pytest.importorskip("trustme")
    ca = trustme.CA(organization_name="strom test CA")
    server = tmp_path / "server.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(server))
    port = free_port()
    b = BrokerProcess(tmp_path / "data", overrides=[
        f"strom.http.listener=https://127.0.0.1:{port}", "strom.http.console.enable=true",
        "strom.http.console.metrics.interval.ms=200",
        "listener.name.http.ssl.keystore.type=PEM", f"listener.name.http.ssl.keystore.location={server}",
    ])
    b.start()
    try:
        ctx = ssl.create_default_context()
        ca.configure_trust(ctx)
        base = f"https://127.0.0.1:{port}"
        topic = f"tls-{uuid.uuid4().hex[:6]}"
        form = urllib.parse.urlencode({"name": topic, "partitions": "1", "replication_factor": "1"}).encode()
        with urllib.request.urlopen(base + "/console/topics", data=form, timeout=30, context=ctx) as r:
            assert r.status == 200 and r.geturl() == f"{base}/console/topics/{topic}"
        # the metrics page samples this broker's own metrics (rendered in place: no TLS trust needed)
        deadline = time.monotonic() + 30
        while True:
            with urllib.request.urlopen(base + "/console/metrics", timeout=30, context=ctx) as r:
                body = r.read().decode()
            if "<polyline" in body:
                break
            assert time.monotonic() < deadline, body[-1500:]
            time.sleep(0.3)
        assert f"<h2>{base}/metrics</h2>" in body and "last sample failed" not in body
    finally:
        b.stop()
