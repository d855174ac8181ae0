"""strom.streams on a real broker and local Spark: each operator against a reference computed
here in plain Python (declaratively, not by replaying the operator) on the same generated input,
with out-of-order and late records and tombstones; results read back read_committed."""

from __future__ import annotations

import json
import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from strom.testing.broker_process import BrokerProcess

from .conftest import create_topic, produce

pytestmark = [pytest.mark.spark, pytest.mark.integration]

BASE = 1_700_000_000_000


def read_committed(
    bootstrap: str, topic: str, partitions: int
) -> list[tuple[int, bytes | None, bytes | None]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{topic}-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: list[tuple[int, bytes | None, bytes | None]] = []
        eof: set[int] = set()
        deadline = time.monotonic() + 60
        while len(eof) < partitions and time.monotonic() < deadline:
            msg = c.poll(1.0)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    eof.add(msg.partition())
                    continue
                raise AssertionError(str(err))
            out.append((msg.partition(), msg.key(), msg.value()))
        assert len(eof) == partitions, "no end of partition"
        return out
    finally:
        c.close()


def gen_events(
    rng: random.Random, n: int, keys: list[str], start: int, late_every: int = 9
) -> list[tuple[str, int]]:
    """(key, ts): mostly increasing, jittered (out of order) and every ``late_every``-th record
    far behind (late)."""
    out = []
    t = start
    for i in range(n):
        t += rng.randint(0, 400)
        ts = t - rng.randint(0, 900)
        if i % late_every == late_every - 1:
            ts = t - rng.randint(3_000, 8_000)
        out.append((rng.choice(keys), max(ts, 0)))
    return out


def part_of(key: str) -> int:
    return int(key[1:]) % 2


def produce_keyed(bootstrap: str, topic: str, events: list[tuple[str, int]], value: Any = None) -> None:
    for p in range(2):
        recs = [
            (k.encode(), b"x" if value is None else value(k, ts), [], ts)
            for k, ts in events
            if part_of(k) == p
        ]
        if recs:
            produce(bootstrap, topic, p, recs)


def run_available_now(q: Any) -> None:
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()


def reference_tumbling(
    events_by_part: dict[int, list[tuple[str, int]]], size: int, grace: int
) -> tuple[dict[tuple[str, int], int], set[tuple[str, int]]]:
    """Accepted count per (key, window start): record i is accepted iff its window's end + grace
    is after the largest timestamp of the records up to i of its partition; a window is final iff
    end + grace <= the partition's largest timestamp."""
    counts: dict[tuple[str, int], int] = defaultdict(int)
    closed: set[tuple[str, int]] = set()
    for evs in events_by_part.values():
        for i, (k, ts) in enumerate(evs):
            start = ts - ts % size
            if start + size + grace > max(t for _, t in evs[: i + 1]):
                counts[(k, start)] += 1
        top = max(t for _, t in evs)
        closed |= {(k, s) for (k, s) in counts if s + size + grace <= top and part_of(k) in events_by_part}
    return dict(counts), {w for w in closed if (part_of(w[0]) in events_by_part)}


def test_windowed_count_final_and_changes_restart(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    """Tumbling 2 s windows with 1 s grace, final-only and changelog, stopped, more produced, and
    restarted from the checkpoint."""
    from strom import streams as S

    boot = kbroker.bootstrap
    for t in ("wc-in", "wc-final", "wc-changes"):
        create_topic(boot, t, 2)
    rng = random.Random(7)
    keys = [f"k{i}" for i in range(6)]
    first = gen_events(rng, 300, keys, BASE)
    second = gen_events(rng, 200, keys, first[-1][1] + 500)
    size, grace = 2_000, 1_000

    def start(topic: str, emit: str) -> Any:
        g = (
            S.stream(spark, "wc-in", bootstrap=boot)
            .group_by_key()
            .windowed_by(S.TimeWindows(size, grace=grace))
        )
        return g.count(emit=emit).to(topic, str(tmp_path / topic), trigger={"availableNow": True})

    produce_keyed(boot, "wc-in", first)
    for t, e in (("wc-final", "final"), ("wc-changes", "changes")):
        run_available_now(start(t, e))
    produce_keyed(boot, "wc-in", second)
    for t, e in (("wc-final", "final"), ("wc-changes", "changes")):
        run_available_now(start(t, e))

    allev = first + second
    by_part = {p: [e for e in allev if part_of(e[0]) == p] for p in range(2)}
    counts, closed = reference_tumbling(by_part, size, grace)
    late = sum(
        1
        for p in by_part.values()
        for i, (_, ts) in enumerate(p)
        if ts - ts % size + size + grace <= max(t for _, t in p[: i + 1])
    )
    assert late > 10  # the input really has late records

    final = read_committed(boot, "wc-final", 2)
    got = [(json.loads(k), int(v)) for _, k, v in final if k is not None and v is not None]
    got_windows = [(k["key"], k["start"]) for k, _ in got]
    assert len(got_windows) == len(set(got_windows)), "a final window was emitted twice"
    assert {(k["key"], k["start"]): v for k, v in got} == {w: counts[w] for w in closed}
    for k, _ in got:
        assert k["end"] - k["start"] == size

    changes = read_committed(boot, "wc-changes", 2)
    seq: dict[tuple[str, int], list[int]] = defaultdict(list)
    for _, k, v in changes:
        assert k is not None and v is not None
        kk = json.loads(k)
        seq[(kk["key"], kk["start"])].append(int(v))
    assert {w: s for w, s in seq.items()} == {w: list(range(1, n + 1)) for w, n in counts.items()}


@pytest.mark.slow
def test_table_tombstones_and_hopping_sum(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    """table(): latest value per key to a compacted topic, tombstones of deleted keys passed on
    (only for keys that exist); hopping windows (4 s advancing by 1 s) summing JSON values."""
    from strom import streams as S

    boot = kbroker.bootstrap
    for t in ("tb-in", "tb-out", "hop-in", "hop-out"):
        create_topic(boot, t, 2)
    rng = random.Random(11)
    keys = [f"k{i}" for i in range(8)]
    ops: list[tuple[str, int]] = [(rng.choice(keys), BASE + i) for i in range(200)]
    vals: dict[tuple[str, int], bytes | None] = {
        (k, ts): None if rng.random() < 0.25 else f"v{ts}".encode() for k, ts in ops
    }
    produce_keyed(boot, "tb-in", ops, value=lambda k, ts: vals[(k, ts)])
    run_available_now(
        S.table(spark, "tb-in", bootstrap=boot).to(
            "tb-out", str(tmp_path / "tb"), trigger={"availableNow": True}
        )
    )
    expect: list[tuple[str, bytes | None]] = []
    for p in range(2):
        cur: dict[str, bytes] = {}
        for k, ts in (o for o in ops if part_of(o[0]) == p):
            v = vals[(k, ts)]
            if v is None:
                if k in cur:
                    del cur[k]
                    expect.append((k, None))
            else:
                cur[k] = v
                expect.append((k, v))
    got = [(k.decode(), v) for _, k, v in read_committed(boot, "tb-out", 2) if k is not None]
    per_key = lambda xs, key: [v for k, v in xs if k == key]  # noqa: E731
    for k in keys:
        assert per_key(got, k) == per_key(expect, k)
    assert any(v is None for _, v in got)

    ev = gen_events(rng, 250, keys, BASE)
    produce_keyed(boot, "hop-in", ev, value=lambda k, ts: json.dumps({"n": ts % 7}).encode())
    w = S.TimeWindows(4_000, advance=1_000, grace=500)
    q = (
        S.stream(spark, "hop-in", bootstrap=boot, value_serde="json")
        .group_by_key()
        .windowed_by(w)
        .sum(lambda v: v["n"], emit="final")
        .to("hop-out", str(tmp_path / "hop"), trigger={"availableNow": True})
    )
    run_available_now(q)
    ref: dict[tuple[str, int], int] = defaultdict(int)
    closed = set()
    for p in range(2):
        evs = [e for e in ev if part_of(e[0]) == p]
        for i, (k, ts) in enumerate(evs):
            st = max(t for _, t in evs[: i + 1])
            for s in range(ts - ts % 1000 - 3000, ts + 1, 1000):
                if s >= 0 and s <= ts < s + 4000 and s + 4000 + 500 > st:
                    ref[(k, s)] += ts % 7
        top = max(t for _, t in evs)
        closed |= {(k, s) for (k, s) in ref if part_of(k) == p and s + 4500 <= top}
    out = [(json.loads(k), int(v)) for _, k, v in read_committed(boot, "hop-out", 2) if k and v]
    assert len(out) == len({(k["key"], k["start"]) for k, _ in out})
    assert {(k["key"], k["start"]): v for k, v in out} == {c: ref[c] for c in closed}


@pytest.mark.slow
def test_stream_table_and_stream_stream_joins(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    from strom import streams as S

    boot = kbroker.bootstrap
    for t in ("users", "clicks", "searches", "enriched", "joined"):
        create_topic(boot, t, 2)
    rng = random.Random(5)
    keys = [f"k{i}" for i in range(6)]
    # distinct timestamps: users even ms, clicks odd, searches multiples of 10 + 3
    users = [(rng.choice(keys), BASE + 2 * i * 37) for i in range(60)]
    uval = {
        (k, ts): None if rng.random() < 0.2 else json.dumps({"region": f"r{ts % 5}"}).encode()
        for k, ts in users
    }
    clicks = [(rng.choice(keys), BASE + 2 * i * 29 + 1) for i in range(150)]
    searches = [(rng.choice(keys), BASE + 10 * i * 7 + 3) for i in range(90)]
    produce_keyed(boot, "users", users, value=lambda k, ts: uval[(k, ts)])
    produce_keyed(boot, "clicks", clicks, value=lambda k, ts: json.dumps({"t": ts}).encode())
    produce_keyed(boot, "searches", searches, value=lambda k, ts: json.dumps({"s": ts}).encode())

    cl = S.stream(spark, "clicks", bootstrap=boot, value_serde="json")
    q = cl.join(
        S.table(spark, "users", bootstrap=boot, value_serde="json"),
        lambda c, u: {"t": c["t"], "region": None if u is None else u["region"]},
        how="left",
    ).to("enriched", str(tmp_path / "st"), trigger={"availableNow": True})
    run_available_now(q)
    ref = []
    for k, ts in clicks:
        before = [(t, uval[(k2, t)]) for k2, t in users if k2 == k and t < ts]
        u = max(before)[1] if before else None
        ref.append((k, {"t": ts, "region": None if u is None else json.loads(u)["region"]}))
    got = [(k.decode(), json.loads(v)) for _, k, v in read_committed(boot, "enriched", 2) if k and v]
    assert sorted(got, key=lambda x: x[1]["t"]) == sorted(ref, key=lambda x: x[1]["t"])

    jw = S.JoinWindows(before=300, after=500, grace=0)
    q2 = cl.join(
        S.stream(spark, "searches", bootstrap=boot, value_serde="json"),
        lambda c, s: [c["t"], None if s is None else s["s"]],
        jw,
        how="left",
    ).to("joined", str(tmp_path / "ss"), trigger={"availableNow": True})
    run_available_now(q2)
    pairs = []
    for k, ct in clicks:
        m = [st for k2, st in searches if k2 == k and ct - 300 <= st <= ct + 500]
        pairs.extend((k, [ct, st]) for st in m)
        top = max(t for k3, t in clicks + searches if part_of(k3) == part_of(k))
        if not m and top > ct + 500:
            pairs.append((k, [ct, None]))
    got2 = [(k.decode(), json.loads(v)) for _, k, v in read_committed(boot, "joined", 2) if k and v]
    key = lambda x: (x[0], x[1][0], x[1][1] or 0)  # noqa: E731
    assert sorted(got2, key=key) == sorted(pairs, key=key)


@pytest.mark.slow
def test_wordcount_example_end_to_end(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    """``strom.examples.wordcount``: two runs, hand-checked counts (words split across both
    input partitions, so the repartition topic matters)."""
    from strom.examples.wordcount import cli

    boot = kbroker.bootstrap
    cli.produce(boot, ["The quick fox", "the lazy dog", "THE fox!"])
    for q in cli.start(spark, boot, str(tmp_path / "wc"), {"availableNow": True}):
        run_available_now(q)
    assert cli.counts(boot) == {"the": 3, "quick": 1, "fox": 2, "lazy": 1, "dog": 1}
    cli.produce(boot, ["a dog, a fox"])
    for q in cli.start(spark, boot, str(tmp_path / "wc"), {"availableNow": True}):
        run_available_now(q)
    assert cli.counts(boot) == {"the": 3, "quick": 1, "fox": 3, "lazy": 1, "dog": 2, "a": 2}


@pytest.mark.slow
def test_kill_9_of_the_driver_mid_stream(kbroker: BrokerProcess, tmp_path: Path) -> None:
    """A count per key runs in its own driver process while records keep coming; the driver is
    killed -9 after some batches have committed, more records come, a new driver resumes from the
    checkpoint: every key's changelog (read_committed) is exactly 1, 2, ..., n — no update lost,
    none doubled, whatever the kill interrupted."""
    import os
    import signal
    import subprocess
    import sys
    import threading

    pytest.importorskip("pyspark")
    boot = kbroker.bootstrap
    create_topic(boot, "k9-in", 2)
    create_topic(boot, "k9-out", 2)
    job = str(Path(__file__).with_name("streams_driver_job.py"))
    keys = [f"k{i}" for i in range(10)]
    rng = random.Random(9)
    sent: list[str] = []

    def send(n: int) -> None:
        evs = [(rng.choice(keys), BASE + len(sent) + i) for i in range(n)]
        produce_keyed(boot, "k9-in", evs)
        sent.extend(k for k, _ in evs)

    def driver(mode: str) -> subprocess.Popen[bytes]:
        log = open(tmp_path / f"driver-{mode}.log", "ab")  # noqa: SIM115 - handed to the child
        return subprocess.Popen([sys.executable, job, boot, "k9-in", "k9-out", str(tmp_path / "ck"), mode],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYSPARK_PYTHON": sys.executable})

    send(400)
    proc = driver("continuous")
    feeding = threading.Event()

    def feed() -> None:
        while not feeding.is_set():
            send(20)
            time.sleep(0.1)

    t = threading.Thread(target=feed, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and len(read_committed(boot, "k9-out", 2)) < 150:
            assert proc.poll() is None, (tmp_path / "driver-continuous.log").read_text()[-3000:]
            time.sleep(1.0)
        assert len(read_committed(boot, "k9-out", 2)) >= 150, "the driver committed nothing in time"
        os.killpg(proc.pid, signal.SIGKILL)  # mid-stream: batches in flight, records arriving
        proc.wait(30)
    finally:
        feeding.set()
        t.join(10)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    before = len(read_committed(boot, "k9-out", 2))
    assert before < len(sent), "the first driver had already processed everything"
    send(200)
    rest = driver("available-now")
    assert rest.wait(300) == 0, (tmp_path / "driver-available-now.log").read_text()[-3000:]
    out = read_committed(boot, "k9-out", 2)
    changelog: dict[str, list[int]] = defaultdict(list)
    for _p, k, v in out:
        assert k is not None and v is not None
        changelog[k.decode()].append(int(v))
    want = {k: sent.count(k) for k in set(sent)}
    print(f"killed with {before} of {len(sent) - 200} updates out; after the restart {len(out)}")
    assert {k: len(v) for k, v in changelog.items()} == want
    assert all(v == list(range(1, len(v) + 1)) for v in changelog.values()), "an update lost or doubled"


@pytest.mark.slow
def test_session_windows_on_spark(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    """A session count (gap 300 ms, grace 200 ms), final only, on two partitions: each closed
    session once, equal to the sessions got by splitting each key's timestamps at gaps."""
    from strom import streams as S

    boot = kbroker.bootstrap
    create_topic(boot, "sw-in", 2)
    create_topic(boot, "sw-out", 2)
    rng = random.Random(11)
    keys = [f"k{i}" for i in range(6)]
    events, t = [], BASE
    for _ in range(400):
        t += rng.choice([5, 20, 60, 150, 400, 900])  # some steps longer than the gap
        events.append((rng.choice(keys), t))
    produce_keyed(boot, "sw-in", events)
    gap, grace = 300, 200
    q = (
        S.stream(spark, "sw-in", bootstrap=boot)
        .group_by_key()
        .windowed_by(S.SessionWindows(gap, grace=grace))
        .count(emit="final")
        .to("sw-out", str(tmp_path / "ck"), trigger={"availableNow": True})
    )
    run_available_now(q)
    want = {}
    for p in range(2):
        st = max(ts for k, ts in events if part_of(k) == p)
        for k in {k for k, _ in events if part_of(k) == p}:
            ts = sorted(x for kk, x in events if kk == k)
            start, prev, n = ts[0], ts[0], 0
            for x in ts:
                if x - prev > gap:
                    want[(k, start, prev)] = n
                    start, n = x, 0
                prev, n = x, n + 1
            want[(k, start, prev)] = n
            want = {s: c for s, c in want.items() if not (s[0] == k and s[2] + gap + grace >= st)}
    got = {}
    for _p, kb, vb in read_committed(boot, "sw-out", 2):
        assert kb is not None and vb is not None
        w = json.loads(kb)
        assert (w["key"], w["start"], w["end"]) not in got, "a session emitted twice"
        got[(w["key"], w["start"], w["end"])] = int(vb)
    assert got == want and len(want) > 50


def test_table_filter_map_values_and_to_stream(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    """``table.filter(...).map_values(...)``: a row that stops matching is deleted (tombstone),
    the final table equals the reference; ``to_stream()`` carries every update."""
    from strom import streams as S

    boot = kbroker.bootstrap
    for t in ("tf-in", "tf-out", "tf-stream"):
        create_topic(boot, t, 2)
    rng = random.Random(21)
    keys = [f"k{i}" for i in range(8)]
    events = [(rng.choice(keys), BASE + i) for i in range(200)]
    vals = {(k, ts): None if rng.random() < 0.15 else json.dumps({"n": rng.randint(0, 9)}).encode()
            for k, ts in events}
    produce_keyed(boot, "tf-in", events, value=lambda k, ts: vals[(k, ts)])
    table = (
        S.table(spark, "tf-in", bootstrap=boot, value_serde="json")
        .filter(lambda k, v: v["n"] % 2 == 0)
        .map_values(lambda v: {"n10": v["n"] * 10})
    )
    run_available_now(table.to("tf-out", str(tmp_path / "t"), value_serde="json",
                               trigger={"availableNow": True}))
    latest: dict[str, Any] = {}
    for k, ts in events:
        v = vals[(k, ts)]
        n = None if v is None else json.loads(v)["n"]
        if n is None or n % 2:
            latest.pop(k, None)
        else:
            latest[k] = {"n10": n * 10}
    view: dict[str, Any] = {}
    tombstones = 0
    for _p, kb, vb in read_committed(boot, "tf-out", 2):
        assert kb is not None
        if vb is None:
            assert kb.decode() in view, "a tombstone for a key the table did not hold"
            del view[kb.decode()]
            tombstones += 1
        else:
            view[kb.decode()] = json.loads(vb)
    assert view == latest and tombstones > 5
    run_available_now(table.to_stream().to("tf-stream", str(tmp_path / "s"), trigger={"availableNow": True}))
    updates = read_committed(boot, "tf-stream", 2)
    assert len(updates) == len(events)  # every update, the deletions as null values
    assert sum(1 for _p, _k, v in updates if v is None) == sum(
        1 for k, ts in events if vals[(k, ts)] is None or json.loads(vals[(k, ts)])["n"] % 2)
