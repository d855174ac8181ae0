"""The ledger's records, the views derived from it, and the answers given from those views.

Everything here is pure Python with no I/O: the Spark job computes the same views at scale, the
HTTP service answers from views it materialises from the result topics, and the tests answer from
:func:`project` (the reference projection) to check both.

Ledger record (topic ``ledger``, key = the movement id, value = UTF-8 JSON)::

    {"id": "M0000042", "date": "2024-03-04", "time": "09:15:00",
     "item": "SKU-0007", "cell": "A-01-2", "qty": -5,          # + into the cell, - out of it
     "unit_weight_kg": 1.25,                                   # optional: else the item's master weight
     "description": "pick for order 1234",
     "worker": "anna",                                         # optional: null/absent/"" = no worker
     "reverses": null,                                         # a storno names the movement it reverses
     "transfer": null}                                         # both legs of a transfer share an id

Required: ``id`` (non-empty string), ``date`` (``YYYY-MM-DD``), ``item`` and ``cell`` (non-empty
strings), ``qty`` (a non-zero integer). Everything else is optional (``time`` defaults to
``00:00:00``). A movement without a worker (an opening balance, say) counts in every stock view
but in no worker's day. A record breaking these rules cannot be used: the job writes it to the
dead-letter topic ``ledger-dead-letters`` with the reason (:func:`check_record` gives the same
reasons) instead of dropping it.

A storno (correction) mirrors the movement it reverses: same item, cell and unit weight, the
negated quantity, ``reverses`` = the original id, and a description saying so. A transfer is two
rows booked in one transaction, ``-qty`` out of the source cell and ``+qty`` into the target cell,
with the same ``transfer`` id; its storno reverses both legs (again as one transfer). Entries are
never edited or deleted; stock is the sum of the ledger.

Master data (compacted topics ``items`` and ``cells``, key = the id)::

    {"item": "SKU-0007", "name": "hex bolts M8 (box)", "unit_weight_kg": 1.25}
    {"cell": "A-01-2", "capacity_kg": 800.0}

Weights are computed in whole grams (``round(unit_weight_kg * 1000) * qty``) so sums are exact.

Result rows (compacted topics, one key per row; see :data:`VIEW_TOPICS`)::

    stock-by-item-cell  "item|cell"   {"item", "cell", "qty", "weight_g", "movements", "last_date"}
    stock-by-item       "item"        {"item", "qty", "weight_g", "movements", "last_date"}
    worker-day          "worker|date" {"worker", "date", "movements", "items", "stornos"}
    worker-movements    "worker|date|id"  the movement's ledger record (rows with a worker only)
    corrections         storno id     the storno's ledger record, as it is in the ledger
    cell-weight         "cell"        {"cell", "qty", "weight_g", "capacity_g", "over", "last_date"}

``worker-day`` counts, per worker and day, the ordinary movements booked (``movements``), the
pieces they moved (``items`` = sum of ``|qty|``) and the stornos booked (``stornos``, not counted
in the other two). A transfer counts once: its incoming leg (``transfer`` set, ``qty`` > 0) adds
nothing to the counts.

Dead letters (topic ``ledger-dead-letters``, append-only, key = ``"<partition>-<offset>"`` of the
ledger record)::

    {"partition": 0, "offset": 17, "key": "M0000042", "value": "<the record as text>",
     "reason": "'qty' must be a non-zero integer"}

The ``alerts`` topic (not compacted) receives a ``cell-weight``-shaped row with ``excess_g``
whenever an update leaves a cell above its capacity.

Error contract: :func:`Movement.from_json` raises :class:`ValueError` on a malformed record.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import date as _date
from typing import Any

__all__ = [
    "ALERTS",
    "CELLS",
    "CELL_WEIGHT",
    "CORRECTIONS",
    "DEAD_LETTERS",
    "ITEMS",
    "LEDGER",
    "STOCK_BY_ITEM",
    "STOCK_BY_ITEM_CELL",
    "VIEW_TOPICS",
    "WORKER_DAY",
    "WORKER_MOVEMENTS",
    "Cell",
    "Item",
    "Movement",
    "PayRates",
    "Views",
    "answer_cell",
    "answer_corrections",
    "answer_item",
    "answer_over_capacity",
    "answer_worker_day",
    "answer_workers",
    "check_record",
    "grams",
    "project",
]

LEDGER = "ledger"
ITEMS = "items"
CELLS = "cells"
STOCK_BY_ITEM_CELL = "stock-by-item-cell"
STOCK_BY_ITEM = "stock-by-item"
WORKER_DAY = "worker-day"
CORRECTIONS = "corrections"
CELL_WEIGHT = "cell-weight"
WORKER_MOVEMENTS = "worker-movements"
ALERTS = "alerts"
DEAD_LETTERS = "ledger-dead-letters"
VIEW_TOPICS = (STOCK_BY_ITEM_CELL, STOCK_BY_ITEM, WORKER_DAY, CORRECTIONS, CELL_WEIGHT, WORKER_MOVEMENTS)
"""The compacted result topics, one key per row."""

JsonDict = dict[str, Any]


def grams(kg: float | None) -> int | None:
    """Whole grams of a weight in kg (``None`` stays ``None``)."""
    return None if kg is None else round(kg * 1000)


@dataclass(frozen=True)
class Item:
    item: str
    name: str
    unit_weight_kg: float | None = None

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> Item:
        d = json.loads(data)
        return cls(str(d["item"]), str(d.get("name", "")), _opt_float(d.get("unit_weight_kg")))


@dataclass(frozen=True)
class Cell:
    cell: str
    capacity_kg: float

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> Cell:
        d = json.loads(data)
        return cls(str(d["cell"]), float(d["capacity_kg"]))


@dataclass(frozen=True)
class Movement:
    """One ledger entry. ``qty`` > 0 puts pieces into the cell, < 0 takes them out."""

    id: str
    date: str
    time: str
    item: str
    cell: str
    qty: int
    worker: str | None
    description: str
    unit_weight_kg: float | None = None
    reverses: str | None = None
    transfer: str | None = None

    @property
    def is_storno(self) -> bool:
        return self.reverses is not None

    def to_dict(self) -> JsonDict:
        return asdict(self)

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), separators=(",", ":")).encode()

    @property
    def is_transfer_in(self) -> bool:
        """The incoming leg of a transfer (not counted again in a worker's day)."""
        return self.transfer is not None and self.qty > 0

    @classmethod
    def from_json(cls, data: bytes | str) -> Movement:
        """The movement of a ledger record; :class:`ValueError` with the reason if the record
        cannot be used (see :func:`check_record`)."""
        try:
            d = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"malformed ledger record: not JSON ({e})") from e
        reason = check_record(d)
        if reason is not None:
            raise ValueError(f"malformed ledger record: {reason}")
        try:
            return cls(
                id=str(d["id"]),
                date=str(d["date"]),
                time=str(d.get("time") or "00:00:00"),
                item=str(d["item"]),
                cell=str(d["cell"]),
                qty=int(d["qty"]),
                worker=_opt_str(d.get("worker")),
                description=str(d.get("description") or ""),
                unit_weight_kg=_opt_float(d.get("unit_weight_kg")),
                reverses=_opt_str(d.get("reverses")),
                transfer=_opt_str(d.get("transfer")),
            )
        except (TypeError, ValueError) as e:
            raise ValueError(f"malformed ledger record: {e}") from e

    def storno(
        self, id: str, date: str, time: str, worker: str | None, reason: str, transfer: str | None = None
    ) -> Movement:
        """The entry that reverses this one."""
        return Movement(
            id=id,
            date=date,
            time=time,
            item=self.item,
            cell=self.cell,
            qty=-self.qty,
            worker=worker,
            description=f"Storno of {self.id}: {reason}",
            unit_weight_kg=self.unit_weight_kg,
            reverses=self.id,
            transfer=transfer,
        )

    def weight_g(self, items: Mapping[str, Item]) -> int:
        """Signed weight moved, in grams (0 if no unit weight is known)."""
        w = self.unit_weight_kg
        if w is None:
            it = items.get(self.item)
            w = it.unit_weight_kg if it is not None else None
        g = grams(w)
        return 0 if g is None else g * self.qty


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def _opt_str(v: Any) -> str | None:
    """``None`` for null, absent or blank."""
    if v is None:
        return None
    s = str(v).strip()
    return s or None


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def check_record(d: Any) -> str | None:
    """Why a decoded ledger record cannot be used, or ``None`` if it can. The Spark job applies
    the same rules (and writes the reason to the dead-letter topic)."""
    if not isinstance(d, dict):
        return "not a JSON object"
    for f in ("id", "date", "item", "cell"):
        v = d.get(f)
        if not isinstance(v, str) or not v.strip():
            return f"missing or invalid {f!r} (a non-empty string)"
    if not _DATE.fullmatch(d["date"]):
        return "invalid 'date' (YYYY-MM-DD)"
    try:
        _date.fromisoformat(d["date"])
    except ValueError:
        return "invalid 'date' (YYYY-MM-DD)"
    q = d.get("qty")
    if isinstance(q, bool) or not isinstance(q, int) or q == 0:
        return "'qty' must be a non-zero integer"
    for f in ("worker", "reverses", "transfer", "time", "description"):
        v = d.get(f)
        if v is not None and not isinstance(v, str):
            return f"invalid {f!r} (a string or null)"
    w = d.get("unit_weight_kg")
    if w is not None and (isinstance(w, bool) or not isinstance(w, int | float)):
        return "invalid 'unit_weight_kg' (a number or null)"
    return None


