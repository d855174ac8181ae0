"""The console in a real headless Chromium (Debian's ``chromium``, installed by ``make sysdeps``)
driven by Playwright for Python with the system executable (no browser download): every page
opened (title, content, the vendored HTMX running), a topic created and a message produced through
the forms and found by a search, a group's offsets reset with a preview then executed, read-only
mode without any mutating control, and the console on the broker's own HTTP listener navigated by
its links. A screenshot of each page is saved (``STROM_TEST_ARTIFACTS`` or the test's temporary
directory; the path is printed). Skipped only where Chromium is not installed."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.testing.broker_process import BrokerProcess, free_port

pytestmark = pytest.mark.integration

confluent_kafka = pytest.importorskip("confluent_kafka")
sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the dev extra)")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class ConsoleProcess:
    def __init__(self, bootstrap: str, *extra: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (a pipe nobody reads could fill and block it)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "strom", "console", "--bootstrap-server", bootstrap,
             "--port", str(self.port), *extra], stdout=self.log, stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})})
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

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get("STROM_TEST_ARTIFACTS")
    out = Path(where) / "console-screenshots" if where else tmp_path_factory.mktemp("console-screenshots")
    out.mkdir(parents=True, exist_ok=True)
    print(f"\nconsole screenshots in {out}")
    return out


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if CHROMIUM is None:
        pytest.skip("no chromium (make sysdeps installs Debian's chromium)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("console-browser") / "data",
                      overrides=["group.initial.rebalance.delay.ms=0", "strom.http.console.enable=true"])
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def console(cluster: BrokerProcess) -> Iterator[ConsoleProcess]:
    c = ConsoleProcess(cluster.bootstrap, "--metrics-port", str(cluster.http_port),
                       "--metrics-interval", "0.5")
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def dialogs() -> list[str]:
    """The confirmations the pages asked for (each accepted)."""
    return []


@pytest.fixture
def page(browser: Any, dialogs: list[str]) -> Iterator[Any]:
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    ctx.set_default_timeout(60_000)  # a loaded CI machine: pages wait for the cluster's answers
    sync_api.expect.set_options(timeout=30_000)
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))

    def confirm(d: Any) -> None:
        dialogs.append(d.message)
        d.accept()
    pg.on("dialog", confirm)
    try:
        yield pg
    finally:
        ctx.close()
    assert not errors, f"JavaScript errors: {errors}"


def _data(cluster: BrokerProcess, topic: str, group: str, n: int = 12, committed: int = 4) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(n):
        p.produce(topic, json.dumps({"order": i, "tier": "gold" if i % 4 == 0 else "basic"}).encode(),
                  key=f"key-{i}".encode(), partition=0, headers={"source": b"web"})
    assert p.flush(30) == 0
    c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    c.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, committed)], asynchronous=False)
    c.close()


def _htmx_ran(page: Any) -> None:
    assert page.evaluate("typeof window.htmx") == "object", "the vendored HTMX did not load"


def test_every_page(cluster: BrokerProcess, console: ConsoleProcess, page: Any, shots: Path) -> None:
    expect = sync_api.expect
    topic, group = f"orders-{uuid.uuid4().hex[:6]}", f"billing-{uuid.uuid4().hex[:6]}"
    _data(cluster, topic, group)
    pages = [
        ("overview", "/", "Overview", "#broker-table", None),
        ("topics", "/topics", "Topics", "#topic-table", topic),
        ("topic", f"/topics/{topic}", topic, "#config-table", "cleanup.policy"),
        ("messages", f"/topics/{topic}/messages", f"{topic} messages", "#message-table", '"order": 11'),
        ("groups", "/groups", "Consumer groups", "#group-table", group),
        ("group", f"/groups/{group}", group, "#total-lag", "8"),
        ("security", "/security", "Security", "#acl-table", None),
        ("metrics", "/metrics", "Metrics", "body", None),
    ]
    for name, path, title, selector, text in pages:
        page.goto(console.base + path)
        assert page.title() == f"{title} · strom console", name  # no markup leaked into the title
        expect(page.locator(selector).first).to_be_visible()
        if text is not None:
            expect(page.locator(selector).first).to_contain_text(text)
        assert "Traceback" not in page.content()
        _htmx_ran(page)
        page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    # the metrics page charts the broker found in the metadata once samples came in
    page.goto(console.base + "/metrics")
    for _ in range(30):
        if page.locator("svg polyline").count():
            break
        page.wait_for_timeout(500)
        page.reload()
    assert page.locator("svg polyline").count() > 0
    page.screenshot(path=str(shots / "metrics.png"), full_page=True)
    # a broken address: the error page, not a traceback
    page.goto(console.base + "/topics/no-such-topic")
    expect(page.locator("h1")).to_contain_text("No such topic")


def test_create_topic_produce_and_find_it_by_search(
    console: ConsoleProcess, page: Any, shots: Path, dialogs: list[str]
) -> None:
    expect = sync_api.expect
    topic = f"made-{uuid.uuid4().hex[:6]}"
    page.goto(console.base + "/topics")
    form = page.locator("#create-topic form")
    form.locator("input[name=name]").fill(topic)
    form.locator("input[name=partitions]").fill("2")
    form.locator("button[type=submit]").click()
    expect(page.locator("h1")).to_contain_text(topic)  # the new topic's page (boosted by HTMX)
    expect(page.locator("#partition-table tr")).to_have_count(3)
    produce = page.locator("#produce form")
    produce.locator("input[name=partition]").fill("1")
    produce.locator("input[name=key]").fill("customer-42")
    produce.locator("textarea[name=value]").fill(json.dumps({"customer": {"id": 42, "tier": "platinum"}}))
    produce.locator("textarea[name=headers]").fill("source=browser")
    produce.locator("button[type=submit]").click()
    expect(page.locator("#message-table")).to_contain_text("platinum")
    assert dialogs == ["Create this topic?", f"Produce this message to {topic}?"]  # each confirmed first
    # search from the messages page: a JSON path, then a miss
    page.goto(f"{console.base}/topics/{topic}/messages")
    browse = page.locator("#browse")
    browse.locator("select[name=partition]").select_option("1")
    browse.locator("input[name=q]").fill("customer.tier=platinum")
    browse.locator("select[name=mode]").select_option("json")
    browse.locator("button[type=submit]").click()
    expect(page.locator("#message-table")).to_contain_text("customer-42")
    expect(page.locator("#message-table")).to_contain_text("source=browser")
    page.screenshot(path=str(shots / "search.png"), full_page=True)
    browse.locator("input[name=q]").fill("customer.tier=tin")
    browse.locator("button[type=submit]").click()
    expect(page.locator("#message-table")).to_contain_text("no messages")


def test_search_progress_then_results(cluster: BrokerProcess, page: Any, shots: Path) -> None:
    """A search that takes seconds (a test hook pauses it 0.4 s every 500 records): the page
    shows its progress, polled by HTMX, then swaps in the answer."""
    expect = sync_api.expect
    topic = f"large-{uuid.uuid4().hex[:6]}"
    p = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(4000):
        p.produce(topic, json.dumps({"n": i}).encode(), key=f"key-{i}".encode(), partition=0)
    assert p.flush(30) == 0
    slow = ConsoleProcess(cluster.bootstrap, env={"STROM_CONSOLE_SCAN_PAUSE_MS": "400"})
    try:
        page.goto(f"{slow.base}/topics/{topic}/messages")
        browse = page.locator("#browse")
        browse.locator("input[name=q]").fill("key-2345")
        browse.locator("select[name=order]").select_option("oldest")
        browse.locator("button[type=submit]").click()
        progress = page.locator("#search-progress")
        expect(progress).to_be_visible()
        first = int(page.locator("#progress-table .scanned").inner_text())
        page.screenshot(path=str(shots / "search-progress.png"), full_page=True)
        expect(page.locator("#progress-table .matches")).to_have_text("1")  # found on the way
        later = int(page.locator("#progress-table .scanned").inner_text())
        assert 0 <= first < later < 4000
        expect(page.locator("#search-results")).to_be_visible()  # swapped in when done
        expect(progress).to_have_count(0)
        expect(page.locator("#message-table")).to_contain_text("key-2345")
        expect(page.locator("#scan")).to_contain_text("4000 scanned (offsets 0..3999)")
        page.screenshot(path=str(shots / "search-done.png"), full_page=True)
    finally:
        slow.close()


def test_reset_offsets_preview_then_execute(
    cluster: BrokerProcess, console: ConsoleProcess, page: Any, shots: Path
) -> None:
    expect = sync_api.expect
    topic, group = f"reset-{uuid.uuid4().hex[:6]}", f"rg-{uuid.uuid4().hex[:6]}"
    _data(cluster, topic, group, n=10, committed=7)
    page.goto(f"{console.base}/groups/{group}")
    expect(page.locator("#total-lag")).to_have_text("3")
    reset = page.locator("#reset form")
    reset.locator("select[name=strategy]").select_option("offset")
    reset.locator("input[name=value]").fill("2")
    reset.locator("button[type=submit]").click()
    expect(page.locator("#reset-result")).to_contain_text("Preview")
    expect(page.locator("#reset-table td.new")).to_have_text(["2"])
    page.screenshot(path=str(shots / "reset-preview.png"), full_page=True)
    c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:  # the preview changed nothing
        assert c.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=15)[0].offset == 7
        page.locator("#execute button[type=submit]").click()
        expect(page.locator("#reset-result")).to_contain_text("Offsets reset")
        assert c.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=15)[0].offset == 2
    finally:
        c.close()
    page.goto(f"{console.base}/groups/{group}")
    expect(page.locator("#total-lag")).to_have_text("8")


def test_read_only_has_no_mutating_controls(cluster: BrokerProcess, page: Any, shots: Path) -> None:
    topic, group = f"ro-{uuid.uuid4().hex[:6]}", f"ro-{uuid.uuid4().hex[:6]}"
    _data(cluster, topic, group, n=3, committed=1)
    ro = ConsoleProcess(cluster.bootstrap, "--read-only")
    try:
        for path in ("/", "/topics", f"/topics/{topic}", f"/topics/{topic}/messages", "/groups",
                     f"/groups/{group}", "/security", "/metrics"):
            page.goto(ro.base + path)
            assert "read-only" in page.locator("header").inner_text()
            assert page.locator("form[method=post]").count() == 0, path
            assert page.locator("textarea").count() == 0, path
            for word in ("Create", "Delete", "Produce", "Replay", "Preview", "Save", "Add"):
                assert page.get_by_role("button", name=word).count() == 0, (path, word)
        page.goto(ro.base + f"/topics/{topic}")
        page.screenshot(path=str(shots / "read-only-topic.png"), full_page=True)
    finally:
        ro.close()


def test_console_on_the_brokers_listener(cluster: BrokerProcess, page: Any, shots: Path) -> None:
    expect = sync_api.expect
    topic = f"mounted-{uuid.uuid4().hex[:6]}"
    _data(cluster, topic, f"g-{uuid.uuid4().hex[:6]}", n=2, committed=1)
    page.goto(cluster.http_url + "/console")
    assert page.url == cluster.http_url + "/console/"
    _htmx_ran(page)
    page.get_by_role("link", name="Topics").click()
    expect(page.locator("#topic-table")).to_contain_text(topic)
    page.get_by_role("link", name=topic).click()
    expect(page.locator("h1")).to_contain_text(topic)
    assert page.url == f"{cluster.http_url}/console/topics/{topic}"
    page.screenshot(path=str(shots / "broker-console-topic.png"), full_page=True)
