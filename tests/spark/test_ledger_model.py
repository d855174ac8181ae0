"""The ledger example without Spark or a broker: the generator's promises, the reference
projection on the hand-written ledger, the job's row shapes and the CLI's dry run."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from dataclasses import replace

import pytest

from strom.examples.ledger import model
from strom.examples.ledger.generator import GeneratorConfig, day_slice, generate, ledger_partition

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
