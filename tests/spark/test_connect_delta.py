"""strom connect's Delta Lake sink end to end: a real broker, real Spark, a real Delta table read
back with ``deltalake``. Restart-exactness: a second run after more records, a replayed
micro-batch (its checkpoint commit removed, as after a crash between the Delta commit and the
checkpoint), and a run without any checkpoint (it resumes from the offsets in the Delta log's
``txn`` actions): nothing missing, nothing doubled."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from strom.connect.delta import app_id
from strom.testing.broker_process import BrokerProcess

from .conftest import create_topic
from .test_connect import drop_last_commit, run_once

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SCHEMA = {
    "type": "struct",
    "optional": False,
    "fields": [
        {"field": "id", "type": "int32", "optional": False},
        {"field": "region", "type": "string", "optional": False},
        {"field": "amount", "type": "float64", "optional": True},
        {"field": "tags", "type": "array", "items": {"type": "string"}, "optional": True},
    ],
}


def produce(bs: str, ids: range) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs})
    for i in ids:
        doc = {"id": i, "region": ["eu", "us"][i % 2], "amount": i * 0.5, "tags": [f"t{i}"]}
        p.produce(
            "sales",
            key=str(i).encode(),
            value=json.dumps({"schema": SCHEMA, "payload": doc}).encode(),
            partition=i % 3,
        )
    assert p.flush(15) == 0


def table_ids(path: Path) -> list[int]:
    from deltalake import DeltaTable

    return sorted(DeltaTable(str(path)).to_pyarrow_table().column("id").to_pylist())


def test_delta_sink_restart_exact(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable

    bs = kbroker.bootstrap
    create_topic(bs, "sales", 3)
    produce(bs, range(30))
    table = tmp_path / "delta" / "${topic}"
    cfg = {
        "name": "dl",
        "config": {
            "connector.class": "strom.connect.DeltaSinkConnector",
            "topics": "sales",
            "table.path": str(table),
            "partition.by": "region",
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        },
    }
    state = tmp_path / "state"
    path = tmp_path / "delta" / "sales"

    r = run_once(spark, cfg, bs, state)
    assert r.records_out == 30
    dt = DeltaTable(str(path))
    assert table_ids(path) == list(range(30))
    # the schema is the converter's: int32 stays int32, the array a list of strings
    schema = dt.to_pyarrow_table().schema
    assert schema.field("id").type == pa.int32() and not schema.field("id").nullable
    assert schema.field("amount").type == pa.float64()
    assert schema.field("tags").type.value_type == pa.string()
    assert dt.metadata().partition_columns == ["region"]
    assert sorted(p.name for p in path.iterdir() if p.is_dir() and p.name != "_delta_log") == [
        "region=eu",
        "region=us",
    ]
    # the Kafka offsets are in the Delta log: 10 records in each partition
    assert [dt.transaction_version(app_id("dl", "sales", p)) for p in range(3)] == [10, 10, 10]

    # stop, more records, restart
    produce(bs, range(30, 36))
    run_once(spark, cfg, bs, state)
    assert table_ids(path) == list(range(36))

    # the last micro-batch replayed (its checkpoint commit lost after the Delta commit)
    version = DeltaTable(str(path)).version()
    drop_last_commit(state)
    r = run_once(spark, cfg, bs, state)
    assert table_ids(path) == list(range(36))
    assert r._delta.skipped == 6 and DeltaTable(str(path)).version() == version

    # no checkpoint at all: resumes from the table's offsets, only the new records are written
    shutil.rmtree(state)
    produce(bs, range(36, 40))
    r = run_once(spark, cfg, bs, state)
    assert table_ids(path) == list(range(40))
    assert r.records_in == 4 and r._delta.skipped == 0
    dt = DeltaTable(str(path))
    assert [dt.transaction_version(app_id("dl", "sales", p)) for p in range(3)] == [14, 13, 13]


def test_delta_sink_schemaless_and_bad_partition_column(
    spark: Any, kbroker: BrokerProcess, tmp_path: Path
) -> None:
    from confluent_kafka import Producer
    from deltalake import DeltaTable

    bs = kbroker.bootstrap
    create_topic(bs, "events")
    p = Producer({"bootstrap.servers": bs})
    for i in range(5):
        p.produce("events", value=json.dumps({"n": i, "s": f"e{i}"}).encode())
    p.flush(10)
    cfg = {
        "name": "dl2",
        "config": {
            "connector.class": "DeltaSink",
            "topics": "events",
            "table.path": str(tmp_path / "t"),
            "value.converter.schemas.enable": "false",
        },
    }
    run_once(spark, cfg, bs, tmp_path / "state")
    rows = DeltaTable(str(tmp_path / "t")).to_pyarrow_table().to_pylist()
    assert sorted(rows, key=lambda r: r["n"]) == [{"n": i, "s": f"e{i}"} for i in range(5)]

    # a partition column the records do not have: the query fails and says why
    from strom.connect.config import parse_config
    from strom.connect.runtime import ConnectorRun

    bad = {
        "name": "dl3",
        "config": {**cfg["config"], "table.path": str(tmp_path / "t3"), "partition.by": "nope"},
    }
    runner = ConnectorRun(parse_config(bad), bs, tmp_path / "state3")
    q = runner.start(spark, once=True)
    with pytest.raises(Exception, match=r"partition\.by column 'nope'"):
        q.awaitTermination(120)
    runner.stop()
