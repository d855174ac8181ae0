"""Restart-exactness of the strom source: a streaming query stopped (or its driver killed -9)
and restarted from its checkpoint reads every record exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from strom.testing.broker_process import BrokerProcess

from .conftest import create_topic, produce, values

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]

JOB = str(Path(__file__).with_name("driver_job.py"))


def start_job(broker: BrokerProcess, topic: str, ckpt: Path, out: Path, mode: str) -> subprocess.Popen[bytes]:
    pytest.importorskip("pyspark")
    log = open(out.parent / f"driver-{mode}.log", "ab")  # noqa: SIM115 - handed to the child
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    return subprocess.Popen(
        [sys.executable, JOB, broker.bootstrap, topic, str(ckpt), str(out), mode],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def batches(out: Path) -> dict[int, list[list[list[object]]]]:
    by_id: dict[int, list[list[list[object]]]] = defaultdict(list)
    for f in out.glob("batch-*.json"):
        by_id[int(f.name.split("-")[1])].append(json.loads(f.read_text()))
    return by_id


def check_exactly_once(out: Path, want: set[tuple[int, int, str]]) -> int:
    """Replayed batches are identical; the distinct batches hold each record exactly once."""
    seen: list[tuple[int, int, str]] = []
    replays = 0
    for _bid, attempts in sorted(batches(out).items()):
        first = sorted(map(tuple, attempts[0]))
        for other in attempts[1:]:
            replays += 1
            assert sorted(map(tuple, other)) == first, "a replayed micro-batch differs from its first run"
        seen.extend(first)  # type: ignore[arg-type]
    assert len(seen) == len(set(seen)), "duplicated records"
    assert set(seen) == want, f"missing {len(want - set(seen))}, unexpected {len(set(seen) - want)}"
    return replays


def expected(topic: str, n: int, start: int = 0) -> set[tuple[int, int, str]]:
    return {(p, i, f"{topic}-p{p}-{i}") for p in range(3) for i in range(start, start + n)}


def fill(broker: BrokerProcess, topic: str, n: int, start: int = 0) -> None:
    for p in range(3):
        produce(
            broker.bootstrap,
            topic,
            p,
            [
                (k, v.replace(b"x-", f"{topic}-p{p}-".encode(), 1), h, t)
                for k, v, h, t in values("x", n, start)
            ],
        )


def test_stop_produce_restart(kbroker: BrokerProcess, tmp_path: Path) -> None:
    topic = "restart"
    create_topic(kbroker.bootstrap, topic, 3)
    fill(kbroker, topic, 40)
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    out.mkdir()
    assert start_job(kbroker, topic, ckpt, out, "available-now").wait(240) == 0
    first = sum(len(a[0]) for a in batches(out).values())
    assert first == 120
    fill(kbroker, topic, 30, start=40)
    assert start_job(kbroker, topic, ckpt, out, "available-now").wait(240) == 0
    check_exactly_once(out, expected(topic, 70))


def test_kill_9_driver_then_restart(kbroker: BrokerProcess, tmp_path: Path) -> None:
    topic = "killed"
    create_topic(kbroker.bootstrap, topic, 3)
    fill(kbroker, topic, 200)
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    out.mkdir()
    job = start_job(kbroker, topic, ckpt, out, "continuous")
    deadline = time.time() + 180
    while len(list(out.glob("batch-*.json"))) < 4 and time.time() < deadline:
        assert job.poll() is None, (out.parent / "driver-continuous.log").read_text()[-3000:]
        time.sleep(0.2)
    os.killpg(job.pid, signal.SIGKILL)  # the driver and its JVM, mid-stream
    job.wait()
    done = sum(len(a[0]) for a in batches(out).values())
    assert 0 < done < 600
    fill(kbroker, topic, 50, start=200)
    assert start_job(kbroker, topic, ckpt, out, "available-now").wait(300) == 0
    check_exactly_once(out, expected(topic, 250))
