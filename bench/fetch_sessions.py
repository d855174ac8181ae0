"""Incremental fetch sessions (KIP-227) against sessionless fetches of many partitions.

One ``strom serve`` with a topic of ``--partitions`` partitions, ``--hot`` of which receive
records while the others stay idle, as a consumer of a big topic mostly sees. Over one
connection (strom's own client, in this process), ``--fetches`` Fetch requests (max_wait 0) each:

* ``sessionless``: every request lists every partition, every answer carries every partition
  (what strom did before, and what Kafka does when its session cache is full);
* ``incremental``: one full fetch opens a session, then every request names only the hot
  partitions whose offset moved, every answer only the partitions with news.

Between two fetches a producer in the same process appends one record to each hot partition.
Prints fetches/s, partitions named and answered per fetch, and the broker's CPU per fetch (from
/proc), medians of ``--runs`` runs alternating the two modes.

    PYTHONPATH=src python bench/fetch_sessions.py [--partitions 1000] [--hot 10] [--fetches 300]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from _common import cpu_seconds

from strom.client.connection import KafkaConnection
from strom.protocol.records import build_batch, iter_batches
from strom.testing.broker_process import BrokerProcess

FETCH, PRODUCE, METADATA = 1, 0, 3


def _fetch(sid: int, epoch: int, tid: uuid.UUID, offsets: dict[int, int]) -> dict[str, Any]:
    return {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 26, "isolation_level": 0,
        "session_id": sid, "session_epoch": epoch,
        "topics": [{"topic_id": tid, "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": o, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": 1 << 20} for p, o in offsets.items()]}]
        if offsets else [],
        "forgotten_topics_data": [], "rack_id": "",
    }


async def run(b: BrokerProcess, topic: str, tid: uuid.UUID, parts: int, hot: list[int], fetches: int,
              incremental: bool) -> dict[str, float]:
    conn = await KafkaConnection.open("127.0.0.1", b.port)
    prod = await KafkaConnection.open("127.0.0.1", b.port)
    v = conn.version(FETCH)
    offsets = dict.fromkeys(range(parts), 0)
    # start at the end of every partition
    lo = await conn.request(2, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}
                                       for p in range(parts)]}]}, version=7)
    for p in lo.topics[0].partitions:
        offsets[int(p.partition_index)] = int(p.offset)
    sid, epoch = 0, 0 if incremental else -1
    cpu0 = cpu_seconds(b.proc.pid)
    t0 = time.perf_counter()
    sent = recv = 0
    changed: dict[int, int] = dict(offsets)  # what the next request names
    for _ in range(fetches):
        batch = build_batch([(None, b"x" * 100, [], int(time.time() * 1000))])
        await prod.request(PRODUCE, {"transactional_id": None, "acks": 1, "timeout": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": p, "records": batch} for p in hot]}]}, version=9)
        req = _fetch(sid, epoch, tid, changed if (incremental and sid) else offsets)
        resp = await conn.request(FETCH, req, version=v)
        sent += len(req["topics"][0]["partitions"]) if req["topics"] else 0
        recv += sum(len(t.partitions) for t in resp.responses)
        changed = {}
        for t in resp.responses:
            for pd in t.partitions:
                if pd.records:
                    last = [h.last_offset for _pos, h in iter_batches(bytes(pd.records))][-1]
                    offsets[int(pd.partition_index)] = last + 1
                    changed[int(pd.partition_index)] = last + 1
        if incremental:
            sid = int(resp.session_id)
            epoch = 1 if epoch == 0 else epoch + 1
    wall = time.perf_counter() - t0
    cpu = cpu_seconds(b.proc.pid) - cpu0
    await conn.close()
    await prod.close()
    return {"fetches/s": fetches / wall, "partitions named/fetch": sent / fetches,
            "partitions answered/fetch": recv / fetches, "broker CPU ms/fetch": 1000 * cpu / fetches}


async def topic_id(b: BrokerProcess, topic: str) -> uuid.UUID:
    conn = await KafkaConnection.open("127.0.0.1", b.port)
    try:
        md = await conn.request(METADATA, {"topics": [{"topic_id": None, "name": topic}],
                                           "allow_auto_topic_creation": False,
                                           "include_topic_authorized_operations": False}, version=12)
        return md.topics[0].topic_id
    finally:
        await conn.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--hot", type=int, default=10)
    ap.add_argument("--fetches", type=int, default=300)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    from confluent_kafka.admin import AdminClient, NewTopic

    with tempfile.TemporaryDirectory(prefix="strom-fs-") as tmp:
        b = BrokerProcess(Path(tmp) / "data")
        b.start()
        try:
            topic = f"fs-{uuid.uuid4().hex[:6]}"
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            admin.create_topics([NewTopic(topic, a.partitions, 1)])[topic].result(120)
            tid = asyncio.run(topic_id(b, topic))
            hot = list(range(0, a.partitions, max(1, a.partitions // a.hot)))[: a.hot]
            res: dict[str, list[dict[str, float]]] = {"sessionless": [], "incremental": []}
            modes = ["sessionless", "incremental"]
            for r in range(a.runs):
                for mode in modes if r % 2 == 0 else modes[::-1]:
                    out = asyncio.run(run(b, topic, tid, a.partitions, hot, a.fetches, mode == "incremental"))
                    print(f"run {r + 1} {mode:12s} " + ", ".join(f"{k} {v:,.1f}" for k, v in out.items()),
                          flush=True)
                    res[mode].append(out)
        finally:
            b.stop()
    print(f"\n== {a.partitions} partitions, {a.hot} hot, {a.fetches} fetches per run; medians of {a.runs}")
    keys = list(res["sessionless"][0])
    print(f"{'':14s}" + "".join(f"{k:>26s}" for k in keys))
    for mode, rows in res.items():
        print(f"{mode:14s}" + "".join(f"{statistics.median(x[k] for x in rows):26,.1f}" for k in keys))
    s, i = (statistics.median(x["fetches/s"] for x in res[m]) for m in ("sessionless", "incremental"))
    print(f"incremental / sessionless fetches/s: {i / s:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
