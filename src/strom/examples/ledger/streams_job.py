"""The warehouse ledger on ``strom.streams``: stock per (item, cell) and per item as a table,
answered by the state server (``python -m strom.examples.ledger streams run|serve|query``).

Theory of operation
-------------------
The ledger topic (``ledger``, key = the movement id) is re-keyed as Kafka Streams would, through
a repartition topic: query ``keyed`` turns each usable ledger record (``model.check_record``)
into two records, key ``"item|cell"`` and key ``"item"``, value ``{"item", "cell", "qty"}``
(a storno carries the negated quantity, so it nets out), and writes them to
``ledger-streams-keyed`` (murmur2 of the key, so each key lives in one partition). Query
``stock`` sums per key ``{"item", "cell", "qty", "movements", "stornos"}`` (``cell`` is null for
an item's total) into the compacted ``ledger-streams-stock``. Both are exactly-once and resume
from ``--checkpoint``. One table holds both views: ``SKU|CELL`` is the stock of an item in a
cell, ``SKU`` the item's total, and the key range ``SKU|`` .. ``SKU|~`` all cells of an item
(``|`` sorts before every letter and digit used in ids; ``~`` after them).

The state server (``strom streams serve``, table ``stock``) answers ``query ITEM [CELL]`` and
``query ITEM --cells``. Records that fail ``check_record`` are skipped here (the plain Spark job
of :mod:`.job` writes them to the dead-letter topic).

Error contract: a missing broker or server gives a one-line error and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from typing import Any

from strom.examples.ledger import model

KEYED, STOCK = "ledger-streams-keyed", "ledger-streams-stock"
PARTITIONS = 3
APP = "ledger-streams"


def rekey(key: Any, value: Any) -> list[tuple[Any, Any]]:
    """A ledger record as its (item, cell) and item records; unusable records give nothing."""
    try:
        d = json.loads(value) if isinstance(value, (str, bytes)) else None
    except ValueError:
        return []
    if value is None or model.check_record(d) is not None:
        return []
    assert isinstance(d, dict)
    storno = 1 if d.get("reverses") else 0
    v = {"item": d["item"], "cell": d["cell"], "qty": d["qty"], "storno": storno}
    return [(f"{d['item']}|{d['cell']}", v), (d["item"], {**v, "cell": None})]


def empty() -> dict[str, Any]:
    return {"item": None, "cell": None, "qty": 0, "movements": 0, "stornos": 0}


def add(agg: dict[str, Any], v: dict[str, Any]) -> dict[str, Any]:
    return {
        "item": v["item"],
        "cell": v["cell"],
        "qty": agg["qty"] + int(v["qty"]),
        "movements": agg["movements"] + 1,
        "stornos": agg["stornos"] + int(v["storno"]),
    }


def reference(records: Iterable[bytes]) -> dict[str, dict[str, Any]]:
    """The stock table in plain Python from the ledger records' values (the tests' oracle)."""
    out: dict[str, dict[str, Any]] = {}
    for raw in records:
        for k, v in rekey(None, raw):
            out[k] = add(out.get(k) or empty(), v)
    return out


def _admin(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    a = AdminClient({"bootstrap.servers": bootstrap})
    topics = [
        NewTopic(model.LEDGER, PARTITIONS, 1, config={"cleanup.policy": "delete", "retention.ms": "-1"}),
        NewTopic(KEYED, PARTITIONS, 1),
        NewTopic(STOCK, PARTITIONS, 1, config={"cleanup.policy": "compact"}),
    ]
    for t, f in a.create_topics(topics, operation_timeout=30).items():
        try:
            f.result(30)
        except Exception as e:  # already exists is fine
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise SystemExit(f"ledger streams: cannot create {t}: {e}") from None


def start(spark: Any, bootstrap: str, checkpoint: str, trigger: dict[str, Any]) -> tuple[Any, Any]:
    """Both queries (with ``availableNow`` the re-keying runs to its end before the sums start)."""
    from strom import streams

    q1 = (
        streams.stream(spark, model.LEDGER, bootstrap=bootstrap, value_serde="string")
        .flat_map(rekey)
        .to(KEYED, os.path.join(checkpoint, "keyed"), value_serde="json", trigger=trigger,
            query_name="ledger_streams_keyed")
    )
    if trigger.get("availableNow"):
        q1.awaitTermination()
    q2 = (
        streams.stream(spark, KEYED, bootstrap=bootstrap, value_serde="json")
        .group_by_key()
        .aggregate(empty, add)
        .to(STOCK, os.path.join(checkpoint, "stock"), trigger=trigger, query_name="ledger_streams_stock")
    )
    return q1, q2


def run(bootstrap: str, checkpoint: str, available_now: bool) -> None:
    from strom.examples import _io

    _admin(bootstrap)
    _io.run_pipeline(
        "strom-ledger-streams", "ledger streams",
        lambda spark, trigger: start(spark, bootstrap, checkpoint, trigger), available_now,
    )


def serve_args(bootstrap: str, server: str) -> list[str]:
    return ["--bootstrap-server", bootstrap, "--application-id", APP, "--application-server", server,
            "--table", f"stock={STOCK}:json"]


def query_path(item: str, cell: str | None, cells: bool) -> str:
    if cells:
        q = urllib.parse.urlencode({"from": f"{item}|", "to": f"{item}|~"})
        return f"/tables/stock/range?{q}"
    key = item if cell is None else f"{item}|{cell}"
    return f"/tables/stock/keys/{urllib.parse.quote(key, safe='')}"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m strom.examples.ledger streams",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--bootstrap-server", "--bootstrap", dest="bootstrap",
                    default=os.environ.get("STROM_BOOTSTRAP", "127.0.0.1:9092"))
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the two streams queries")
    r.add_argument("--checkpoint", required=True)
    r.add_argument("--available-now", action="store_true")
    s = sub.add_parser("serve", help="the state server (strom streams serve) over the stock table")
    s.add_argument("--application-server", default="127.0.0.1:8090", metavar="HOST:PORT")
    q = sub.add_parser("query", help="ask the state server: ITEM [CELL] | ITEM --cells")
    q.add_argument("item")
    q.add_argument("cell", nargs="?")
    q.add_argument("--cells", action="store_true", help="every cell of ITEM (a key range)")
    q.add_argument("--server", default="127.0.0.1:8090")
    a = ap.parse_args(argv)
    if a.cmd == "run":
        run(a.bootstrap, a.checkpoint, a.available_now)
        return 0
    if a.cmd == "serve":
        from strom.streams import serve

        return serve.main(serve_args(a.bootstrap, a.application_server))
    url = f"http://{a.server}" + query_path(a.item, a.cell, a.cells)
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = resp.read()
    except urllib.error.HTTPError as e:
        print(e.read().decode(), file=sys.stderr)
        return 1
    except (OSError, urllib.error.URLError) as e:
        print(f"ledger streams: cannot reach {a.server}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(json.loads(body), indent=2))
    return 0
