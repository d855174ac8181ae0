"""``python -m strom.examples.wordcount``: Kafka Streams' WordCountDemo on ``strom.streams``.

Theory of operation
-------------------
Topic ``wordcount-input`` holds lines of text. As in Kafka Streams, re-keying by word goes
through a repartition topic: query 1 splits each line into lower-case words and writes them keyed
by word to ``wordcount-words`` (partitioned by Kafka's default partitioner, so each word lives in
one partition); query 2 counts per word and writes every new count to the compacted topic
``wordcount-counts``. Both are exactly-once and resume from ``--checkpoint``.

Commands: ``produce LINE...`` (one record per line), ``run`` (both queries; ``--available-now``
processes what is there and stops), ``show`` (the latest count per word, read_committed).

Error contract: a missing broker gives a one-line error and exit status 1.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from collections.abc import Sequence
from typing import Any

INPUT, WORDS, COUNTS = "wordcount-input", "wordcount-words", "wordcount-counts"


def split_words(key: Any, line: Any) -> list[tuple[str, str]]:
    return [(w, w) for w in re.split(r"\W+", str(line).lower()) if w]


def _admin(bootstrap: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    a = AdminClient({"bootstrap.servers": bootstrap})
    topics = [
        NewTopic(INPUT, partitions, 1),
        NewTopic(WORDS, partitions, 1),
        NewTopic(COUNTS, partitions, 1, config={"cleanup.policy": "compact"}),
    ]
    for t, f in a.create_topics(topics).items():
        try:
            f.result(30)
        except Exception as e:  # already exists is fine
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise SystemExit(f"wordcount: cannot create {t}: {e}") from None


def produce(bootstrap: str, lines: Sequence[str]) -> int:
    from confluent_kafka import Producer

    _admin(bootstrap, 2)
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for line in lines:
        p.produce(INPUT, value=line.encode())
    left = p.flush(30)
    if left:
        raise SystemExit(f"wordcount: {left} lines not delivered to {bootstrap}")
    return len(lines)


def run(bootstrap: str, checkpoint: str, available_now: bool) -> None:
    from strom.examples import _io

    _admin(bootstrap, 2)
    _io.run_pipeline(
        "strom-wordcount", "wordcount",
        lambda spark, trigger: start(spark, bootstrap, checkpoint, trigger), available_now,
    )


def start(spark: Any, bootstrap: str, checkpoint: str, trigger: dict[str, Any]) -> tuple[Any, Any]:
    """Both queries (with ``availableNow`` the split runs to its end before the count starts)."""
    from strom import streams

    q1 = (
        streams.stream(spark, INPUT, bootstrap=bootstrap)
        .flat_map(split_words)
        .to(WORDS, os.path.join(checkpoint, "split"), trigger=trigger)
    )
    if trigger.get("availableNow"):
        q1.awaitTermination()
    q2 = (
        streams.stream(spark, WORDS, bootstrap=bootstrap)
        .group_by_key()
        .count()
        .to(COUNTS, os.path.join(checkpoint, "count"), value_serde="string", trigger=trigger)
    )
    return q1, q2


def counts(bootstrap: str, timeout: float = 30.0) -> dict[str, int]:
    """The latest committed count per word."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"wordcount-show-{os.getpid()}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        md = c.list_topics(COUNTS, timeout=10).topics[COUNTS]
        parts = list(md.partitions)
        c.assign([TopicPartition(COUNTS, p, OFFSET_BEGINNING) for p in parts])
        out: dict[str, int] = {}
        eof: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(eof) < len(parts) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    eof.add(int(m.partition() or 0))
                    continue
                raise SystemExit(f"wordcount: {err}")
            k, v = m.key(), m.value()
            if k is not None:
                if v is None:
                    out.pop(k.decode(), None)
                else:
                    out[k.decode()] = int(v)
        return out
    finally:
        c.close()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m strom.examples.wordcount", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("produce", help="write lines to wordcount-input")
    p.add_argument("lines", nargs="+")
    r = sub.add_parser("run", help="run the word count (both queries)")
    r.add_argument("--checkpoint", required=True)
    r.add_argument("--available-now", action="store_true")
    sub.add_parser("show", help="print the latest count per word")
    a = ap.parse_args(argv)
    if a.cmd == "produce":
        print(f"produced {produce(a.bootstrap, a.lines)} lines")
    elif a.cmd == "run":
        run(a.bootstrap, a.checkpoint, a.available_now)
    else:
        for w, n in sorted(counts(a.bootstrap).items()):
            print(f"{w}\t{n}")
    return 0
