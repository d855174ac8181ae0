"""Cost of the controller state machine's operations, without I/O or a quorum.

Times CreateTopics for 1, 100, 1,000 and 10,000 partitions (the operation itself, then the
commit path a runtime adds: each record through the metadata codec and replayed), and fencing a
broker that leads a third of the cluster's partitions. Median of ``--runs`` runs, in ms.

    PYTHONPATH=src python bench/controller_ops.py --brokers 3 --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import time

from strom.testing.controller import ControllerHarness, create_topic_request, heartbeat_request


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    rf = min(3, args.brokers)
    for n in (1, 100, 1000, 10000):
        op_ms, commit_ms = [], []
        for run in range(args.runs):
            h = ControllerHarness(seed=run)
            h.start_brokers(args.brokers)
            t0 = time.perf_counter()
            result = h.controller.create_topics(create_topic_request("t", n, rf))
            t1 = time.perf_counter()
            h.commit(result)
            t2 = time.perf_counter()
            op_ms.append((t1 - t0) * 1000)
            commit_ms.append((t2 - t1) * 1000)
        print(
            f"CreateTopics {n:>6} partitions rf={rf}: operation {statistics.median(op_ms):9.2f} ms,"
            f" codec+replay {statistics.median(commit_ms):9.2f} ms ({n + 1} records)"
        )
    h = ControllerHarness()
    h.start_brokers(args.brokers)
    h.commit(h.controller.create_topics(create_topic_request("t", 10000, rf)))
    t0 = time.perf_counter()
    result = h.controller.broker_heartbeat(
        heartbeat_request(0, h.epoch(0), h.next_offset, want_fence=True), 0
    )
    t1 = time.perf_counter()
    print(
        f"fencing broker 0 of {args.brokers} (10000 partitions): {(t1 - t0) * 1000:.2f} ms,"
        f" {len(result.records)} records"
    )


if __name__ == "__main__":
    main()
