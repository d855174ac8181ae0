"""Fixed-rate producer for bench/latency.py (confluent-kafka, i.e. librdkafka; run as its own process).

Each payload starts with ``LATENCY:<wall-clock µs>\\0`` - the format ``rdkafka_performance -C -l``
reads - stamped just before ``produce()``. Messages follow an absolute schedule t0 + i/rate, so a
slow moment is caught up rather than lowering the rate; waits of a millisecond or more are spent in
``poll()`` (serving delivery reports), shorter ones in ``time.sleep``, so the producer does not spin.
Per-message ack latency (produce() -> delivery report, µs) goes to ``--ack-file``; a JSON summary
goes to stdout.

usage: _paced_producer.py BOOTSTRAP TOPIC RATE COUNT SIZE --ack-file F [-X prop=val ...]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

from confluent_kafka import KafkaException, Producer


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("bootstrap")
    ap.add_argument("topic")
    ap.add_argument("rate", type=float)
    ap.add_argument("count", type=int)
    ap.add_argument("size", type=int)
    ap.add_argument("--ack-file", required=True)
    ap.add_argument("-X", action="append", default=[], dest="conf", metavar="prop=val")
    a = ap.parse_args()

    conf: dict[str, str] = {"bootstrap.servers": a.bootstrap}
    conf.update(x.split("=", 1) for x in a.conf)  # type: ignore[misc]
    p = Producer(conf)
    acks: list[int] = []
    errors = 0

    def on_delivery(err: object, msg: object) -> None:
        nonlocal errors
        now = time.time_ns() // 1000
        if err is not None:
            errors += 1
            return
        v = msg.value()  # type: ignore[attr-defined]
        acks.append(now - int(v[8:v.index(b"\0")]))

    # Warm the connection and metadata so the first message does not pay for them.
    p.list_topics(a.topic, timeout=10)
    pad = b"x" * a.size
    interval = 1.0 / a.rate
    t0 = time.monotonic()
    for i in range(a.count):
        due = t0 + i * interval
        wait = due - time.monotonic()
        if wait >= 0.001:
            p.poll(wait - 0.0005)
            wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        head = b"LATENCY:%d\0" % (time.time_ns() // 1000)
        while True:
            try:
                p.produce(a.topic, head + pad[len(head):], partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.001)
        p.poll(0)
    wall = time.monotonic() - t0
    left = p.flush(60)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    with open(a.ack_file, "w") as f:
        f.write("\n".join(map(str, acks)))
        f.write("\n")
    json.dump({"sent": a.count, "acked": len(acks), "errors": errors, "unflushed": left,
               "send_wall_s": wall, "achieved_rate": a.count / wall if wall else None,
               "cpu_s": ru.ru_utime + ru.ru_stime}, sys.stdout)
    print()
    return 0 if not errors and not left else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KafkaException as e:
        print(json.dumps({"error": str(e)}))
        sys.exit(2)
