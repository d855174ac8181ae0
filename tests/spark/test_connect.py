"""strom connect end to end: real broker, real files, real Spark; records checked with
confluent-kafka. Restart-exactness: a second run after appending, a run without the checkpoint
(resumes from the connect-offsets topic), and a replayed micro-batch (its commit removed from
the checkpoint, as after a crash between the write and the checkpoint commit)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from strom.connect.config import parse_config
from strom.connect.runtime import ConnectorRun
from strom.testing.broker_process import BrokerProcess

from .conftest import create_topic

pytestmark = [pytest.mark.spark, pytest.mark.integration]

T = "org.apache.kafka.connect.transforms."


def consume_all(bootstrap: str, topic: str, expect_at_least: int = 0, timeout: float = 20.0) -> list[Any]:
    import time

    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{topic}-{time.time()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    c.subscribe([topic])
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    idle = 0
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            idle += 1
            if len(out) >= expect_at_least and idle >= 4:
                break
            continue
        idle = 0
        if m.error():
            continue
        out.append(m)
    c.close()
    return out


def run_once(spark: Any, cfg: dict[str, Any], bootstrap: str, state: Path) -> ConnectorRun:
    runner = ConnectorRun(parse_config(cfg), bootstrap, state)
    q = runner.start(spark, once=True)
    q.awaitTermination(120)
    runner.stop()
    assert q.exception() is None, runner.error or q.exception()
    return runner


def drop_last_commit(state: Path) -> int:
    commits = sorted((state / "checkpoint" / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    commits[-1].unlink()
    crc = commits[-1].with_name(f".{commits[-1].name}.crc")
    if crc.exists():
        crc.unlink()
    return int(commits[-1].name)


def test_file_source_restart_exact(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    bs = kbroker.bootstrap
    create_topic(bs, "fs-lines")
    src = tmp_path / "in.txt"
    src.write_text("".join(f"line {i}\n" for i in range(5)))
    cfg = {
        "name": "fs",
        "config": {"connector.class": "FileStreamSource", "file": str(src), "topic": "fs-lines"},
    }
    state = tmp_path / "state"

    r1 = run_once(spark, cfg, bs, state)
    assert r1.records_out == 5
    got = consume_all(bs, "fs-lines", 5)
    # the default JsonConverter with schemas.enable: Kafka's envelope; key null
    assert [json.loads(m.value()) for m in got] == [
        {"schema": {"type": "string", "optional": False}, "payload": f"line {i}"} for i in range(5)
    ]
    assert all(m.key() is None for m in got)

    # stop, append (a partial last line is not read), restart
    with open(src, "a") as f:
        f.write("line 5\r\nline 6\nline 7\npartial")
    run_once(spark, cfg, bs, state)
    payloads = [json.loads(m.value())["payload"] for m in consume_all(bs, "fs-lines", 8)]
    assert payloads == [f"line {i}" for i in range(8)]

    # a replayed batch (its commit lost): recognised by the position in connect-offsets
    drop_last_commit(state)
    run_once(spark, cfg, bs, state)
    # no checkpoint at all: resumes from connect-offsets
    shutil.rmtree(state)
    with open(src, "a") as f:
        f.write(" now complete\n")
    run_once(spark, cfg, bs, state)
    payloads = [json.loads(m.value())["payload"] for m in consume_all(bs, "fs-lines", 9)]
    assert payloads == [f"line {i}" for i in range(8)] + ["partial now complete"]

    offsets = consume_all(bs, "connect-offsets", 1)
    mine = [m for m in offsets if json.loads(m.key()) == ["fs", {"filename": str(src)}]]
    assert json.loads(mine[-1].value()) == {"position": src.stat().st_size}


def test_file_sink_transforms_dlq_and_replay(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    from confluent_kafka import Producer

    bs = kbroker.bootstrap
    create_topic(bs, "orders", 2)
    p = Producer({"bootstrap.servers": bs})
    docs: list[bytes] = []
    for i in range(10):
        docs.append(
            json.dumps({"id": i, "customer": {"name": f"c{i}", "card": "4111-1111"}, "qty": str(i)}).encode()
        )
    docs[3] = b"{not json"
    for i, d in enumerate(docs):
        p.produce("orders", key=str(i).encode(), value=d, partition=i % 2, headers=[("src", b"test")])
    p.flush(10)

    out = tmp_path / "out.txt"
    cfg = {
        "name": "sink",
        "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
            "topics": "orders",
            "file": str(out),
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable": "false",
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "transforms": "flat,mask,cast,drop",
            "transforms.flat.type": T + "Flatten$Value",
            "transforms.flat.delimiter": "_",
            "transforms.mask.type": T + "MaskField$Value",
            "transforms.mask.fields": "customer_card",
            "transforms.cast.type": T + "Cast$Value",
            "transforms.cast.spec": "qty:int32",
            "transforms.drop.type": T + "Filter",
            "transforms.drop.predicate": "isSeven",
            "predicates": "isSeven",
            "predicates.isSeven.type": "org.apache.kafka.connect.transforms.predicates.HasHeaderKey",
            "predicates.isSeven.name": "seven",
            "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": "orders-dlq",
            "errors.deadletterqueue.context.headers.enable": "true",
        },
    }
    state = tmp_path / "state"
    r = run_once(spark, cfg, bs, state)
    assert r.pipeline.errors.failed == 1 and r.dead_lettered == 1

    def expected(ids: list[int]) -> list[str]:
        return sorted(f"{{id={i}, customer_name=c{i}, customer_card=, qty={i}}}" for i in ids)

    lines = out.read_text().splitlines()
    assert sorted(lines) == expected([0, 1, 2, 4, 5, 6, 7, 8, 9])

    # the sink's offsets are also committed to its consumer group, as Connect's sinks keep them
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "group.id": "connect-sink"})
    committed = c.committed([TopicPartition("orders", 0), TopicPartition("orders", 1)], timeout=15)
    c.close()
    assert [tp.offset for tp in committed] == [5, 5]

    dlq = consume_all(bs, "orders-dlq", 1)
    assert len(dlq) == 1
    m = dlq[0]
    assert m.value() == b"{not json" and m.key() == b"3"
    h = dict(m.headers())
    assert h["src"] == b"test"
    assert h["__connect.errors.topic"] == b"orders"
    assert h["__connect.errors.partition"] == b"1"
    assert h["__connect.errors.offset"] == b"1"
    assert h["__connect.errors.connector.name"] == b"sink"
    assert h["__connect.errors.task.id"] == b"0"
    assert h["__connect.errors.stage"] == b"VALUE_CONVERTER"
    assert h["__connect.errors.class.name"] == b"org.apache.kafka.connect.json.JsonConverter"
    assert h["__connect.errors.exception.class.name"] == b"org.apache.kafka.connect.errors.DataException"
    assert b"Converting byte[] to Kafka Connect data failed" in h["__connect.errors.exception.message"]
    assert b"Traceback" in h["__connect.errors.exception.stacktrace"]

    # more records, one filtered by the predicate; then the last batch replayed
    for i in range(10, 14):
        hdrs = [("seven", b"")] if i == 12 else []
        p.produce(
            "orders",
            value=json.dumps({"id": i, "customer": {"name": f"c{i}", "card": "x"}, "qty": i}).encode(),
            partition=0,
            headers=hdrs,
        )
    p.flush(10)
    r = run_once(spark, cfg, bs, state)
    assert r.pipeline.filtered == 1
    want = expected([0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 13])
    assert sorted(out.read_text().splitlines()) == want
    drop_last_commit(state)
    run_once(spark, cfg, bs, state)
    assert sorted(out.read_text().splitlines()) == want, "a replayed batch doubled or lost lines"


def test_parquet_sink_and_tolerance_none(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    import pyarrow.parquet as pq
    from confluent_kafka import Producer

    bs = kbroker.bootstrap
    create_topic(bs, "metrics")
    p = Producer({"bootstrap.servers": bs})
    for i in range(6):
        p.produce("metrics", value=json.dumps({"host": f"h{i % 2}", "v": i * 1.5}).encode())
    p.flush(10)
    out = tmp_path / "pq"
    cfg = {
        "name": "pq",
        "config": {
            "connector.class": "strom.connect.ParquetSinkConnector",
            "topics": "metrics",
            "path": str(out),
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable": "false",
            "transforms": "ins",
            "transforms.ins.type": T + "InsertField$Value",
            "transforms.ins.offset.field": "off",
        },
    }
    run_once(spark, cfg, bs, tmp_path / "state")
    files = sorted(out.glob("*.parquet"))
    assert [f.name for f in files] == ["metrics+0+00000000000000000000.parquet"]
    rows = pq.read_table(files[0]).to_pylist()
    assert rows == [{"host": f"h{i % 2}", "v": i * 1.5, "off": i} for i in range(6)]

    # errors.tolerance=none (the default): a bad record stops the query with Connect's message
    p.produce("metrics", value=b"oops")
    p.flush(10)
    runner = ConnectorRun(parse_config({**cfg, "name": "pq2"}), bs, tmp_path / "state2")
    q = runner.start(spark, once=True)
    with pytest.raises(Exception):  # noqa: B017 - Spark wraps the error of foreachBatch
        q.awaitTermination(120)
    assert runner.error is not None and "Tolerance exceeded in error handler" in runner.error
    assert "VALUE_CONVERTER" in runner.error


def test_http_sink_batches_retries_and_dlq(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from confluent_kafka import Producer

    got: list[tuple[str, str, bytes]] = []
    calls = {"n": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            calls["n"] += 1
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if calls["n"] == 1:
                self.send_response(503)  # retried
            elif b'"id":3' in body:
                self.send_response(400)  # not retried: its records go to the DLQ
            else:
                got.append((self.path, self.headers["X-Tenant"], body))
                self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        bs = kbroker.bootstrap
        create_topic(bs, "http-in")
        p = Producer({"bootstrap.servers": bs})
        for i in range(5):
            p.produce("http-in", value=json.dumps({"id": i}).encode())
        p.flush(10)
        cfg = {
            "name": "http",
            "config": {
                "connector.class": "io.confluent.connect.http.HttpSinkConnector",
                "topics": "http-in",
                "http.api.url": f"http://127.0.0.1:{server.server_port}/ingest",
                "request.method": "PUT",
                "headers": "X-Tenant:acme",
                "batch.max.size": "2",
                "batch.prefix": "[",
                "batch.suffix": "]",
                "request.body.format": "json",
                "retry.backoff.ms": "10",
                "value.converter": "org.apache.kafka.connect.json.JsonConverter",
                "value.converter.schemas.enable": "false",
                "errors.tolerance": "all",
                "errors.deadletterqueue.topic.name": "http-dlq",
                "errors.deadletterqueue.context.headers.enable": "true",
            },
        }
        r = run_once(spark, cfg, bs, tmp_path / "state")
        assert got == [("/ingest", "acme", b'[{"id":0},{"id":1}]'), ("/ingest", "acme", b'[{"id":4}]')]
        assert calls["n"] == 4 and r.dead_lettered == 2
        dlq = consume_all(bs, "http-dlq", 2)
        assert [m.value() for m in dlq] == [b'{"id": 2}', b'{"id": 3}']
        h = dict(dlq[0].headers())
        assert h["__connect.errors.stage"] == b"TASK_PUT"
        assert h["__connect.errors.class.name"] == b"io.confluent.connect.http.HttpSinkConnector"
        assert b"answered 400" in h["__connect.errors.exception.message"]
    finally:
        server.shutdown()
