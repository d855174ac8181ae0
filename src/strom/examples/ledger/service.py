"""Interactive queries over the ledger's views: an HTTP service that materialises the compacted
result topics in memory and answers from them.

Theory of operation
-------------------
A :class:`Materializer` thread consumes every partition of the view topics and the master-data
topics (``items``, ``cells``) from the beginning with a ``read_committed`` consumer (the job
writes in transactions; aborted batches must stay invisible) and keeps the latest row per key.
It assigns partitions itself (no consumer group: every service instance needs everything) and
looks for new topics and partitions every few seconds, so it can start before the job has
created them. Nothing is stored locally: after a restart the topics are read again, and since
they hold one row per key the state is the same.

Read-your-writes: before answering, a request asks the broker for the last stable offset of
every partition and waits (``sync_timeout``) until the consumer has passed it, so an answer
reflects every view row committed before the request arrived. The response header
``X-Ledger-Synced`` says whether that succeeded (``false``: the consumer did not catch up in
time; the answer is then from the state reached so far). When the broker cannot be reached the
service does not guess: it answers 503 with ``{"error": "broker ... unreachable: ..."}`` (an
empty or stale state would read as "not found"). ``?sync=0`` skips the wait and answers from the
state reached so far, reachable broker or not. An outage is logged once when it starts and once
when it ends (librdkafka's own per-retry connection logs are silenced).

Endpoints (JSON; see :mod:`strom.examples.ledger.model` for the answers' shapes)::

    GET /items/<item>                 total stock of an item and the cells holding it
    GET /cells/<cell>                 what is in a cell, its weight and capacity
    GET /workers                      every worker and the days they booked on
    GET /workers/<worker>             a worker's days, with counts
    GET /workers/<worker>/days/<date> a worker's day (YYYY-MM-DD): counts (a transfer once), the
                                      rows with storno marks, net quantities, pay
    GET /corrections[?item=<item>]    the storno entries
    GET /dead-letters                 ledger records the job could not use, with the reason
    GET /over-capacity                cells above their weight capacity
    GET /stock                        stock of every item and every item|cell
    GET /health                       consumer positions and sync state

Pay (``/workers/<worker>/days/<date>``) uses the rates given to :class:`Service`
(``strom-ledger serve --pay-per-movement X --pay-per-piece Y``); see :class:`model.PayRates`.

Error contract: unknown items, cells, workers and paths answer 404 with ``{"error": ...}``; an
unreachable broker answers 503 with ``{"error": ...}``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from strom.client import Client
from strom.examples.ledger import model

__all__ = ["Materializer", "Service", "serve"]

log = logging.getLogger(__name__)

TOPICS = (*model.VIEW_TOPICS, model.ITEMS, model.CELLS, model.DEAD_LETTERS)
READ_COMMITTED = 1


class Materializer:
    """Latest row per key of :data:`TOPICS`, kept current by a consumer thread."""

    def __init__(self, bootstrap: str, topics: tuple[str, ...] = TOPICS, refresh_s: float = 2.0) -> None:
        self.bootstrap = bootstrap
        self.topics = topics
        self.refresh_s = refresh_s
        self.views = model.Views()
        self.lock = threading.Lock()
        self.progress = threading.Condition(self.lock)
        self.positions: dict[tuple[str, int], int] = {}  # next offset to read, per partition
        self.records = 0
        self.errors = 0
        self.dead_letters: dict[str, Any] = {}
        self.broker_error: str | None = None  # set while the broker is unreachable
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- consuming
    def start(self) -> Materializer:
        self._thread = threading.Thread(target=self._run, name="ledger-materializer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _consumer(self) -> Any:
        try:
            from confluent_kafka import Consumer
        except ImportError as e:  # pragma: no cover - depends on the installation
            raise RuntimeError(
                "the ledger service needs confluent-kafka (pip install confluent-kafka)"
            ) from e
        return Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"ledger-service-{uuid.uuid4().hex}",  # never joined nor committed
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                "topic.metadata.refresh.interval.ms": 5000,
                "reconnect.backoff.max.ms": 1000,
                "log_level": 0,  # outages are logged once by _outage, not per librdkafka retry
                "error_cb": self._on_client_error,
            }
        )

    def _on_client_error(self, err: Any) -> None:
        from confluent_kafka import KafkaError

        if err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT):
            self._outage(err.str())

    def _outage(self, reason: str | None) -> None:
        """Record the broker as unreachable (``reason``) or reachable (``None``); logs changes only."""
        with self.lock:
            was, self.broker_error = self.broker_error, reason
        if reason is not None and was is None:
            log.warning("broker %s unreachable: %s (answering 503 until it is back)", self.bootstrap, reason)
        elif reason is None and was is not None:
            log.warning("broker %s reachable again", self.bootstrap)

    def _run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

        consumer = self._consumer()
        assigned: set[tuple[str, int]] = set()
        next_refresh = 0.0
        try:
            while not self._stop.is_set():
                if time.monotonic() >= next_refresh:
                    next_refresh = time.monotonic() + self.refresh_s
                    try:
                        md = consumer.list_topics(timeout=2)
                    except Exception as e:  # broker down: keep what we have, retry later
                        log.debug("metadata: %s", e)
                        self._outage(_one_line(e))
                    else:
                        new = [
                            (t, p)
                            for t in self.topics
                            if t in md.topics and md.topics[t].error is None
                            for p in md.topics[t].partitions
                            if (t, p) not in assigned
                        ]
                        if new:
                            consumer.incremental_assign(
                                [TopicPartition(t, p, OFFSET_BEGINNING) for t, p in new]
                            )
                            assigned.update(new)
                            with self.lock:
                                for tp in new:
                                    self.positions.setdefault(tp, 0)
                msgs = consumer.consume(1000, timeout=0.2)
                if not msgs:
                    continue
                with self.lock:
                    for msg in msgs:
                        err = msg.error()
                        tp = (msg.topic(), msg.partition())
                        if err is not None:
                            if err.code() == KafkaError._PARTITION_EOF:
                                self.positions[tp] = max(self.positions.get(tp, 0), msg.offset())
                            else:
                                self.errors += 1
                                log.debug("consume: %s", err)
                            continue
                        self._apply(msg.topic(), msg.key(), msg.value())
                        self.positions[tp] = max(self.positions.get(tp, 0), msg.offset() + 1)
                        self.records += 1
                    self.progress.notify_all()
        finally:
            consumer.close()

    def _apply(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        k = key.decode()
        v = self.views
        if topic == model.ITEMS:
            if value is None:
                v.items.pop(k, None)
            else:
                v.items[k] = model.Item.from_json(value)
        elif topic == model.CELLS:
            if value is None:
                v.cells.pop(k, None)
            else:
                v.cells[k] = model.Cell.from_json(value)
        elif topic == model.DEAD_LETTERS:
            if value is not None:
                try:
                    self.dead_letters[k] = json.loads(value)
                except ValueError:
                    self.dead_letters[k] = {"value": value.decode(errors="replace"), "reason": "?"}
        elif value is None:
            v.view(topic).pop(k, None)
        else:
            try:
                v.view(topic)[k] = json.loads(value)
            except ValueError:
                self.errors += 1

    # -- read-your-writes
    async def _stable_offsets(self) -> dict[tuple[str, int], int]:
        out: dict[tuple[str, int], int] = {}
        async with Client(self.bootstrap, request_timeout_ms=3000, retries=1) as c:
            existing = set(await c.list_topics())
            for t in self.topics:
                if t not in existing:
                    continue
                tm = await c.topic(t)
                offs = await c.list_offsets(
                    t, dict.fromkeys(tm.partitions, -1), isolation_level=READ_COMMITTED
                )
                assert isinstance(offs, dict)
                out.update({(t, p): o for p, o in offs.items()})
        return out

    def sync(self, timeout: float) -> bool:
        """Wait until every row committed before now has been read. True when that happened;
        :class:`BrokerUnavailable` if the broker cannot be reached."""
        deadline = time.monotonic() + timeout
        try:
            targets = asyncio.run(asyncio.wait_for(self._stable_offsets(), min(timeout, 10.0)))
        except Exception as e:
            log.debug("sync: %s", e)
            reason = _one_line(e) if str(e).strip() else "no answer in time"
            self._outage(reason)
            raise BrokerUnavailable(f"broker {self.bootstrap} unreachable: {reason}") from None
        self._outage(None)
        with self.progress:
            while True:
                behind = [tp for tp, o in targets.items() if self.positions.get(tp, -1) < o]
                if not behind:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.progress.wait(min(left, 0.2))

    def health(self) -> dict[str, Any]:
        with self.lock:
            return {
                "records": self.records,
                "errors": self.errors,
                "dead_letters": len(self.dead_letters),
                "broker_error": self.broker_error,
                "positions": {f"{t}-{p}": o for (t, p), o in sorted(self.positions.items())},
            }


class BrokerUnavailable(Exception):
    """The broker could not be asked (the service answers 503)."""


def _one_line(e: BaseException) -> str:
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    return lines[0].strip() if lines else type(e).__name__


def _first(values: list[str] | None) -> str | None:
    return values[0] if values else None


Handler = Callable[["Service", re.Match[str], dict[str, list[str]]], "dict[str, Any] | None"]


def _dead_letters(svc: Service) -> dict[str, Any]:
    rows = [{"id": k, **v} for k, v in sorted(svc.materializer.dead_letters.items())]
    return {"count": len(rows), "dead_letters": rows}


ROUTES: list[tuple[re.Pattern[str], Handler]] = [
    (re.compile(r"/items/(?P<item>[^/]+)"), lambda s, m, q: model.answer_item(s.views, m["item"])),
    (re.compile(r"/cells/(?P<cell>[^/]+)"), lambda s, m, q: model.answer_cell(s.views, m["cell"])),
    (
        re.compile(r"/workers/(?P<worker>[^/]+)/days/(?P<date>[^/]+)"),
        lambda s, m, q: model.answer_worker_day(s.views, m["worker"], m["date"], s.rates),
    ),
    (re.compile(r"/workers/(?P<worker>[^/]+)"), lambda s, m, q: model.answer_workers(s.views, m["worker"])),
    (re.compile(r"/workers"), lambda s, m, q: model.answer_workers(s.views)),
    (re.compile(r"/corrections"), lambda s, m, q: model.answer_corrections(s.views, _first(q.get("item")))),
    (re.compile(r"/over-capacity"), lambda s, m, q: model.answer_over_capacity(s.views)),
    (re.compile(r"/stock"), lambda s, m, q: model.answer_stock(s.views)),
    (re.compile(r"/dead-letters"), lambda s, m, q: _dead_letters(s)),
]


class Service:
    """The HTTP server and its materializer. ``port=0`` picks a free port."""

    def __init__(
        self,
        bootstrap: str,
        host: str = "127.0.0.1",
        port: int = 8080,
        sync_timeout: float = 10.0,
        rates: model.PayRates | None = None,
    ) -> None:
        self.materializer = Materializer(bootstrap)
        self.sync_timeout = sync_timeout
        self.rates: model.PayRates = rates or model.PayRates()
        service = self

        class _Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                service.handle(self)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug(format, *args)

        self.httpd = ThreadingHTTPServer((host, port), _Handler)
        self.httpd.daemon_threads = True

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.httpd.server_address[:2]
        return str(host), int(port)

    def handle(self, req: BaseHTTPRequestHandler) -> None:
        url = urlsplit(req.path)
        query = parse_qs(url.query)
        path = unquote(url.path).rstrip("/") or "/"
        synced = None
        try:
            if path == "/health":
                synced = self.materializer.sync(self.sync_timeout) if query.get("sync") == ["1"] else None
                self._send(req, 200, {**self.materializer.health(), "synced": synced}, synced)
                return
            for pattern, handler in ROUTES:
                m = pattern.fullmatch(path)
                if m is None:
                    continue
                if query.get("sync") != ["0"]:
                    synced = self.materializer.sync(self.sync_timeout)
                self._answer(req, path, handler, m, query, synced)
                return
        except BrokerUnavailable as e:
            self._send(req, 503, {"error": str(e)}, False)
            return
        self._send(req, 404, {"error": f"no such endpoint: {path}", "endpoints": _ENDPOINTS}, None)

    @property
    def views(self) -> model.Views:
        return self.materializer.views

    def _answer(
        self,
        req: BaseHTTPRequestHandler,
        path: str,
        handler: Handler,
        m: re.Match[str],
        query: dict[str, list[str]],
        synced: bool | None,
    ) -> None:
        with self.materializer.lock:
            body = handler(self, m, query)
        if body is None:
            self._send(req, 404, {"error": f"not found: {path}"}, synced)
        else:
            self._send(req, 200, body, synced)

    @staticmethod
    def _send(req: BaseHTTPRequestHandler, status: int, body: dict[str, Any], synced: bool | None) -> None:
        data = json.dumps(body, indent=None, separators=(",", ":")).encode()
        req.send_response(status)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(data)))
        if synced is not None:
            req.send_header("X-Ledger-Synced", "true" if synced else "false")
        req.end_headers()
        req.wfile.write(data)

    def start(self) -> Service:
        self.materializer.start()
        threading.Thread(target=self.httpd.serve_forever, name="ledger-http", daemon=True).start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.materializer.stop()


_ENDPOINTS = [
    "/items/<item>",
    "/cells/<cell>",
    "/workers",
    "/workers/<worker>",
    "/workers/<worker>/days/<YYYY-MM-DD>",
    "/corrections[?item=<item>]",
    "/over-capacity",
    "/stock",
    "/dead-letters",
    "/health[?sync=1]",
]


def serve(
    bootstrap: str,
    host: str = "127.0.0.1",
    port: int = 8080,
    sync_timeout: float = 10.0,
    rates: model.PayRates | None = None,
) -> None:
    """Run the service until interrupted (SIGINT/SIGTERM)."""
    import signal

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    svc = Service(bootstrap, host, port, sync_timeout, rates)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    svc.start()
    h, p = svc.address
    print(f"ledger service on http://{h}:{p} (bootstrap {bootstrap})", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        svc.stop()
