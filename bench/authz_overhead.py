"""What authorization costs the hot path: produce and consume throughput with the authorizer off
and on (100 ACLs, 10 of them prefixed; the client granted by a prefixed ACL, not a super user),
measured in the same run with variants interleaved.

Each run starts a fresh broker (PLAINTEXT for the measured client, User:ANONYMOUS; SASL_PLAINTEXT
for the admin that creates the ACLs), produces COUNT records of SIZE bytes to one partition with
confluent-kafka (acks=1, linger.ms=5) and consumes them back (assign, from the start).

    python bench/authz_overhead.py                   # 3 runs, 300000 x 100 B
    python bench/authz_overhead.py --runs 5 --count 500000 --size 1024

Goal (issue 16): authorizer on >= 0.95x off.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import confluent_kafka as ck
from confluent_kafka import admin as ka

from strom.testing.broker_process import BrokerProcess

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret";'
)
TOPIC = "bench-authz"


def _broker(data: Path, authorizer: bool) -> BrokerProcess:
    overrides = [f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}"]
    if authorizer:
        overrides += [
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:admin",
        ]
    return BrokerProcess(
        data, overrides=overrides, listeners={"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT"}
    ).start()


def _acls() -> list[Any]:
    """100 ACLs: 90 literal on other topics and groups, 10 prefixed (one of which grants the
    benchmark's topic and group to User:ANONYMOUS)."""
    T, G = ka.ResourceType.TOPIC, ka.ResourceType.GROUP
    LIT, PRE = ka.ResourcePatternType.LITERAL, ka.ResourcePatternType.PREFIXED
    ALLOW = ka.AclPermissionType.ALLOW
    out = []
    for i in range(90):
        rt = T if i % 2 else G
        out.append(ka.AclBinding(rt, f"other-{i}", LIT, f"User:u{i}", "*", ka.AclOperation.READ, ALLOW))
    for i in range(8):
        out.append(ka.AclBinding(T, f"pfx{i}-", PRE, f"User:u{i}", "*", ka.AclOperation.WRITE, ALLOW))
    out.append(ka.AclBinding(T, "bench-", PRE, "User:ANONYMOUS", "*", ka.AclOperation.ALL, ALLOW))
    out.append(ka.AclBinding(G, "bench-", PRE, "User:ANONYMOUS", "*", ka.AclOperation.ALL, ALLOW))
    return out


def run_once(authorizer: bool, count: int, size: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as d:
        b = _broker(Path(d) / "data", authorizer)
        try:
            admin = ka.AdminClient(
                {
                    "bootstrap.servers": b.bootstrap_for("SASL_PLAINTEXT"),
                    "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanisms": "PLAIN",
                    "sasl.username": "admin",
                    "sasl.password": "admin-secret",
                }
            )
            admin.create_topics([ka.NewTopic(TOPIC, 1, 1)], request_timeout=30)[TOPIC].result()
            if authorizer:
                for f in admin.create_acls(_acls(), request_timeout=30).values():
                    f.result()
            conf = {"bootstrap.servers": b.bootstrap_for("PLAINTEXT")}
            p = ck.Producer(conf | {"acks": 1, "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
            value = b"x" * size
            t0 = time.perf_counter()
            for _ in range(count):
                while True:
                    try:
                        p.produce(TOPIC, value)
                        break
                    except BufferError:
                        p.poll(0.001)
            assert p.flush(120) == 0
            produce_s = time.perf_counter() - t0
            c = ck.Consumer(conf | {"group.id": "bench-g", "enable.auto.commit": False})
            c.assign([ck.TopicPartition(TOPIC, 0, 0)])
            got = 0
            t0 = time.perf_counter()
            while got < count:
                msgs = c.consume(10_000, 1.0)
                got += sum(1 for m in msgs if m.error() is None)
            consume_s = time.perf_counter() - t0
            c.close()
            mb = count * size / 1e6
            return mb / produce_s, mb / consume_s
        finally:
            b.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--count", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=100)
    args = ap.parse_args()
    results: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for i in range(args.runs):
        for on in (False, True) if i % 2 == 0 else (True, False):
            r = run_once(on, args.count, args.size)
            results[on].append(r)
            state = "on" if on else "off"
            print(f"run {i} authorizer={state}: produce {r[0]:.1f} MB/s, consume {r[1]:.1f} MB/s")
    off_p = statistics.median(r[0] for r in results[False])
    on_p = statistics.median(r[0] for r in results[True])
    off_c = statistics.median(r[1] for r in results[False])
    on_c = statistics.median(r[1] for r in results[True])
    print(f"median produce: off {off_p:.1f} MB/s, on {on_p:.1f} MB/s, ratio {on_p / off_p:.3f}")
    print(f"median consume: off {off_c:.1f} MB/s, on {on_c:.1f} MB/s, ratio {on_c / off_c:.3f}")


if __name__ == "__main__":
    main()
