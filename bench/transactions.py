"""Transactional produce throughput relative to plain idempotent produce, same broker, same run.

For each round: idempotent produce of COUNT records, then transactional produce of COUNT records
committing every N records (for each N given), all with confluent-kafka (librdkafka) against one
strom broker. The client is the same for every mode, so the ratios isolate what transactions
cost (AddPartitionsToTxn, EndTxn, markers written and fsynced). Rounds alternate the modes so
machine noise hits them alike; medians are reported.

usage: python bench/transactions.py [--count 200000] [--size 100] [--every 100,1000,10000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable

from _common import Variant, cpu_seconds, fmt, median, strom_broker
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(30)


def _produce_n(p: Producer, topic: str, payload: bytes, n: int) -> None:
    for _ in range(n):
        while True:
            try:
                p.produce(topic, payload, partition=0)
                break
            except BufferError:
                p.poll(0.01)


def _timed_rounds(count: int, every: int, one_round: Callable[[int], None]) -> float:
    """Run ``one_round(n)`` for rounds of ``every`` records until ``count``; records/s."""
    t0 = time.perf_counter()
    sent = 0
    while sent < count:
        n = min(every, count - sent)
        one_round(n)
        sent += n
    return count / (time.perf_counter() - t0)


def run_idempotent(bootstrap: str, count: int, payload: bytes, every: int) -> float:
    """Idempotent produce, flushing every ``every`` records: the same cadence as a transactional
    producer committing every ``every`` records, without the transaction protocol."""
    topic = f"idem-{uuid.uuid4().hex[:8]}"
    create(bootstrap, topic)
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                  "queue.buffering.max.messages": 1_000_000})

    def one_round(n: int) -> None:
        _produce_n(p, topic, payload, n)
        p.flush(120)

    return _timed_rounds(count, every, one_round)


def run_transactional(bootstrap: str, count: int, payload: bytes, every: int) -> float:
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    create(bootstrap, topic)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
                  "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
    p.init_transactions(30)

    def one_round(n: int) -> None:
        p.begin_transaction()
        _produce_n(p, topic, payload, n)
        p.commit_transaction(60)

    return _timed_rounds(count, every, one_round)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--every", default="100,1000,10000", help="commit every N records (comma separated)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    payload = b"x" * args.size
    everys = [int(x) for x in args.every.split(",")]
    idem: dict[int, list[float | None]] = {e: [] for e in everys}
    txn: dict[int, list[float | None]] = {e: [] for e in everys}
    idem_cpu: dict[int, list[float | None]] = {e: [] for e in everys}
    txn_cpu: dict[int, list[float | None]] = {e: [] for e in everys}
    with strom_broker(Variant("default")) as broker:
        pid = broker.proc.pid
        run_idempotent(broker.bootstrap, min(args.count, 20_000), payload, args.count)  # warm-up
        for r in range(args.rounds):
            for e in everys:
                c0 = cpu_seconds(pid)
                idem[e].append(run_idempotent(broker.bootstrap, args.count, payload, e))
                c1 = cpu_seconds(pid)
                txn[e].append(run_transactional(broker.bootstrap, args.count, payload, e))
                c2 = cpu_seconds(pid)
                idem_cpu[e].append((c1 - c0) * 1e6 / args.count)
                txn_cpu[e].append((c2 - c1) * 1e6 / args.count)
                print(f"round {r + 1}, every {e}: idempotent {fmt(idem[e][-1], 0)} msg/s, "
                      f"transactional {fmt(txn[e][-1], 0)} msg/s; broker CPU {fmt(idem_cpu[e][-1], 2)} vs "
                      f"{fmt(txn_cpu[e][-1], 2)} us/record")
    print(f"\nmedians over {args.rounds} rounds, {args.count} x {args.size} B records, one partition")
    print("(idempotent flushes every N records; transactional commits every N records)")
    print(f"{'N':>8}{'idempotent msg/s':>19}{'transactional msg/s':>22}{'txn/idempotent':>17}"
          f"{'broker CPU us/rec idem':>25}{'txn':>8}")
    for e in everys:
        mi, mt = median(idem[e]), median(txn[e])
        ratio = mt / mi if mi and mt else None
        print(f"{e:>8}{fmt(mi, 0):>19}{fmt(mt, 0):>22}{fmt(ratio, 2):>17}"
              f"{fmt(median(idem_cpu[e]), 2):>25}{fmt(median(txn_cpu[e]), 2):>8}")


if __name__ == "__main__":
    main()
