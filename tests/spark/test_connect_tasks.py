"""``tasks.max``: a sink's topic partitions divided among its tasks, each task its own Spark query
with its own checkpoint and ``task.id``; visible in Connect's REST status. Real broker, real
Spark, the REST API served by uvicorn on a loopback port."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from strom.connect.config import parse_config
from strom.connect.runtime import ConnectorRun, task_groups
from strom.testing.broker_process import BrokerProcess, free_port

from .conftest import create_topic
from .test_connect import consume_all

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def test_task_groups_as_connect() -> None:
    assert task_groups(list(range(4)), 3) == [[0, 1], [2], [3]]
    assert task_groups(list(range(2)), 5) == [[0], [1]]
    assert task_groups(list(range(6)), 2) == [[0, 1, 2], [3, 4, 5]]
    assert task_groups([], 3) == [[]]


def produce(bs: str, topic: str, ids: range, parts: int, bad: int | None = None) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs})
    for i in ids:
        v = b"{broken" if i == bad else json.dumps({"id": i}).encode()
        p.produce(topic, value=v, partition=i % parts)
    assert p.flush(15) == 0


def parquet_ids(out: Path) -> list[int]:
    import pyarrow.parquet as pq

    return sorted(i for f in out.glob("*.parquet") for i in pq.read_table(f).column("id").to_pylist())


def test_sink_tasks_split_partitions(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    bs = kbroker.bootstrap
    create_topic(bs, "split", 4)
    produce(bs, "split", range(40), 4, bad=7)  # 7 is in partition 3: task 1's
    out = tmp_path / "pq"
    cfg = {
        "name": "split-pq",
        "config": {
            "connector.class": "ParquetSink",
            "topics": "split",
            "path": str(out),
            "tasks.max": "2",
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter.schemas.enable": "false",
            "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": "split-dlq",
            "errors.deadletterqueue.context.headers.enable": "true",
        },
    }
    state = tmp_path / "state"
    run = ConnectorRun(parse_config(cfg), bs, state)
    q = run.start(spark, once=True)
    q.awaitTermination(120)
    run.stop()
    assert q.exception() is None, q.exception()
    st = run.status()
    assert [t["id"] for t in st["tasks"]] == [0, 1]
    assert [t["strom"]["assignment"] for t in st["tasks"]] == [
        [{"topic": "split", "partition": 0}, {"topic": "split", "partition": 1}],
        [{"topic": "split", "partition": 2}, {"topic": "split", "partition": 3}],
    ]
    assert [t["strom"]["records_in"] for t in st["tasks"]] == [20, 20]
    assert st["strom"]["records_out"] == 39 and st["strom"]["dead_lettered"] == 1
    assert sorted({f.name.split("+")[1] for f in out.glob("*.parquet")}) == ["0", "1", "2", "3"]
    assert parquet_ids(out) == [i for i in range(40) if i != 7]
    (dlq,) = consume_all(bs, "split-dlq", 1)
    assert dict(dlq.headers())["__connect.errors.task.id"] == b"1"
    assert sorted(p.name for p in state.iterdir()) == ["task-0", "task-1"]

    # more tasks than before, with new (empty) checkpoints: each task starts at the offsets its
    # partitions committed to the group connect-split-pq; nothing is read twice
    produce(bs, "split", range(40, 48), 4)
    cfg["config"]["tasks.max"] = "8"  # capped at one task per partition: 4
    run = ConnectorRun(parse_config(cfg), bs, tmp_path / "state2")
    q = run.start(spark, once=True)
    q.awaitTermination(120)
    run.stop()
    assert q.exception() is None, q.exception()
    st = run.status()
    assert [t["id"] for t in st["tasks"]] == [0, 1, 2, 3]
    assert st["strom"]["records_in"] == 8
    assert parquet_ids(out) == [i for i in range(48) if i != 7]


def http(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        raw = r.read()
        return r.status, json.loads(raw) if raw else None


def test_rest_status_lists_tasks(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    import uvicorn
    from deltalake import DeltaTable

    from strom.connect.rest import Worker, make_app

    bs = kbroker.bootstrap
    create_topic(bs, "split-rest", 3)
    produce(bs, "split-rest", range(30), 3)
    worker = Worker(spark, bs, tmp_path / "worker")
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(make_app(worker), host="127.0.0.1", port=port, log_level="warning")
    )
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        table = tmp_path / "delta"
        code, info = http(
            "POST",
            f"{url}/connectors",
            {
                "name": "split-delta",
                "config": {
                    "connector.class": "DeltaSink",
                    "topics": "split-rest",
                    "table.path": str(table),
                    "tasks.max": "3",
                    "value.converter.schemas.enable": "false",
                    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
                },
            },
        )
        assert code == 201
        assert info["tasks"] == [{"connector": "split-delta", "task": i} for i in range(3)]

        def rows() -> int:
            try:
                return int(DeltaTable(str(table)).to_pyarrow_table().num_rows)
            except Exception:
                return 0

        deadline = time.monotonic() + 120
        while rows() < 30:
            assert time.monotonic() < deadline, "the tasks did not write the table"
            time.sleep(0.5)
        _, st = http("GET", f"{url}/connectors/split-delta/status")
        assert st["connector"]["state"] == "RUNNING"
        assert [(t["id"], t["state"]) for t in st["tasks"]] == [(i, "RUNNING") for i in range(3)]
        assert [t["strom"]["assignment"] for t in st["tasks"]] == [
            [{"topic": "split-rest", "partition": i}] for i in range(3)
        ]
        _, tasks = http("GET", f"{url}/connectors/split-delta/tasks")
        assert [t["id"] for t in tasks] == [{"connector": "split-delta", "task": i} for i in range(3)]
        assert sorted(DeltaTable(str(table)).to_pyarrow_table().column("id").to_pylist()) == list(range(30))
        assert http("DELETE", f"{url}/connectors/split-delta")[0] == 204
    finally:
        server.should_exit = True
        th.join(30)
        worker.shutdown()


def test_a_topic_that_does_not_exist_yet_keeps_one_task(kbroker: BrokerProcess, tmp_path: Path) -> None:
    """A split assigns the partitions that exist when it starts: with a listed topic missing the
    sink runs one task subscribed to its topics, which reads that topic once it appears."""
    bs = kbroker.bootstrap
    create_topic(bs, "split-present", 4)
    cfg = {"name": "split-missing", "config": {
        "connector.class": "ParquetSink", "topics": "split-present,split-later",
        "path": str(tmp_path / "pq"), "tasks.max": "2"}}
    assert ConnectorRun(parse_config(cfg), bs, tmp_path / "s1").task_assignments() == []
    cfg["config"]["topics"] = "split-present"
    assert len(ConnectorRun(parse_config(cfg), bs, tmp_path / "s2").task_assignments()) == 2
