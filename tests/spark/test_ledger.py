"""The warehouse-ledger pipeline end to end: a hand-written ledger (20 movements, 2 stornos) with
hand-computed answers, through the Spark job and the HTTP service; restarts of the job, the
service and the broker; a replayed micro-batch; and a generated ledger against the reference
projection."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.examples.ledger import model
from strom.examples.ledger.model import Cell, Item, Movement
from strom.testing.broker_process import BrokerProcess, free_port

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]

D1, D2 = "2024-03-04", "2024-03-05"

ITEMS = [
    Item("SKU-A", "bolts (box)", 2.0),
    Item("SKU-B", "cement bag", 25.0),
    Item("SKU-C", "work gloves", None),  # no master weight: its movements carry one
]
CELLS = [Cell("A-1", 100.0), Cell("A-2", 500.0), Cell("B-1", 50.0)]


def mv(
    n: int,
    date: str,
    worker: str,
    item: str,
    cell: str,
    qty: int,
    w: float | None = None,
    desc: str = "",
    reverses: str | None = None,
) -> Movement:
    return Movement(
        f"M{n:02d}", date, f"{8 + n // 4:02d}:{n % 4 * 15:02d}:00", item, cell, qty, worker, desc, w, reverses
    )


PHASE1 = [
    mv(1, D1, "anna", "SKU-A", "A-1", 20, None, "goods receipt PO-1"),
    mv(2, D1, "anna", "SKU-B", "A-2", 10, 25.0, "goods receipt PO-2"),
    mv(3, D1, "ben", "SKU-C", "B-1", 100, 0.1, "goods receipt PO-3"),
    mv(4, D1, "ben", "SKU-A", "A-1", -5, None, "pick SO-1"),
    mv(5, D1, "anna", "SKU-B", "A-2", 30, 25.0, "goods receipt PO-4"),  # wrong: 3 bags came
    mv(6, D1, "carla", "SKU-A", "B-1", 10, None, "transfer"),
    mv(7, D1, "carla", "SKU-B", "A-2", -30, 25.0, "Storno of M05: wrong quantity", "M05"),
    mv(8, D1, "carla", "SKU-B", "A-2", 3, 25.0, "re-booking of PO-4"),
    mv(9, D1, "ben", "SKU-C", "B-1", -40, 0.1, "pick SO-2"),
    mv(10, D2, "anna", "SKU-A", "A-1", 25, None, "goods receipt PO-5"),
    mv(11, D2, "anna", "SKU-B", "B-1", 2, None, "goods receipt PO-6"),
    mv(12, D2, "ben", "SKU-A", "A-1", -10, None, "pick SO-3"),
]
PHASE2 = [
    mv(13, D2, "ben", "SKU-A", "A-2", 10, None, "goods receipt PO-7"),
    mv(14, D2, "ben", "SKU-C", "A-1", 50, 0.1, "goods receipt PO-8"),  # wrong cell: it is in A-2
    mv(15, D2, "carla", "SKU-B", "A-2", -4, None, "pick SO-4"),
    mv(16, D2, "anna", "SKU-C", "A-1", -50, 0.1, "Storno of M14: wrong cell", "M14"),
    mv(17, D2, "anna", "SKU-C", "A-2", 50, 0.1, "re-booking of PO-8"),
    mv(18, D2, "carla", "SKU-A", "B-1", -10, None, "pick SO-5"),
    mv(19, D2, "carla", "SKU-C", "B-1", -20, 0.1, "pick SO-6"),
    mv(20, D2, "ben", "SKU-B", "A-1", 1, 25.0, "goods receipt PO-9"),
]


def worker_day(worker: str, date: str, movements: int, items: int, stornos: int) -> dict[str, Any]:
    return {"worker": worker, "date": date, "items": items, "movements": movements, "stornos": stornos}


# ---- hand-computed answers after PHASE1 (M01..M12)
EXPECTED1: dict[str, Any] = {
    "/items/SKU-A": {
        "item": "SKU-A",
        "name": "bolts (box)",
        "qty": 40,
        "weight_kg": 80.0,
        "cells": [{"cell": "A-1", "qty": 30}, {"cell": "B-1", "qty": 10}],
    },
    "/items/SKU-B": {
        "item": "SKU-B",
        "name": "cement bag",
        "qty": 15,
        "weight_kg": 375.0,
        "cells": [{"cell": "A-2", "qty": 13}, {"cell": "B-1", "qty": 2}],
    },
    "/items/SKU-C": {
        "item": "SKU-C",
        "name": "work gloves",
        "qty": 60,
        "weight_kg": 6.0,
        "cells": [{"cell": "B-1", "qty": 60}],
    },
    "/cells/A-1": {
        "cell": "A-1",
        "items": [{"item": "SKU-A", "qty": 30, "weight_kg": 60.0}],
        "qty": 30,
        "weight_kg": 60.0,
        "capacity_kg": 100.0,
        "over": False,
    },
    "/cells/A-2": {
        "cell": "A-2",
        "items": [{"item": "SKU-B", "qty": 13, "weight_kg": 325.0}],
        "qty": 13,
        "weight_kg": 325.0,
        "capacity_kg": 500.0,
        "over": False,
    },
    "/cells/B-1": {
        "cell": "B-1",
        "items": [
            {"item": "SKU-A", "qty": 10, "weight_kg": 20.0},
            {"item": "SKU-B", "qty": 2, "weight_kg": 50.0},
            {"item": "SKU-C", "qty": 60, "weight_kg": 6.0},
        ],
        "qty": 72,
        "weight_kg": 76.0,
        "capacity_kg": 50.0,
        "over": True,
    },
    f"/workers/anna/days/{D1}": worker_day("anna", D1, 3, 60, 0),
    f"/workers/ben/days/{D1}": worker_day("ben", D1, 3, 145, 0),
    f"/workers/carla/days/{D1}": worker_day("carla", D1, 2, 13, 1),
    f"/workers/anna/days/{D2}": worker_day("anna", D2, 2, 27, 0),
    f"/workers/ben/days/{D2}": worker_day("ben", D2, 1, 10, 0),
    f"/workers/carla/days/{D2}": worker_day("carla", D2, 0, 0, 0),
    "/corrections": {"count": 1, "corrections": [PHASE1[6].to_dict()]},
    "/over-capacity": {
        "count": 1,
        "cells": [{"cell": "B-1", "weight_kg": 76.0, "capacity_kg": 50.0, "excess_kg": 26.0}],
    },
    "/stock": {
        "items": {"SKU-A": 40, "SKU-B": 15, "SKU-C": 60},
        "cells": {"SKU-A|A-1": 30, "SKU-A|B-1": 10, "SKU-B|A-2": 13, "SKU-B|B-1": 2, "SKU-C|B-1": 60},
    },
}

# ---- hand-computed answers after PHASE1 + PHASE2 (M01..M20)
EXPECTED2: dict[str, Any] = {
    "/items/SKU-A": {
        "item": "SKU-A",
        "name": "bolts (box)",
        "qty": 40,
        "weight_kg": 80.0,
        "cells": [{"cell": "A-1", "qty": 30}, {"cell": "A-2", "qty": 10}],  # B-1 emptied: not listed
    },
    "/items/SKU-B": {
        "item": "SKU-B",
        "name": "cement bag",
        "qty": 12,
        "weight_kg": 300.0,
        "cells": [{"cell": "A-1", "qty": 1}, {"cell": "A-2", "qty": 9}, {"cell": "B-1", "qty": 2}],
    },
    "/items/SKU-C": {
        "item": "SKU-C",
        "name": "work gloves",
        "qty": 90,
        "weight_kg": 9.0,
        "cells": [{"cell": "A-2", "qty": 50}, {"cell": "B-1", "qty": 40}],
    },
    "/cells/A-1": {
        "cell": "A-1",
        "items": [
            {"item": "SKU-A", "qty": 30, "weight_kg": 60.0},
            {"item": "SKU-B", "qty": 1, "weight_kg": 25.0},
        ],
        "qty": 31,
        "weight_kg": 85.0,
        "capacity_kg": 100.0,
        "over": False,
    },
    "/cells/A-2": {
        "cell": "A-2",
        "items": [
            {"item": "SKU-A", "qty": 10, "weight_kg": 20.0},
            {"item": "SKU-B", "qty": 9, "weight_kg": 225.0},
            {"item": "SKU-C", "qty": 50, "weight_kg": 5.0},
        ],
        "qty": 69,
        "weight_kg": 250.0,
        "capacity_kg": 500.0,
        "over": False,
    },
    "/cells/B-1": {
        "cell": "B-1",
        "items": [
            {"item": "SKU-B", "qty": 2, "weight_kg": 50.0},
            {"item": "SKU-C", "qty": 40, "weight_kg": 4.0},
        ],
        "qty": 42,
        "weight_kg": 54.0,
        "capacity_kg": 50.0,
        "over": True,
    },
    f"/workers/anna/days/{D1}": worker_day("anna", D1, 3, 60, 0),
    f"/workers/ben/days/{D1}": worker_day("ben", D1, 3, 145, 0),
    f"/workers/carla/days/{D1}": worker_day("carla", D1, 2, 13, 1),
    f"/workers/anna/days/{D2}": worker_day("anna", D2, 3, 77, 1),
    f"/workers/ben/days/{D2}": worker_day("ben", D2, 4, 71, 0),
    f"/workers/carla/days/{D2}": worker_day("carla", D2, 3, 34, 0),
    "/corrections": {"count": 2, "corrections": [PHASE1[6].to_dict(), PHASE2[3].to_dict()]},
    "/corrections?item=SKU-C": {"count": 1, "corrections": [PHASE2[3].to_dict()]},
    "/over-capacity": {
        "count": 1,
        "cells": [{"cell": "B-1", "weight_kg": 54.0, "capacity_kg": 50.0, "excess_kg": 4.0}],
    },
    "/stock": {
        "items": {"SKU-A": 40, "SKU-B": 12, "SKU-C": 90},
        "cells": {
            "SKU-A|A-1": 30,
            "SKU-A|A-2": 10,
            "SKU-A|B-1": 0,
            "SKU-B|A-1": 1,
            "SKU-B|A-2": 9,
            "SKU-B|B-1": 2,
            "SKU-C|A-1": 0,
            "SKU-C|A-2": 50,
            "SKU-C|B-1": 40,
        },
    },
}


# ---------------------------------------------------------------- helpers


def get(base: str, path: str) -> tuple[int, dict[str, Any], str | None]:
    try:
        with urllib.request.urlopen(base + path, timeout=60) as resp:
            return resp.status, json.load(resp), resp.headers.get("X-Ledger-Synced")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), e.headers.get("X-Ledger-Synced")


class ServiceProcess:
    """``python -m strom.examples.ledger serve`` as a child process."""

    def __init__(self, bootstrap: str, log: Path) -> None:
        self.bootstrap = bootstrap
        self.port = free_port()
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServiceProcess:
        with open(self.log, "ab") as f:
            self.proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "strom.examples.ledger", "serve"),
                    *("--bootstrap", self.bootstrap, "--port", str(self.port), "--sync-timeout", "30"),
                ],
                stdout=f,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                get(self.url, "/health")
                return self
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"service did not start: {self.log.read_text()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def service_log(tmp_path: Path) -> Path:
    return tmp_path / "service.log"


def run_job(spark: Any, bootstrap: str, ckpt: Path) -> None:
    from strom.examples.ledger.job import JobConfig, run

    run(spark, JobConfig(bootstrap=bootstrap, checkpoint=str(ckpt)), timeout=300)


def run_job_process(bootstrap: str, ckpt: Path, log: Path) -> None:
    """The job as its own driver process (the CLI), as a restart of the job would be."""
    with open(log, "ab") as f:
        rc = subprocess.run(
            [
                *(sys.executable, "-m", "strom.examples.ledger", "run", "--bootstrap", bootstrap),
                *("--checkpoint", str(ckpt), "--available-now", "--master", "local[2]", "--timeout", "240"),
            ],
            stdout=f,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
            timeout=300,
        ).returncode
    assert rc == 0, log.read_text()[-5000:]


def counts_only(path: str, body: Any, want: Any) -> Any:
    """A worker-day answer cut to the fields ``want`` names (the hand-computed counts; the rows,
    nets and pay are checked by test_ledger_booking)."""
    if path.startswith("/workers/") and isinstance(body, dict) and isinstance(want, dict):
        return {k: body.get(k) for k in want}
    return body


def check(url: str, expected: dict[str, Any]) -> None:
    for path, want in expected.items():
        status, body, synced = get(url, path)
        assert status == 200, (path, body)
        assert synced == "true", path
        assert counts_only(path, body, want) == want, path


def check_unknown(url: str) -> None:
    assert get(url, "/items/SKU-NOPE")[0] == 404
    assert get(url, "/cells/Z-9")[0] == 404
    assert get(url, "/nowhere")[0] == 404


def alerts(bootstrap: str) -> list[tuple[str, dict[str, Any]]]:
    """Every committed record of the ``alerts`` topic."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "test-alerts",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        c.assign([TopicPartition(model.ALERTS, 0, OFFSET_BEGINNING)])
        out: list[tuple[str, dict[str, Any]]] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = c.poll(1.0)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(str(err))
            key, value = msg.key(), msg.value()
            assert key is not None and value is not None
            out.append((key.decode(), json.loads(value)))
        raise AssertionError("alerts: no end of partition")
    finally:
        c.close()