@dataclass
class Views:
    """The result topics' contents: topic -> key -> row (plus master data)."""

    rows: dict[str, dict[str, JsonDict]] = field(default_factory=lambda: {t: {} for t in VIEW_TOPICS})
    items: dict[str, Item] = field(default_factory=dict)
    cells: dict[str, Cell] = field(default_factory=dict)

    def view(self, topic: str) -> dict[str, JsonDict]:
        return self.rows.setdefault(topic, {})


def _add(row: JsonDict, **deltas: int) -> None:
    for k, v in deltas.items():
        row[k] = row.get(k, 0) + v


def project(movements: Iterable[Movement], items: Iterable[Item] = (), cells: Iterable[Cell] = ()) -> Views:
    """The reference projection of a ledger (what the Spark job must produce)."""
    v = Views(items={i.item: i for i in items}, cells={c.cell: c for c in cells})
    for m in movements:
        w = m.weight_g(v.items)
        r = v.view(STOCK_BY_ITEM_CELL).setdefault(f"{m.item}|{m.cell}", {"item": m.item, "cell": m.cell})
        _add(r, qty=m.qty, weight_g=w, movements=1)
        r["last_date"] = max(r.get("last_date", ""), m.date)
        r = v.view(STOCK_BY_ITEM).setdefault(m.item, {"item": m.item})
        _add(r, qty=m.qty, weight_g=w, movements=1)
        r["last_date"] = max(r.get("last_date", ""), m.date)
        if m.worker is not None:
            r = v.view(WORKER_DAY).setdefault(f"{m.worker}|{m.date}", {"worker": m.worker, "date": m.date})
            if m.is_transfer_in:
                _add(r, movements=0, items=0, stornos=0)
            elif m.is_storno:
                _add(r, movements=0, items=0, stornos=1)
            else:
                _add(r, movements=1, items=abs(m.qty), stornos=0)
            v.view(WORKER_MOVEMENTS)[f"{m.worker}|{m.date}|{m.id}"] = m.to_dict()
        if m.is_storno:
            v.view(CORRECTIONS)[m.id] = m.to_dict()
        r = v.view(CELL_WEIGHT).setdefault(m.cell, {"cell": m.cell})
        _add(r, qty=m.qty, weight_g=w)
        r["last_date"] = max(r.get("last_date", ""), m.date)
    for cell, r in v.view(CELL_WEIGHT).items():
        c = v.cells.get(cell)
        cap = grams(c.capacity_kg) if c is not None else None
        if cap is not None:
            r["capacity_g"] = cap
        r["over"] = cap is not None and r["weight_g"] > cap
    return v


