"""The interactive-query examples end to end on a live broker: the trade-statistics service
(strom.examples.tradestats) and the ledger's stock table on strom.streams
(strom.examples.ledger.streams_job). Each pipeline runs on the shared local SparkSession with
trigger availableNow, a ``strom streams serve`` instance (subprocess) answers from the result
topics, and every answer is compared with hand-worked numbers and with the plain-Python reference;
then more input is produced, the pipeline restarts from its checkpoint and the answers are checked
again (nothing missing or counted twice)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.testing.broker_process import BrokerProcess, free_port

pytest.importorskip("confluent_kafka")
pytestmark = pytest.mark.spark
SRC = str(Path(__file__).resolve().parents[2] / "src")
T0 = 1_700_000_040_000  # a multiple of 60 s: the start of a tumbling minute


class Server:
    """A ``strom streams serve`` subprocess (stopped at exit)."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.log = log
        with open(log, "wb") as f:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "strom.streams.serve", *args, "--session-timeout-ms", "6000",
                 "--metadata-refresh-ms", "300"],
                stdout=f, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": SRC})

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Callable[[list[str]], Server]]:
    started: list[Server] = []

    def make(args: list[str]) -> Server:
        s = Server(args, tmp_path / f"serve-{len(started)}.log")
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    except (ConnectionError, urllib.error.URLError):
        return 0, None


def until(what: str, fn: Callable[[], Any], want: Any, server: Server, timeout: float = 60.0) -> None:
    """Poll ``fn`` until it returns ``want`` (the answers converge as the server consumes)."""
    deadline = time.monotonic() + timeout
    got = None
    while time.monotonic() < deadline:
        got = fn()
        if got == want:
            return
        assert server.proc.poll() is None, server.log.read_text()
        time.sleep(0.3)
    raise AssertionError(f"{what}: got {got!r}, want {want!r}")


def test_tradestats_service_end_to_end(
    spark: Any, kbroker: BrokerProcess, tmp_path: Path, server_factory: Callable[[list[str]], Server]
) -> None:
    from strom.examples.tradestats import cli as ts

    b = kbroker.bootstrap
    m = 60_000
    first = [
        {"symbol": "AAPL", "price": 100.0, "volume": 10, "ts": T0},
        {"symbol": "MSFT", "price": 50.0, "volume": 20, "ts": T0 + 5_000},
        {"symbol": "AAPL", "price": 102.0, "volume": 5, "ts": T0 + 10_000},
        {"symbol": "GOOG", "price": 10.0, "volume": 3, "ts": T0 + 20_000},
        {"symbol": "AAPL", "price": 98.0, "volume": 1, "ts": T0 + m + 1_000},
    ]
    ts.produce(b, first)
    ck = str(tmp_path / "ck")
    for q in ts.start(spark, b, ck, {"availableNow": True}):
        q.awaitTermination()
        assert q.exception() is None

    # hand-worked: AAPL 3 trades, volume 16, prices 100/102/98, notional 1000 + 510 + 98
    stats, wins = ts.reference(first)
    assert ts.public(stats["AAPL"]) == {"count": 3, "volume": 16, "min": 98.0, "max": 102.0,
                                        "avg": 100.0, "notional": 1608.0}
    assert ts.public(wins[("AAPL", T0)]) == {"count": 2, "volume": 15, "min": 100.0, "max": 102.0,
                                             "avg": 101.0, "notional": 1510.0}
    assert ts.public(wins[("AAPL", T0 + m)])["count"] == 1

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    srv = server_factory(ts.serve_args(b, f"127.0.0.1:{port}"))

    def lookup(sym: str) -> Any:
        st, body = get(url + ts.query_path(sym, None, None, False, None, None))
        return body["value"] if st == 200 else st

    def key_range(lo: str, hi: str) -> Any:
        st, body = get(url + ts.query_path(None, lo, hi, False, None, None))
        return {e["key"]: e["value"] for e in body["entries"]} if st == 200 else st

    def windows(sym: str, since: int | None, until_: int | None) -> Any:
        st, body = get(url + ts.query_path(sym, None, None, True, since, until_))
        return [(w["start"], w["end"], w["value"]) for w in body["windows"]] if st == 200 else st

    def ref_windows(w: dict[tuple[str, int], Any], sym: str, lo: int, hi: int) -> list[Any]:
        return [(s, s + m, v) for (k, s), v in sorted(w.items()) if k == sym and lo <= s <= hi]

    until("AAPL stats", lambda: lookup("AAPL"), stats["AAPL"], srv)
    assert lookup("MSFT") == stats["MSFT"]
    assert lookup("NOPE") == 404
    assert key_range("A", "H") == {"AAPL": stats["AAPL"], "GOOG": stats["GOOG"]}
    assert windows("AAPL", T0, T0 + 10 * m) == ref_windows(wins, "AAPL", T0, T0 + 10 * m)
    assert [w[0] for w in windows("AAPL", T0 + 1, None)] == [T0 + m]

    # more trades, the pipeline restarted from its checkpoint: totals include each trade once
    more = [
        {"symbol": "GOOG", "price": 12.0, "volume": 7, "ts": T0 + m + 2_000},
        {"symbol": "AAPL", "price": 104.0, "volume": 4, "ts": T0 + m + 3_000},
        {"symbol": "IBM", "price": 20.0, "volume": 1, "ts": T0 + 2 * m},
    ]
    ts.produce(b, more)
    for q in ts.start(spark, b, ck, {"availableNow": True}):
        q.awaitTermination()
        assert q.exception() is None
    stats, wins = ts.reference(first + more)
    assert ts.public(stats["AAPL"]) == {"count": 4, "volume": 20, "min": 98.0, "max": 104.0,
                                        "avg": 101.0, "notional": 2024.0}
    until("AAPL after restart", lambda: lookup("AAPL"), stats["AAPL"], srv)
    until("all symbols", lambda: key_range("A", "Z"), stats, srv)
    for sym in stats:
        assert windows(sym, None, None) == ref_windows(wins, sym, 0, 1 << 62), sym


