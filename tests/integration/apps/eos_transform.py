"""A consume-transform-produce app with exactly-once semantics (confluent-kafka), for tests.

Reads ``input`` in group ``group`` (read_committed), writes ``upper(value)`` to ``output`` in
transactions that also commit the consumed offsets (send_offsets_to_transaction). Runs until
the input is drained for ``idle`` seconds. The test kills it with SIGKILL at random moments.
usage: eos_transform.py BOOTSTRAP INPUT OUTPUT GROUP TXN_ID [idle_seconds]
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer


def main() -> int:
    bootstrap, inp, out, group, txn_id = sys.argv[1:6]
    idle = float(sys.argv[6]) if len(sys.argv) > 6 else 5.0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "linger.ms": 5,
            "transaction.timeout.ms": 10000,
        }
    )
    producer.init_transactions(30)
    consumer.subscribe([inp])
    last_data = time.time()
    while time.time() - last_data < idle:
        msgs = consumer.consume(50, 0.5)
        msgs = [m for m in msgs if not m.error()]
        if not msgs:
            if not consumer.assignment():  # idle counts only once the group gave it partitions
                last_data = time.time()  # (after a kill -9 the old member holds them a session)
            continue
        last_data = time.time()
        producer.begin_transaction()
        for m in msgs:
            producer.produce(out, key=m.key(), value=m.value().upper())
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
        )
        try:
            producer.commit_transaction(30)
        except KafkaException as e:
            if e.args[0].txn_requires_abort():
                producer.abort_transaction(30)
                return 3
            raise
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
