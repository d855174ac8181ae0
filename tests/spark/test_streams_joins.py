"""strom.streams' joins, sliding windows, table aggregations and repartitioning on a real broker
and local Spark. Every input is partitioned by Kafka's default partitioner (murmur2 of the key),
results are read back read_committed and compared with references computed here in plain Python
(declaratively, not by replaying the operators)."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from strom.client.partitioner import partition_for_key
from strom.testing.broker_process import BrokerProcess

from .conftest import create_topic, produce
from .test_streams import BASE, read_committed, run_available_now

pytestmark = [pytest.mark.spark, pytest.mark.integration]

Op = tuple[str, Any, int]  # key, value (None = tombstone), timestamp


def part(key: str, n: int = 2) -> int:
    return partition_for_key(key.encode(), n)


def produce_ops(boot: str, topic: str, ops: list[Op], n: int = 2) -> None:
    for p in range(n):
        recs = [
            (k.encode(), None if v is None else json.dumps(v).encode(), [], ts)
            for k, v, ts in ops
            if part(k, n) == p
        ]
        if recs:
            produce(boot, topic, p, recs)


def latest(boot: str, topic: str, n: int = 2) -> dict[str, Any]:
    """The materialised view of a changelog topic (a tombstone deletes; one must delete a key that
    is there)."""
    view: dict[str, Any] = {}
    for _, k, v in read_committed(boot, topic, n):
        assert k is not None
        key = k.decode()
        if v is None:
            assert key in view, f"tombstone for {key}, which has no result"
            del view[key]
        else:
            view[key] = json.loads(v)
    return view


def table_ops(
    rng: random.Random, n: int, keys: list[str], value: Any, ts0: int, p_del: float = 0.2
) -> list[Op]:
    return [(rng.choice(keys), None if rng.random() < p_del else value(i), ts0 + i) for i in range(n)]


def final_table(ops: list[Op]) -> dict[str, Any]:
    t: dict[str, Any] = {}
    for k, v, _ in ops:
        if v is None:
            t.pop(k, None)
        else:
            t[k] = v
    return t


def test_table_group_by_aggregate_repartition_restart(
    spark: Any, kbroker: BrokerProcess, tmp_path: Path
) -> None:
    """``table.group_by(region).aggregate(sum with subtractor)``: two queries through the
    repartition topic (created with the source's partition count, records placed by murmur2 of
    the group key); run, more updates (users moving between regions, deletes), restart from the
    checkpoint; each region's latest sum equals the sum over the final table."""
    from strom import streams as S

    boot = kbroker.bootstrap
    create_topic(boot, "agg-users", 2)
    create_topic(boot, "agg-out", 2)
    rng = random.Random(21)
    users = [f"u{i}" for i in range(12)]
    ops = table_ops(rng, 240, users, lambda i: {"region": rng.choice("xyzw"), "n": rng.randint(1, 9)}, BASE)

    def start() -> Any:
        t = S.table(spark, "agg-users", bootstrap=boot, value_serde="json")
        return (
            t.group_by(lambda k, v: (v["region"], v["n"]))
            .aggregate(lambda: 0, lambda a, v: a + v, lambda a, v: a - v)
            .to("agg-out", str(tmp_path / "agg"), trigger={"availableNow": True})
        )

    produce_ops(boot, "agg-users", ops[:140])
    q = start()
    assert isinstance(q, S.StreamingQueries) and len(q.queries) == 2
    run_available_now(q)
    produce_ops(boot, "agg-users", ops[140:])
    run_available_now(start())

    table = final_table(ops)
    seen = {v["region"] for _, v, _ in ops if v is not None}
    assert latest(boot, "agg-out") == {
        r: sum(v["n"] for v in table.values() if v["region"] == r) for r in seen
    }
    rep = read_committed(boot, "strom-agg-out-groupby-repartition", 2)
    n_changes, cur = 0, {}  # a region change writes a subtraction and an addition, else one record
    for k, v, _ in ops:
        old = cur.get(k)
        n_changes += 2 if old and v and old["region"] != v["region"] else 1 if old or v else 0
        cur[k] = v
    assert len(rep) == n_changes
    assert all(p == part(k.decode()) for p, k, _ in rep if k is not None)


