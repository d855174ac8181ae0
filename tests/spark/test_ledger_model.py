"""The ledger example without Spark or a broker: the generator's promises, the reference
projection on the hand-written ledger, the job's row shapes and the CLI's dry run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from strom.examples.ledger import model
from strom.examples.ledger.generator import GeneratorConfig, day_slice, generate, ledger_partition
from strom.testing.broker_process import free_port

from .test_ledger import CELLS, EXPECTED1, EXPECTED2, ITEMS, PHASE1, PHASE2, counts_only


def answers(v: model.Views, path: str) -> object:
    parts = path.strip("/").split("?")[0].split("/")
    if parts[0] == "items":
        return model.answer_item(v, parts[1])
    if parts[0] == "cells":
        return model.answer_cell(v, parts[1])
    if parts[0] == "workers":
        return model.answer_worker_day(v, parts[1], parts[3])
    if parts[0] == "corrections":
        return model.answer_corrections(v, path.split("item=")[1] if "item=" in path else None)
    if parts[0] == "over-capacity":
        return model.answer_over_capacity(v)
    return model.answer_stock(v)


@pytest.mark.parametrize(("movements", "expected"), [(PHASE1, EXPECTED1), (PHASE1 + PHASE2, EXPECTED2)])
def test_projection_of_hand_ledger(movements: list[model.Movement], expected: dict[str, object]) -> None:
    v = model.project(movements, ITEMS, CELLS)
    for path, want in expected.items():
        assert counts_only(path, answers(v, path), want) == want, path
    assert model.answer_item(v, "SKU-NOPE") is None
    assert model.answer_cell(v, "Z-9") is None


def test_generator_is_deterministic_and_extends() -> None:
    cfg = GeneratorConfig(seed=3, days=4, movements_per_day=100)
    a, b = generate(cfg), generate(cfg)
    assert a.movements == b.movements
    short = generate(replace(cfg, days=2))
    assert a.movements[: len(short.movements)] == short.movements
    assert list(day_slice(a, cfg.start, 2)) == a.movements[len(short.movements) :]
    assert generate(replace(cfg, seed=4)).movements != a.movements


def test_generated_ledger_is_consistent() -> None:
    w = generate(GeneratorConfig(seed=5, days=6, movements_per_day=150, mistake_rate=0.1))
    ids = [m.id for m in w.movements]
    assert len(set(ids)) == len(ids)
    by_id = {m.id: m for m in w.movements}
    stornos = [m for m in w.movements if m.is_storno]
    assert len(stornos) > 10
    for s in stornos:
        orig = by_id[s.reverses or ""]
        assert ids.index(orig.id) < ids.index(s.id)
        assert (s.item, s.cell, s.qty, s.unit_weight_kg) == (
            orig.item,
            orig.cell,
            -orig.qty,
            orig.unit_weight_kg,
        )
        assert s.description.startswith(f"Storno of {orig.id}: ")
        assert not orig.is_storno
    assert len({s.reverses for s in stornos}) == len(stornos), "a movement reversed twice"
    booked: Counter[tuple[str, str]] = Counter()
    for m in w.movements:
        booked[(m.item, m.cell)] += m.qty
        assert booked[(m.item, m.cell)] >= 0, f"negative stock after {m.id}"
        assert m.qty != 0
    weights = {i.item: i.unit_weight_kg for i in w.items}
    assert all(m.unit_weight_kg is not None for m in w.movements if weights[m.item] is None)
    assert {ledger_partition(m.item, 3) for m in w.movements} == {0, 1, 2}


def test_movement_json_round_trip_and_errors() -> None:
    m = PHASE1[6]
    assert model.Movement.from_json(m.to_json()) == m
    with pytest.raises(ValueError):
        model.Movement.from_json(b'{"id": "x"}')
    with pytest.raises(ValueError):
        model.Movement.from_json(b"not json")


def test_view_rows_match_projection_rows() -> None:
    """The job's row builder gives the rows of the reference projection (fed with the totals)."""
    pytest.importorskip("pyspark")
    from strom.examples.ledger.job import view_rows

    ref = model.project(PHASE1 + PHASE2, ITEMS, CELLS)
    caps = {c.cell: model.grams(c.capacity_kg) or 0 for c in CELLS}
    for key, r in ref.view(model.STOCK_BY_ITEM_CELL).items():
        agg = {"view": model.STOCK_BY_ITEM_CELL, "key": key, "a": r["item"], "b": r["cell"], "items": 0}
        agg |= {"qty": r["qty"], "weight_g": r["weight_g"], "movements": r["movements"], "stornos": 0}
        agg |= {"last_date": r["last_date"], "raw": None}
        assert [(t, k, json.loads(v)) for t, k, v in view_rows(agg, caps)] == [
            (model.STOCK_BY_ITEM_CELL, key, r)
        ]
    r = ref.view(model.CELL_WEIGHT)["B-1"]
    agg = {"view": model.CELL_WEIGHT, "key": "B-1", "a": "B-1", "b": None, "qty": r["qty"], "items": 0}
    agg |= {"weight_g": r["weight_g"], "movements": 9, "stornos": 0, "last_date": r["last_date"], "raw": None}
    rows = [(t, k, json.loads(v)) for t, k, v in view_rows(agg, caps)]
    assert rows == [(model.CELL_WEIGHT, "B-1", r), (model.ALERTS, "B-1", {**r, "excess_g": 4000})]