# ---------------------------------------------------------------- answers


def _kg(g: int) -> float:
    return g / 1000


def _capacity_g(v: Views, cell: str, row: JsonDict | None) -> int | None:
    c = v.cells.get(cell)
    if c is not None:
        return grams(c.capacity_kg)
    if row is not None and row.get("capacity_g") is not None:
        return int(row["capacity_g"])
    return None


def answer_item(v: Views, item: str) -> JsonDict | None:
    """Total stock of ``item`` and where it is; ``None`` if the item is unknown."""
    row = v.view(STOCK_BY_ITEM).get(item)
    if row is None and item not in v.items:
        return None
    cells = sorted(
        (
            {"cell": r["cell"], "qty": int(r["qty"])}
            for r in v.view(STOCK_BY_ITEM_CELL).values()
            if r["item"] == item and int(r["qty"]) != 0
        ),
        key=lambda r: str(r["cell"]),
    )
    it = v.items.get(item)
    return {
        "item": item,
        "name": it.name if it is not None else None,
        "qty": int(row["qty"]) if row else 0,
        "weight_kg": _kg(int(row["weight_g"])) if row else 0.0,
        "cells": cells,
    }


def answer_cell(v: Views, cell: str) -> JsonDict | None:
    """What is in ``cell`` (non-zero stock per item) and its weight; ``None`` if unknown."""
    row = v.view(CELL_WEIGHT).get(cell)
    if row is None and cell not in v.cells:
        return None
    items = sorted(
        (
            {"item": r["item"], "qty": int(r["qty"]), "weight_kg": _kg(int(r["weight_g"]))}
            for r in v.view(STOCK_BY_ITEM_CELL).values()
            if r["cell"] == cell and int(r["qty"]) != 0
        ),
        key=lambda r: str(r["item"]),
    )
    weight = int(row["weight_g"]) if row else 0
    cap = _capacity_g(v, cell, row)
    return {
        "cell": cell,
        "items": items,
        "qty": int(row["qty"]) if row else 0,
        "weight_kg": _kg(weight),
        "capacity_kg": None if cap is None else _kg(cap),
        "over": cap is not None and weight > cap,
    }