@pytest.mark.slow
def test_table_table_outer_and_foreign_key_joins(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    """Outer join of two co-partitioned tables with deletes on both sides, and a foreign-key join
    (orders -> products, products on 3 partitions: not co-partitioned) with foreign-key changes
    and deletes on both sides: the output changelogs materialise to the reference joins."""
    from strom import streams as S

    boot = kbroker.bootstrap
    for t, n in (("tl", 2), ("tr", 2), ("tt-out", 2), ("orders", 2), ("products", 3), ("fk-out", 2)):
        create_topic(boot, t, n)
    rng = random.Random(8)
    keys = [f"k{i}" for i in range(10)]
    left = table_ops(rng, 150, keys, lambda i: {"l": i}, BASE, 0.3)
    right = table_ops(rng, 150, keys, lambda i: {"r": i}, BASE + 1000, 0.3)
    produce_ops(boot, "tl", left)
    produce_ops(boot, "tr", right)
    q = (
        S.table(spark, "tl", bootstrap=boot, value_serde="json")
        .join(
            S.table(spark, "tr", bootstrap=boot, value_serde="json"),
            lambda a, b: [a and a["l"], b and b["r"]],
            how="outer",
        )
        .to("tt-out", str(tmp_path / "tt"), trigger={"availableNow": True})
    )
    run_available_now(q)
    lt, rt = final_table(left), final_table(right)
    want = {k: [lt[k]["l"] if k in lt else None, rt[k]["r"] if k in rt else None] for k in set(lt) | set(rt)}
    got_tt = read_committed(boot, "tt-out", 2)
    assert any(v is None for _, _, v in got_tt)  # deletes came through as tombstones
    assert latest(boot, "tt-out") == want

    products = [f"p{i}" for i in range(5)]
    pops = table_ops(rng, 60, products, lambda i: {"price": i}, BASE, 0.25)
    oops = table_ops(rng, 150, keys, lambda i: {"product": rng.choice(products), "qty": i}, BASE + 30, 0.2)
    moved = sum(
        1
        for i, (k, v, _) in enumerate(oops)
        if v is not None
        and (prev := final_table(oops[:i]).get(k)) is not None
        and prev["product"] != v["product"]
    )
    assert moved > 20
    for p in range(3):
        recs = [
            (k.encode(), None if v is None else json.dumps(v).encode(), [], ts)
            for k, v, ts in pops
            if part(k, 3) == p
        ]
        if recs:
            produce(boot, "products", p, recs)
    produce_ops(boot, "orders", oops)
    q2 = (
        S.table(spark, "orders", bootstrap=boot, value_serde="json")
        .join(
            S.table(spark, "products", bootstrap=boot, value_serde="json"),
            lambda o: o["product"],
            lambda o, p: {"qty": o["qty"], "price": p["price"]},
        )
        .to("fk-out", str(tmp_path / "fk"), trigger={"availableNow": True})
    )
    run_available_now(q2)
    ot, pt = final_table(oops), final_table(pops)
    assert latest(boot, "fk-out") == {
        k: {"qty": o["qty"], "price": pt[o["product"]]["price"]} for k, o in ot.items() if o["product"] in pt
    }


@pytest.mark.slow
def test_global_table_join_and_stream_repartition(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    """A stream of 2 partitions joined to a global table of 3 partitions by a field of the value
    (every task sees the whole table); the same stream re-keyed and joined to the table as a
    KTable (repartitioned to the table's 3 partitions); ``group_by(field).count()`` on the stream,
    through a repartition topic."""
    from strom import streams as S

    boot = kbroker.bootstrap
    for t, n in (("gt-regions", 3), ("gt-clicks", 2), ("gt-out", 2), ("gt-counts", 2), ("gt-joined", 2)):
        create_topic(boot, t, n)
    rng = random.Random(4)
    regions = [f"r{i}" for i in range(6)]
    rops = table_ops(rng, 40, regions, lambda i: {"name": f"region-{i}"}, BASE, 0.2)
    for p in range(3):
        recs = [
            (k.encode(), None if v is None else json.dumps(v).encode(), [], ts)
            for k, v, ts in rops
            if part(k, 3) == p
        ]
        if recs:
            produce(boot, "gt-regions", p, recs)
    clicks = [
        (f"c{i}", {"i": i, "region": rng.choice([*regions, "none"])}, BASE + 100 + i) for i in range(200)
    ]
    produce_ops(boot, "gt-clicks", clicks)  # keyed by click id: not partitioned by region
    cl = S.stream(spark, "gt-clicks", bootstrap=boot, value_serde="json")
    q = cl.join(
        S.global_table(spark, "gt-regions", bootstrap=boot, value_serde="json"),
        lambda c, r: [c["i"], None if r is None else r["name"]],
        key_mapper=lambda k, v: v["region"],
        how="left",
    ).to("gt-out", str(tmp_path / "gt"), trigger={"availableNow": True})
    run_available_now(q)
    table = final_table(rops)
    want = sorted(
        (k, [v["i"], table[v["region"]]["name"] if v["region"] in table else None]) for k, v, _ in clicks
    )
    got = sorted((k.decode(), json.loads(v)) for _, k, v in read_committed(boot, "gt-out", 2) if k and v)
    assert got == want

    # a re-keyed stream joined to a (non-global) table of 3 partitions: the stream goes through a
    # repartition topic co-partitioned with the table; read directly it is refused
    regions_table = S.table(spark, "gt-regions", bootstrap=boot, value_serde="json")
    with pytest.raises(ValueError, match="co-partitioned"):
        cl.join(regions_table, lambda c, r: c).to("gt-joined", str(tmp_path / "bad"))
    by_region = cl.select_key(lambda k, v: v["region"])
    q1 = by_region.join(
        regions_table, lambda c, r: [c["i"], None if r is None else r["name"]], how="left"
    ).to("gt-joined", str(tmp_path / "st"), trigger={"availableNow": True})
    run_available_now(q1)
    want_j = sorted(
        (v["region"], [v["i"], table[v["region"]]["name"] if v["region"] in table else None])
        for _, v, _ in clicks
    )
    got_j = sorted((k.decode(), json.loads(v)) for _, k, v in read_committed(boot, "gt-joined", 2) if k and v)
    assert got_j == want_j
    rep_j = read_committed(boot, "strom-gt-joined-join-repartition", 3)
    assert len(rep_j) == 200 and all(p == part(k.decode(), 3) for p, k, _ in rep_j if k is not None)

    q2 = (
        cl.group_by(lambda k, v: v["region"])
        .count()
        .to("gt-counts", str(tmp_path / "cnt"), value_serde="string", trigger={"availableNow": True})
    )
    run_available_now(q2)
    counts: dict[str, int] = defaultdict(int)
    for _, v, _ in clicks:
        counts[v["region"]] += 1
    assert latest(boot, "gt-counts") == counts
    rep = read_committed(boot, "strom-gt-counts-groupby-repartition", 2)
    assert len(rep) == 200 and all(p == part(k.decode()) for p, k, _ in rep if k is not None)


def merge_by_ts(sides: list[list[tuple[str, int, int]]]) -> list[tuple[int, str, int, int]]:
    """A task's processing order: the side whose next record has the smaller timestamp first
    (ties: the lower side)."""
    pos, out = [0, 0], []
    while True:
        heads = [(sides[s][pos[s]][2], s) for s in (0, 1) if pos[s] < len(sides[s])]
        if not heads:
            return out
        _, s = min(heads)
        k, i, ts = sides[s][pos[s]]
        pos[s] += 1
        out.append((s, k, i, ts))


@pytest.mark.slow
def test_outer_stream_stream_join_and_sliding_count(
    spark: Any, kbroker: BrokerProcess, tmp_path: Path
) -> None:
    """Outer join within JoinWindows(before 300, after 500, grace 200) with out-of-order and late
    records (unmatched records of both sides come out once window and grace have passed), also
    with both sides re-keyed (through two repartition topics); sliding
    windows (100 ms, grace 300) counting, final results only."""
    from strom import streams as S

    boot = kbroker.bootstrap
    for t in ("ssl", "ssr", "ss-out", "ss-out2", "sl-in", "sl-out"):
        create_topic(boot, t, 2)
    rng = random.Random(13)
    keys = [f"k{i}" for i in range(5)]
    ev: list[tuple[int, str, int, int]] = []
    t = BASE
    for i in range(300):
        t += rng.randint(0, 60)
        ts = t - rng.randint(0, 150) if i % 10 != 9 else t - rng.randint(1_500, 3_000)
        ev.append((rng.randint(0, 1), rng.choice(keys), i, ts))
    for side, topic in ((0, "ssl"), (1, "ssr")):
        produce_ops(boot, topic, [(k, {"i": i}, ts) for s, k, i, ts in ev if s == side])
    q = (
        S.stream(spark, "ssl", bootstrap=boot, value_serde="json")
        .join(
            S.stream(spark, "ssr", bootstrap=boot, value_serde="json"),
            lambda a, b: [None if a is None else a["i"], None if b is None else b["i"]],
            S.JoinWindows(before=300, after=500, grace=200),
            how="outer",
        )
        .to("ss-out", str(tmp_path / "ss"), trigger={"availableNow": True})
    )
    run_available_now(q)
    want: list[tuple[str, list[int | None]]] = []
    for p in range(2):
        sides = [[(k, i, ts) for s, k, i, ts in ev if s == side and part(k) == p] for side in (0, 1)]
        st, acc = -1, []
        for s, k, i, ts in merge_by_ts(sides):
            st = max(st, ts)
            if ts >= st - 200:
                acc.append((s, k, i, ts))
        pairs = [
            (lk, [li, ri])
            for ls, lk, li, lt in acc
            for rs, rk, ri, rt in acc
            if ls == 0 and rs == 1 and lk == rk and lt - 300 <= rt <= lt + 500
        ]
        ml, mr = {p_[1][0] for p_ in pairs}, {p_[1][1] for p_ in pairs}
        want += pairs
        want += [(k, [i, None]) for s, k, i, ts in acc if s == 0 and i not in ml and ts + 500 < st - 200]
        want += [(k, [None, i]) for s, k, i, ts in acc if s == 1 and i not in mr and ts + 300 < st - 200]
    got = [(k.decode(), json.loads(v)) for _, k, v in read_committed(boot, "ss-out", 2) if k and v]
    assert sorted(got, key=repr) == sorted(want, key=repr)
    assert any(v[0] is None for _, v in got) and any(v[1] is None for _, v in got)

    # both sides re-keyed (to the same keys): through -left/-right repartition topics, same result
    q1 = (
        S.stream(spark, "ssl", bootstrap=boot, value_serde="json")
        .select_key(lambda k, v: k)
        .join(
            S.stream(spark, "ssr", bootstrap=boot, value_serde="json").map(lambda k, v: (k, v)),
            lambda a, b: [None if a is None else a["i"], None if b is None else b["i"]],
            S.JoinWindows(before=300, after=500, grace=200),
            how="outer",
        )
        .to("ss-out2", str(tmp_path / "ss2"), trigger={"availableNow": True})
    )
    run_available_now(q1)
    got2 = [(k.decode(), json.loads(v)) for _, k, v in read_committed(boot, "ss-out2", 2) if k and v]
    assert sorted(got2, key=repr) == sorted(want, key=repr)
    assert len(read_committed(boot, "strom-ss-out2-join-left-repartition", 2)) == sum(
        1 for e in ev if e[0] == 0
    )

    d, grace = 100, 300
    sl = [(k, ts) for _, k, _, ts in ev]
    produce_ops(boot, "sl-in", [(k, {}, ts) for k, ts in sl])
    q2 = (
        S.stream(spark, "sl-in", bootstrap=boot, value_serde="json")
        .group_by_key()
        .windowed_by(S.SlidingWindows(d, grace))
        .count(emit="final")
        .to("sl-out", str(tmp_path / "sl"), value_serde="string", trigger={"availableNow": True})
    )
    run_available_now(q2)
    ref: dict[tuple[str, int], int] = {}
    for p in range(2):
        st, acc2 = -1, []
        for k, ts in (e for e in sl if part(e[0]) == p):
            st = max(st, ts)
            if ts + 1 + d > st - grace:
                acc2.append((k, ts))
        for k in {k for k, _ in acc2}:
            tss = [x for kk, x in acc2 if kk == k]
            starts = {x - d for x in tss} | {x + 1 for x in tss if any(x < u <= x + 1 + d for u in tss)}
            for s0 in starts:
                if s0 + d + grace <= st:
                    ref[(k, s0)] = sum(1 for x in tss if s0 <= x <= s0 + d)
    out = [(json.loads(k), int(v)) for _, k, v in read_committed(boot, "sl-out", 2) if k and v]
    assert len(out) == len({(w["key"], w["start"]) for w, _ in out})
    assert {(w["key"], w["start"]): n for w, n in out} == ref
    assert all(w["end"] - w["start"] == d for w, _ in out)


def test_repartition_makes_the_next_operator_read_a_repartition_topic() -> None:
    """``KStream.repartition()`` (no Spark needed to plan): the count reads its input through a
    repartition stage; without it, directly."""
    from strom.streams.dsl import KStream, _source

    src = _source(None, "t", "b", "string", "json", None)  # type: ignore[arg-type]
    direct = KStream(src).group_by_key().count()
    assert not any(direct._side_flags()[0])
    through = KStream(src).repartition().group_by_key(name="bykey").count()
    stage1, _ = through._side_flags()
    assert stage1[0] is not None and through.name == "bykey"