def test_cli_dry_run() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "strom.examples.ledger", "generate", "--dry-run", "--days", "2"],
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    lines = [model.Movement.from_json(line) for line in out.splitlines()]
    assert lines == generate(GeneratorConfig(days=2)).movements
    bad = subprocess.run(
        [sys.executable, "-m", "strom.examples.ledger", "query", "item"], capture_output=True
    )
    assert bad.returncode == 2


def test_cli_against_a_dead_broker_says_so_in_one_line(tmp_path: Path) -> None:
    """No traceback, one line naming the broker (``run`` fails before starting a JVM)."""
    pytest.importorskip("confluent_kafka")
    dead = f"127.0.0.1:{free_port()}"
    day = ("--date", "2024-03-04")
    for args in (
        ("generate", "--bootstrap", dead, "--days", "1"),
        ("run", "--bootstrap", dead, "--checkpoint", str(tmp_path / "ck"), "--available-now"),
        ("book", "--bootstrap", dead, *day, "--item", "A", "--cell", "B", "--qty", "1", "--description", "x"),
        ("transfer", "--bootstrap", dead, *day, "--item", "A", "--from", "B", "--to", "C", "--qty", "1"),
        ("storno", "X", "--bootstrap", dead),
        ("item", "SKU-A", "--name", "x", "--bootstrap", dead),
        ("cell", "A-1", "--capacity-kg", "5", "--bootstrap", dead),
        ("query", "--url", f"http://{dead}", "stock"),
    ):
        r = subprocess.run(
            [sys.executable, "-m", "strom.examples.ledger", *args], capture_output=True, text=True, timeout=60
        )
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1, (args, r.stderr)
        assert lines[0].startswith("error: ") and "Traceback" not in r.stderr, (args, r.stderr)
        assert dead in lines[0] or "not reachable" in lines[0], (args, lines[0])


def test_cli_refuses_bad_booking_arguments() -> None:
    """Argument errors exit 2 with argparse's message, before any broker is asked."""
    for args, msg in (
        (
            (
                "book",
                "--date",
                "2024-13-04",
                "--item",
                "A",
                "--cell",
                "B",
                "--qty",
                "1",
                "--description",
                "x",
            ),
            "invalid date",
        ),
        (
            (
                "book",
                "--date",
                "2024-03-04",
                "--item",
                "A",
                "--cell",
                "B",
                "--qty",
                "1.5",
                "--description",
                "x",
            ),
            "invalid int value",
        ),
        (
            (
                "book",
                "--date",
                "2024-03-04",
                "--item",
                "A",
                "--cell",
                "B",
                "--qty",
                "1",
                "--description",
                "x",
                "--time",
                "25:00",
            ),
            "invalid time",
        ),
        (("book", "--date", "2024-03-04", "--item", "A", "--cell", "B", "--qty", "1"), "--description"),
    ):
        r = subprocess.run(
            [sys.executable, "-m", "strom.examples.ledger", *args], capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)