def test_ledger_stock_table_on_streams(
    spark: Any, kbroker: BrokerProcess, tmp_path: Path, server_factory: Callable[[list[str]], Server]
) -> None:
    from strom.examples.ledger import model
    from strom.examples.ledger import streams_job as sj
    from strom.examples.ledger.producer import produce_ledger

    b = kbroker.bootstrap
    sj._admin(b)

    def mv(id_: str, item: str, cell: str, qty: int, reverses: str | None = None) -> model.Movement:
        return model.Movement(id=id_, date="2024-03-04", time="09:00:00", item=item, cell=cell, qty=qty,
                              worker="anna", description="test", reverses=reverses)

    m1, m2, m3 = mv("M1", "SKU-A", "A-1", 20), mv("M2", "SKU-A", "B-1", 7), mv("M3", "SKU-A", "A-1", -5)
    m4 = mv("M4", "SKU-B", "A-1", 3)
    s1 = m3.storno("S1", "2024-03-04", "10:00:00", "anna", "wrong cell")  # +5 back into A-1
    first = [m1, m2, m3, m4, s1]
    produce_ledger(b, first, create=False)
    ck = str(tmp_path / "ck")
    q1, q2 = sj.start(spark, b, ck, {"availableNow": True})
    q2.awaitTermination()
    assert q1.exception() is None and q2.exception() is None

    ref = sj.reference(m.to_json() for m in first)
    # hand-worked: SKU-A in A-1 is 20 - 5 + 5 (the storno nets the pick out), in B-1 7, total 27
    assert ref["SKU-A|A-1"] == {"item": "SKU-A", "cell": "A-1", "qty": 20, "movements": 3, "stornos": 1}
    assert ref["SKU-A"]["qty"] == 27 and ref["SKU-B|A-1"]["qty"] == 3

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    srv = server_factory(sj.serve_args(b, f"127.0.0.1:{port}"))

    def lookup(item: str, cell: str | None) -> Any:
        st, body = get(url + sj.query_path(item, cell, False))
        return body["value"] if st == 200 else st

    def cells(item: str) -> Any:
        st, body = get(url + sj.query_path(item, None, True))
        return {e["key"]: e["value"] for e in body["entries"]} if st == 200 else st

    until("SKU-A in A-1", lambda: lookup("SKU-A", "A-1"), ref["SKU-A|A-1"], srv)
    assert lookup("SKU-A", None) == ref["SKU-A"]
    assert lookup("SKU-A", "C-9") == 404
    assert cells("SKU-A") == {"SKU-A|A-1": ref["SKU-A|A-1"], "SKU-A|B-1": ref["SKU-A|B-1"]}

    # more entries (a storno of M2 empties B-1) and a record that is not usable; restart
    more = [m2.storno("S2", "2024-03-05", "08:00:00", "bob", "never arrived"), mv("M5", "SKU-A", "C-2", 9)]
    produce_ledger(b, more, create=False)
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": b})
    p.produce(model.LEDGER, key=b"BAD", value=b'{"id": "BAD", "qty": 0}')
    assert p.flush(30) == 0
    q1, q2 = sj.start(spark, b, ck, {"availableNow": True})
    q2.awaitTermination()
    assert q1.exception() is None and q2.exception() is None
    ref = sj.reference([m.to_json() for m in first + more] + [b'{"id": "BAD", "qty": 0}'])
    assert ref["SKU-A|B-1"]["qty"] == 0 and ref["SKU-A"]["qty"] == 29
    until("SKU-A total after restart", lambda: lookup("SKU-A", None), ref["SKU-A"], srv)
    want_cells = {k: v for k, v in ref.items() if k.startswith("SKU-A|")}
    until("SKU-A cells", lambda: cells("SKU-A"), want_cells, srv)
    for k, v in ref.items():
        item, _, cell = k.partition("|")
        assert lookup(item, cell or None) == v, k