@dataclass(frozen=True)
class PayRates:
    """Pay per worker-day: ``per_movement`` for each movement booked and ``per_piece`` for each
    piece moved. Only movements that stand are paid: a movement reversed by a storno is not,
    nor is the storno; a transfer is paid once (its outgoing leg)."""

    per_movement: float = 0.0
    per_piece: float = 0.0


def _known_worker(v: Views, worker: str) -> bool:
    return any(r.get("worker") == worker for r in v.view(WORKER_DAY).values())


def answer_worker_day(v: Views, worker: str, date: str, rates: PayRates | None = None) -> JsonDict | None:
    """What ``worker`` booked on ``date``: counts (a transfer once), the rows themselves (with
    storno marks), net quantities per item and per item|cell, and the day's pay. ``None`` if the
    worker never booked anything; a known worker's empty day is all zeros."""
    if not _known_worker(v, worker):
        return None
    rates = rates or PayRates()
    row = v.view(WORKER_DAY).get(f"{worker}|{date}") or {}
    prefix = f"{worker}|{date}|"
    reversed_by = {
        str(c["reverses"]): str(c["id"]) for c in v.view(CORRECTIONS).values() if c.get("reverses")
    }
    rows: list[JsonDict] = []
    net: dict[str, int] = {}
    net_items: dict[str, int] = {}
    paid_movements = paid_pieces = 0
    for key, m in v.view(WORKER_MOVEMENTS).items():
        if not key.startswith(prefix):
            continue
        qty = int(m["qty"])
        storno = m.get("reverses") is not None
        rows.append(
            {
                "id": m["id"],
                "time": m.get("time"),
                "item": m["item"],
                "cell": m["cell"],
                "qty": qty,
                "description": m.get("description", ""),
                "storno": storno,
                "reverses": m.get("reverses"),
                "reversed_by": reversed_by.get(str(m["id"])),
                "transfer": m.get("transfer"),
            }
        )
        k = f"{m['item']}|{m['cell']}"
        net[k] = net.get(k, 0) + qty
        net_items[m["item"]] = net_items.get(m["item"], 0) + qty
        counted = not storno and not (m.get("transfer") is not None and qty > 0)
        if counted and str(m["id"]) not in reversed_by:
            paid_movements += 1
            paid_pieces += abs(qty)
    rows.sort(key=lambda r: (str(r["time"]), str(r["id"])))
    pay = paid_movements * rates.per_movement + paid_pieces * rates.per_piece
    return {
        "worker": worker,
        "date": date,
        "items": int(row.get("items", 0)),
        "movements": int(row.get("movements", 0)),
        "stornos": int(row.get("stornos", 0)),
        "rows": rows,
        "net": dict(sorted(net.items())),
        "net_items": dict(sorted(net_items.items())),
        "pay": {
            "movements": paid_movements,
            "pieces": paid_pieces,
            "per_movement": rates.per_movement,
            "per_piece": rates.per_piece,
            "amount": round(pay, 2),
        },
    }