def test_records_without_worker_and_unusable_records() -> None:
    """A movement without a worker (missing, null or blank) is valid and counts in the stock but in
    no worker's day; a record breaking the rules has a reason (the job's dead-letter reason)."""
    base = {"id": "X1", "date": "2024-03-04", "item": "SKU-A", "cell": "A-1", "qty": 5}
    for worker in ({}, {"worker": None}, {"worker": ""}, {"worker": "  "}):
        m = model.Movement.from_json(json.dumps({**base, **worker}))
        assert m.worker is None
        v = model.project([m], ITEMS, CELLS)
        assert model.answer_stock(v)["items"] == {"SKU-A": 5}
        assert v.view(model.WORKER_DAY) == {} and model.answer_workers(v) == {"count": 0, "workers": []}
    assert model.check_record(base) is None
    bad = {
        "not a JSON object": [1, 2],
        "missing or invalid 'id' (a non-empty string)": {**base, "id": ""},
        "missing or invalid 'item' (a non-empty string)": {k: v for k, v in base.items() if k != "item"},
        "invalid 'date' (YYYY-MM-DD)": {**base, "date": "2024-02-30"},
        "'qty' must be a non-zero integer": {**base, "qty": 0},
    }
    for reason, record in bad.items():
        assert model.check_record(record) == reason
        with pytest.raises(ValueError, match=re.escape(reason)):
            model.Movement.from_json(json.dumps(record))
    assert model.check_record({**base, "qty": 1.5}) == "'qty' must be a non-zero integer"


def test_worker_day_rows_transfer_once_and_pay() -> None:
    """A worker's day: rows with storno marks, a transfer counted once, nets, pay from the rates
    (a reversed movement and the storno are not paid); unknown workers are None (404)."""
    M = model.Movement
    rows = [
        M("O1", "2024-03-04", "07:00:00", "SKU-A", "A-1", 20, None, "opening balance"),
        M("T1", "2024-03-04", "08:00:00", "SKU-A", "A-1", -5, "anna", "transfer", None, None, "TA"),
        M("T2", "2024-03-04", "08:00:00", "SKU-A", "B-1", 5, "anna", "transfer", None, None, "TA"),
        M("P1", "2024-03-04", "09:00:00", "SKU-A", "A-1", -3, "anna", "pick"),
        M("P2", "2024-03-04", "09:30:00", "SKU-A", "A-1", -4, "anna", "pick (wrong)"),
        M("S1", "2024-03-04", "10:00:00", "SKU-A", "A-1", 4, "anna", "Storno of P2: x", None, "P2"),
    ]
    v = model.project(rows, ITEMS, CELLS)
    day = model.answer_worker_day(v, "anna", "2024-03-04", model.PayRates(per_movement=2.0, per_piece=0.5))
    assert day is not None
    assert (day["movements"], day["items"], day["stornos"]) == (3, 12, 1)
    assert [(r["id"], r["storno"], r["reversed_by"]) for r in day["rows"]] == [
        ("T1", False, None),
        ("T2", False, None),
        ("P1", False, None),
        ("P2", False, "S1"),
        ("S1", True, None),
    ]
    assert day["net"] == {"SKU-A|A-1": -8, "SKU-A|B-1": 5} and day["net_items"] == {"SKU-A": -3}
    # paid: the transfer once (5 pieces) and P1 (3 pieces); not P2 (reversed) nor S1
    assert day["pay"] == {"movements": 2, "pieces": 8, "per_movement": 2.0, "per_piece": 0.5, "amount": 8.0}
    empty = model.answer_worker_day(v, "anna", "2024-03-05")
    assert empty is not None and empty["rows"] == [] and empty["movements"] == 0
    assert model.answer_worker_day(v, "bob", "2024-03-04") is None
    assert model.answer_workers(v, "bob") is None
    assert model.answer_workers(v) == {"count": 1, "workers": [{"worker": "anna", "days": ["2024-03-04"]}]}
