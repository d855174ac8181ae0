"""`strom connect serve` (Kafka Connect's REST API) and `strom connect run` as processes, against
a real broker: create, status, pause (nothing flows), resume, restart (nothing doubled), delete;
then a FileStreamSink run from a .properties file with --once."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from strom.testing.broker_process import BrokerProcess, free_port

from .conftest import create_topic
from .test_connect import consume_all

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]
SRC = str(Path(__file__).resolve().parents[2] / "src")


def http(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        return e.code, json.loads(raw) if raw else None


def wait_for(pred: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)


def values(bs: str, topic: str, n: int) -> list[bytes]:
    return [m.value() for m in consume_all(bs, topic, n, timeout=10)]


def test_rest_api_and_run(kbroker: BrokerProcess, tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    bs = kbroker.bootstrap
    create_topic(bs, "rest-lines")
    src = tmp_path / "in.txt"
    src.write_text("a\nb\nc\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, PYTHONPATH=SRC, PYSPARK_PYTHON=sys.executable)
    log = open(tmp_path / "serve.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "strom",
            "connect",
            "serve",
            "--bootstrap-server",
            bs,
            "--port",
            str(port),
            "--state-dir",
            str(tmp_path / "worker"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    try:

        def up() -> bool:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            with contextlib.suppress(OSError):
                return http("GET", url + "/")[0] == 200
            return False

        wait_for(up, 120)
        status, err = http(
            "POST", url + "/connectors", {"name": "src", "config": {"connector.class": "Nope"}}
        )
        assert status == 400 and err["error_code"] == 400 and "Nope" in err["message"]
        cfg = {
            "connector.class": "FileStreamSource",
            "file": str(src),
            "topic": "rest-lines",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
        }
        status, info = http("POST", url + "/connectors", {"name": "src", "config": cfg})
        assert status == 201 and info["name"] == "src" and info["type"] == "source"
        assert http("POST", url + "/connectors", {"name": "src", "config": cfg})[0] == 409
        wait_for(lambda: len(values(bs, "rest-lines", 3)) >= 3)
        assert http("GET", url + "/connectors") == (200, ["src"])
        assert http("GET", url + "/connectors/src/status")[1]["connector"]["state"] == "RUNNING"
        assert http("GET", url + "/connectors/src/config")[1]["file"] == str(src)
        assert http("GET", url + "/connectors/nope/status")[0] == 404

        assert http("PUT", url + "/connectors/src/pause")[0] == 202
        assert http("GET", url + "/connectors/src/status")[1]["connector"]["state"] == "PAUSED"
        with open(src, "a") as f:
            f.write("d\ne\n")
        time.sleep(4)
        assert values(bs, "rest-lines", 3) == [b"a", b"b", b"c"]
        assert http("PUT", url + "/connectors/src/resume")[0] == 202
        wait_for(lambda: len(values(bs, "rest-lines", 5)) >= 5)
        assert http("POST", url + "/connectors/src/restart")[0] == 204
        with open(src, "a") as f:
            f.write("f\n")
        wait_for(lambda: len(values(bs, "rest-lines", 6)) >= 6)
        time.sleep(2)
        assert values(bs, "rest-lines", 6) == [b"a", b"b", b"c", b"d", b"e", b"f"]
        assert http("DELETE", url + "/connectors/src")[0] == 204
        assert http("GET", url + "/connectors/src")[0] == 404
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()

    # strom connect run, a sink from a .properties file, --once
    out = tmp_path / "out.txt"
    props = tmp_path / "sink.properties"
    props.write_text(
        f"name=file-sink\nconnector.class=FileStreamSink\ntasks.max=1\nfile={out}\ntopics=rest-lines\n"
        "key.converter=org.apache.kafka.connect.storage.StringConverter\n"
        "value.converter=org.apache.kafka.connect.storage.StringConverter\n"
    )
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "strom",
            "connect",
            "run",
            str(props),
            "--bootstrap-server",
            bs,
            "--state-dir",
            str(tmp_path / "run"),
            "--once",
        ],
        env=env,
        capture_output=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr.decode()[-3000:]
    assert "6 records in, 6 out" in res.stdout.decode()
    assert out.read_text() == "a\nb\nc\nd\ne\nf\n"

    # a record the converter cannot read with errors.tolerance=none: exit 1, one line, no traceback
    from confluent_kafka import Producer

    create_topic(bs, "rest-bad")
    p = Producer({"bootstrap.servers": bs})
    p.produce("rest-bad", value=b"{not json")
    p.flush(10)
    bad = tmp_path / "bad.properties"
    bad.write_text(
        f"name=bad\nconnector.class=FileStreamSink\nfile={tmp_path / 'bad.txt'}\ntopics=rest-bad\n"
    )
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "strom",
            "connect",
            "run",
            str(bad),
            "--bootstrap-server",
            bs,
            "--state-dir",
            str(tmp_path / "run"),
            "--once",
        ],
        env=env,
        capture_output=True,
        timeout=300,
    )
    err = res.stderr.decode()
    assert res.returncode == 1, err[-3000:]
    assert "strom connect: connector bad failed: Tolerance exceeded in error handler" in err
    assert "VALUE_CONVERTER" in err and "Traceback" not in err
