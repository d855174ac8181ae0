"""CreateTopics latency on the metadata quorum, against the registry path, in one process.

A Broker (real clock, real files in a temp dir) with ``strom.metadata.quorum.enable`` on and off,
driven over the in-memory network: the latency of CreateTopics of one topic with 1, 100 and 1,000
partitions (median of ``--runs``), and, on the quorum path, metadata propagation: from the commit
of a batch (the Raft node hands it to the listener) to the broker having applied the published
image (logs made, topic visible).

    PYTHONPATH=src python bench/kraft_create_topics.py [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from strom.config import BrokerConfig
from strom.server.broker import Broker
from strom.testing.network import MemoryNetwork


def _config(data: Path, quorum: bool) -> BrokerConfig:
    return BrokerConfig.from_sources(None, {
        "log.dirs": str(data),
        "listeners": "PLAINTEXT://127.0.0.1:19092",
        "offsets.topic.num.partitions": "2",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.num.partitions": "1",
        "log.cleaner.enable": "false",
        "strom.metadata.quorum.enable": str(quorum).lower(),
    })


async def _run(quorum: bool, runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        broker = Broker(_config(Path(tmp), quorum))
        await broker.start(listen=False)
        commits: dict[int, float] = {}
        if broker.quorum is not None:  # time each commit as the listener receives it
            listener: Any = broker.quorum.node.listener  # type: ignore[union-attr]
            original = listener.handle_commit

            def timed(batches: Any) -> None:
                if batches:
                    commits[batches[-1].last_offset] = asyncio.get_running_loop().time()
                original(batches)

            listener.handle_commit = timed
        client = MemoryNetwork(broker).client()
        out: dict[str, Any] = {}
        try:
            for n in (1, 100, 1000):
                times = []
                for i in range(runs):
                    t0 = time.perf_counter()
                    result = await client.create_topics({f"t{n}-{i}": (n, 1)})
                    times.append((time.perf_counter() - t0) * 1000)
                    assert result == {f"t{n}-{i}": None}, result
                out[f"create {n} partitions (ms, median)"] = round(statistics.median(times), 1)
            if broker.quorum is not None:
                published = broker.quorum.publisher.published_at
                lags = [(published[o] - t) * 1000 for o, t in commits.items() if o in published]
                if lags:
                    out["commit -> image applied (ms, median)"] = round(statistics.median(lags), 2)
                    out["commit -> image applied (ms, max)"] = round(max(lags), 2)
        finally:
            await broker.stop()
        return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    for quorum in (False, True):
        os.sync()  # the writeback of a previous run would slow this one (log creation is disk-bound)
        print("quorum" if quorum else "registry", asyncio.run(_run(quorum, args.runs)))


if __name__ == "__main__":
    main()