def answer_workers(v: Views, worker: str | None = None) -> JsonDict | None:
    """Every worker with the days they booked on (counts per day); with ``worker``, that worker
    only (``None`` if unknown)."""
    days: dict[str, list[JsonDict]] = {}
    for r in v.view(WORKER_DAY).values():
        days.setdefault(str(r["worker"]), []).append(
            {
                "date": r["date"],
                "movements": int(r.get("movements", 0)),
                "items": int(r.get("items", 0)),
                "stornos": int(r.get("stornos", 0)),
            }
        )
    if worker is not None:
        if worker not in days:
            return None
        return {"worker": worker, "days": sorted(days[worker], key=lambda d: str(d["date"]))}
    return {
        "count": len(days),
        "workers": [
            {"worker": w, "days": [d["date"] for d in sorted(ds, key=lambda d: str(d["date"]))]}
            for w, ds in sorted(days.items())
        ],
    }


def answer_corrections(v: Views, item: str | None = None) -> JsonDict:
    """Every storno entry (optionally of one item), by id."""
    rows = [dict(r) for _, r in sorted(v.view(CORRECTIONS).items()) if item is None or r.get("item") == item]
    return {"count": len(rows), "corrections": rows}


def answer_over_capacity(v: Views) -> JsonDict:
    """Cells whose weight exceeds their capacity, by cell."""
    out = []
    for cell, row in sorted(v.view(CELL_WEIGHT).items()):
        cap = _capacity_g(v, cell, row)
        w = int(row["weight_g"])
        if cap is not None and w > cap:
            out.append(
                {"cell": cell, "weight_kg": _kg(w), "capacity_kg": _kg(cap), "excess_kg": _kg(w - cap)}
            )
    return {"count": len(out), "cells": out}


def answer_stock(v: Views) -> JsonDict:
    """Stock of every item (non-zero and zero alike) and of every (item, cell)."""
    return {
        "items": {k: int(r["qty"]) for k, r in sorted(v.view(STOCK_BY_ITEM).items())},
        "cells": {k: int(r["qty"]) for k, r in sorted(v.view(STOCK_BY_ITEM_CELL).items())},
    }