@pytest.fixture
def services() -> Iterator[list[ServiceProcess]]:
    pytest.importorskip("confluent_kafka")  # the example's producer, service and writer use it
    started: list[ServiceProcess] = []
    yield started
    for s in started:
        s.stop()


# ---------------------------------------------------------------- tests


def test_hand_checked_ledger_through_restarts(
    spark: Any, broker: BrokerProcess, tmp_path: Path, services: list[ServiceProcess]
) -> None:
    from strom.examples.ledger.producer import produce_ledger, produce_master

    bs = broker.bootstrap
    ckpt = tmp_path / "ck"
    produce_master(bs, ITEMS, CELLS)
    assert produce_ledger(bs, PHASE1) == 12
    # the hand-computed answers agree with the reference projection
    ref = model.project(PHASE1, ITEMS, CELLS)
    assert model.answer_stock(ref) == EXPECTED1["/stock"]
    assert model.answer_cell(ref, "B-1") == EXPECTED1["/cells/B-1"]

    run_job(spark, bs, ckpt)
    svc = ServiceProcess(bs, tmp_path / "service-1.log").start()
    services.append(svc)
    check(svc.url, EXPECTED1)
    check_unknown(svc.url)
    assert [(k, a["excess_g"]) for k, a in alerts(bs)] == [("B-1", 26_000)]

    # restart of the job, as a new driver process: nothing new, nothing changes
    run_job_process(bs, ckpt, tmp_path / "job-restart.log")
    check(svc.url, EXPECTED1)

    # restart of the service: it rebuilds its state from the compacted topics
    svc.stop()
    svc = ServiceProcess(bs, tmp_path / "service-2.log").start()
    services.append(svc)
    check(svc.url, EXPECTED1)

    # restart of the broker (same data): the running service reconnects; a new one reads it all
    broker.stop()
    broker.start()
    check(svc.url, EXPECTED1)
    svc2 = ServiceProcess(bs, tmp_path / "service-3.log").start()
    services.append(svc2)
    check(svc2.url, EXPECTED1)

    # more movements (incl. the second storno), the job runs again from its checkpoint
    assert produce_ledger(bs, PHASE2) == 8
    assert model.answer_stock(model.project(PHASE1 + PHASE2, ITEMS, CELLS)) == EXPECTED2["/stock"]
    run_job(spark, bs, ckpt)
    check(svc.url, EXPECTED2)
    check(svc2.url, EXPECTED2)
    assert [(k, a["excess_g"]) for k, a in alerts(bs)] == [("B-1", 26_000), ("B-1", 4_000)]

    # a micro-batch replayed after its transaction committed (crash before Spark's commit log):
    # skipped by its marker, so no second alert, and the state stays right
    commits = sorted((ckpt / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    commits[-1].unlink()
    (commits[-1].parent / f".{commits[-1].name}.crc").unlink(missing_ok=True)
    run_job(spark, bs, ckpt)
    check(svc2.url, EXPECTED2)
    assert len(alerts(bs)) == 2
    more = [mv(21, D2, "ben", "SKU-C", "B-1", -40, 0.1, "pick SO-7")]
    produce_ledger(bs, more)
    run_job(spark, bs, ckpt)
    status, body, _ = get(svc2.url, "/cells/B-1")
    assert status == 200
    assert body["weight_kg"] == 50.0 and not body["over"]
    assert get(svc2.url, "/over-capacity")[1] == {"count": 0, "cells": []}
    path = f"/workers/ben/days/{D2}"
    assert counts_only(path, get(svc2.url, path)[1], worker_day("ben", D2, 5, 111, 0)) == worker_day(
        "ben", D2, 5, 111, 0
    )


def test_generated_ledger_matches_projection(
    spark: Any, broker: BrokerProcess, tmp_path: Path, services: list[ServiceProcess]
) -> None:
    from strom.examples.ledger.generator import GeneratorConfig, day_slice, generate
    from strom.examples.ledger.producer import produce_ledger, produce_master

    bs = broker.bootstrap
    cfg = GeneratorConfig(
        seed=7, items=25, cells=12, workers=4, days=4, movements_per_day=120, mistake_rate=0.08
    )
    w = generate(cfg)
    assert sum(m.is_storno for m in w.movements) >= 5
    produce_master(bs, w.items, w.cells)
    first = w.movements[: len(w.movements) - len(day_slice(w, cfg.start, 2))]
    produce_ledger(bs, first)
    ckpt = tmp_path / "ck"
    run_job(spark, bs, ckpt)
    svc = ServiceProcess(bs, tmp_path / "service.log").start()
    services.append(svc)

    def compare(movements: list[Movement]) -> None:
        ref = model.project(movements, w.items, w.cells)
        want: dict[str, Any] = {
            "/stock": model.answer_stock(ref),
            "/corrections": model.answer_corrections(ref),
            "/over-capacity": model.answer_over_capacity(ref),
        }
        for it in w.items:
            want[f"/items/{it.item}"] = model.answer_item(ref, it.item)
        for c in w.cells:
            want[f"/cells/{c.cell}"] = model.answer_cell(ref, c.cell)
        for m in movements:
            want[f"/workers/{m.worker}/days/{m.date}"] = model.answer_worker_day(ref, m.worker, m.date)
        check(svc.url, want)
        # and the rows themselves, view by view
        booked: dict[tuple[str, str], int] = {}
        for m in movements:
            booked[(m.item, m.cell)] = booked.get((m.item, m.cell), 0) + m.qty
        stock = get(svc.url, "/stock")[1]
        assert stock["cells"] == {f"{i}|{c}": q for (i, c), q in sorted(booked.items())}
        assert min(stock["cells"].values()) >= 0

    compare(first)
    produce_ledger(bs, day_slice(w, cfg.start, 2))
    run_job(spark, bs, ckpt)
    compare(w.movements)


def test_kill_9_job_driver_mid_stream(
    broker: BrokerProcess, tmp_path: Path, services: list[ServiceProcess]
) -> None:
    """The job running continuously is killed -9 (driver and JVM) while movements arrive; restarted
    from its checkpoint it leaves the views exactly as the ledger says."""
    from strom.examples.ledger.generator import GeneratorConfig, generate
    from strom.examples.ledger.producer import produce_ledger, produce_master

    bs = broker.bootstrap
    cfg = GeneratorConfig(
        seed=11, items=20, cells=10, workers=4, days=4, movements_per_day=80, mistake_rate=0.1
    )
    w = generate(cfg)
    produce_master(bs, w.items, w.cells)
    chunks = [w.movements[i::4] for i in range(4)]  # interleaved: stornos may precede originals
    ckpt = tmp_path / "ck"
    log = tmp_path / "job.log"
    with open(log, "ab") as f:
        job = subprocess.Popen(
            [
                *(sys.executable, "-m", "strom.examples.ledger", "run", "--bootstrap", bs),
                *("--checkpoint", str(ckpt), "--trigger-ms", "200", "--master", "local[2]"),
                *("--shuffle-partitions", "2", "--max-offsets-per-trigger", "60"),
            ],
            stdout=f,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
            start_new_session=True,
        )
    try:
        produce_ledger(bs, chunks[0])
        produce_ledger(bs, chunks[1])
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and len(list((ckpt / "commits").glob("[0-9]*"))) < 2:
            assert job.poll() is None, log.read_text()[-5000:]
            time.sleep(0.2)
        produce_ledger(bs, chunks[2])
        time.sleep(1.0)
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # the driver and its JVM, mid-stream
        job.wait()
    assert len(list((ckpt / "commits").glob("[0-9]*"))) >= 2, log.read_text()[-5000:]
    produce_ledger(bs, chunks[3])
    run_job_process(bs, ckpt, tmp_path / "job-2.log")
    svc = ServiceProcess(bs, tmp_path / "service.log").start()
    services.append(svc)
    ref = model.project(w.movements, w.items, w.cells)
    want: dict[str, Any] = {
        "/stock": model.answer_stock(ref),
        "/corrections": model.answer_corrections(ref),
        "/over-capacity": model.answer_over_capacity(ref),
    }
    for m in w.movements:
        want[f"/workers/{m.worker}/days/{m.date}"] = model.answer_worker_day(ref, m.worker, m.date)
    for c in w.cells:
        want[f"/cells/{c.cell}"] = model.answer_cell(ref, c.cell)
    check(svc.url, want)
