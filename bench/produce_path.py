"""CPU time of the Produce request path above the log, in process: the handler, the replica
manager's checks and append bookkeeping, the response dict — with the log append itself stubbed
out (``--real-log`` keeps it), so what the request path costs per partition shows without disk
noise. Measured with ``time.process_time`` (best of ``--rounds``), so other load on the machine
moves it little.

    python bench/produce_path.py            # µs of CPU per partition, 1 and 8 partitions a request
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from typing import Any

from strom.config import BrokerConfig
from strom.log.partition_log import AppendInfo, PartitionLog
from strom.protocol.codec import build, request_type
from strom.protocol.records import build_batch
from strom.server.broker import Broker
from strom.server.context import RequestContext
from strom.server.handlers import load_all


async def _run(broker: Broker, parts: int, n: int) -> float:
    records = build_batch([(b"k", b"x" * 1000, [], 1)])
    request = build(
        request_type(0, 9),
        {
            "transactional_id": None,
            "acks": 1,
            "timeout": 30000,
            "topic_data": [
                {"name": "t", "partition_data": [{"index": p, "records": records} for p in range(parts)]}
            ],
        },
    )
    ctx = RequestContext(0, 9, 1, "bench", "127.0.0.1", "c1", broker)
    handle = load_all()[0]
    for _ in range(200):
        await handle(ctx, request)
    start = time.process_time()
    for _ in range(n):
        await handle(ctx, request)
    return (time.process_time() - start) / n / parts * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--real-log", action="store_true", help="append to the log for real (disk)")
    args = ap.parse_args()
    if not args.real_log:
        info = AppendInfo(0, 0, -1, 0, 1)

        def stub(self: PartitionLog, *_a: Any, **_k: Any) -> AppendInfo:
            return info

        PartitionLog.append_as_leader = stub  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as d:
        config = BrokerConfig.from_sources(None, {"log.dirs": d, "listeners": "PLAINTEXT://127.0.0.1:0"})
        broker = Broker(config)
        broker.create_topic("t", 8)
        try:
            for parts in (1, 8):
                best = min(asyncio.run(_run(broker, parts, args.requests)) for _ in range(args.rounds))
                print(f"{parts} partition(s) a request: {best:.2f} µs of CPU per partition")
        finally:
            for plog in broker.logs.values():
                plog.close()


if __name__ == "__main__":
    main()
