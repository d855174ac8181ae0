"""A realistic, deterministic warehouse ledger: items, cells, workers and days of movements.

The simulation keeps two stocks per (item, cell): the *physical* stock and the *booked* stock
(what the ledger says). Workers receive goods into cells (respecting the cell's weight capacity,
with an occasional overfill), pick for orders and transfer between cells. A share of bookings is
wrong (wrong quantity, wrong cell); some movements later the mistake is corrected the way a ledger
must be: a storno entry that reverses the wrong one by id, plus the right booking (at the latest
in the end-of-shift check, so each day ends with booked = physical stock). The positive
one of the two is booked first and picks never exceed ``min(physical, booked)``, so booked stock
never goes negative, and once every mistake is corrected booked equals physical.

The same configuration always gives the same ledger, so a longer run extends a shorter one:
``generate(cfg with days=10)`` starts with the movements of ``days=7``; the CLI uses that to
append days to an existing ledger (``--from-day``).
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, timedelta

from strom.examples.ledger.model import Cell, Item, Movement, grams

__all__ = ["GeneratorConfig", "Warehouse", "generate", "ledger_partition"]

_PRODUCTS = [
    "hex bolts M8",
    "wood screws 4x40",
    "cable ties 200mm",
    "LED panel 60x60",
    "copper pipe 15mm",
    "PVC elbow 90",
    "drywall sheet",
    "cement 25kg",
    "paint white 10l",
    "work gloves",
    "safety goggles",
    "extension cord 10m",
    "circuit breaker 16A",
    "door hinge",
    "silicone sealant",
    "insulation roll",
    "steel angle 40x40",
    "pallet wrap film",
    "cardboard box L",
    "battery AA",
]
_WORKERS = ["anna", "ben", "carla", "dmitri", "emre", "fatima", "georg", "hana", "ivan", "julia"]


@dataclass(frozen=True)
class GeneratorConfig:
    seed: int = 1
    items: int = 40
    cells: int = 30
    workers: int = 6
    days: int = 5
    movements_per_day: int = 200
    mistake_rate: float = 0.03
    overfill_rate: float = 0.05
    start: date = date(2024, 3, 4)


@dataclass
class Warehouse:
    items: list[Item]
    cells: list[Cell]
    workers: list[str]
    movements: list[Movement] = field(default_factory=list)

    def day_of(self, m: Movement, start: date) -> int:
        return (date.fromisoformat(m.date) - start).days


def ledger_partition(item: str, partitions: int) -> int:
    """The ledger partition of an item's movements (one partition per item keeps them ordered)."""
    return zlib.crc32(item.encode()) % partitions


class _IndexedSet:
    """A set with O(1) add, remove and deterministic random choice."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []
        self.index: dict[tuple[str, str], int] = {}

    def add(self, x: tuple[str, str]) -> None:
        if x not in self.index:
            self.index[x] = len(self.items)
            self.items.append(x)

    def discard(self, x: tuple[str, str]) -> None:
        i = self.index.pop(x, None)
        if i is None:
            return
        last = self.items.pop()
        if i < len(self.items):
            self.items[i] = last
            self.index[last] = i

    def __len__(self) -> int:
        return len(self.items)


@dataclass
class _Mistake:
    wrong: Movement
    right: Movement
    reason: str
    due: int


class _Sim:
    def __init__(self, cfg: GeneratorConfig) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        rng = self.rng
        self.items: list[Item] = []
        for i in range(cfg.items):
            product = _PRODUCTS[i % len(_PRODUCTS)]
            w = round(rng.choice([0.05, 0.2, 0.5, 1.0, 2.5, 5.0, 12.0, 25.0]) * rng.uniform(0.8, 1.2), 3)
            known = rng.random() > 0.1  # a tenth of the items have no master weight
            self.items.append(
                Item(f"SKU-{i + 1:04d}", f"{product} #{i // len(_PRODUCTS) + 1}", w if known else None)
            )
        self.item_weight: dict[str, float] = {
            it.item: it.unit_weight_kg if it.unit_weight_kg is not None else round(rng.uniform(0.1, 8.0), 3)
            for it in self.items
        }
        self.master_weight = {it.item: it.unit_weight_kg for it in self.items}
        self.cells = [
            Cell(
                f"{'ABCDEFGH'[i // 20 % 8]}-{i // 4 % 5 + 1:02d}-{i % 4 + 1}",
                float(rng.choice([300, 500, 800, 1200])),
            )
            for i in range(cfg.cells)
        ]
        self.workers = [
            _WORKERS[i % len(_WORKERS)] + ("" if i < len(_WORKERS) else str(i // len(_WORKERS)))
            for i in range(cfg.workers)
        ]
        self.physical: dict[tuple[str, str], int] = {}
        self.booked: dict[tuple[str, str], int] = {}
        self.stocked = _IndexedSet()  # (item, cell) with pickable stock
        self.holding: dict[str, _IndexedSet] = {}  # item -> (item, cell) with booked stock
        self.cell_g: dict[str, int] = {c.cell: 0 for c in self.cells}
        self.capacity_g = {c.cell: grams(c.capacity_kg) or 0 for c in self.cells}
        self.seq = 0
        self.doc = 1000
        self.pending: list[_Mistake] = []
        self.out: list[Movement] = []
        self.day = cfg.start
        self.minute = 0

    # -- helpers
    def next_id(self) -> str:
        self.seq += 1
        return f"M{self.seq:07d}"

    def clock(self) -> str:
        self.minute += 1
        s = 6 * 3600 + self.minute * (16 * 3600 // max(1, self.cfg.movements_per_day * 2))
        return f"{s // 3600 % 24:02d}:{s // 60 % 60:02d}:{s % 60:02d}"

    def unit_weight(self, item: str) -> float | None:
        """Weight carried on the movement: always when the item master has none, else half the time."""
        if self.master_weight[item] is None or self.rng.random() < 0.5:
            return self.item_weight[item]
        return None

    def movement(self, item: str, cell: str, qty: int, worker: str, description: str) -> Movement:
        return Movement(
            id=self.next_id(),
            date=self.day.isoformat(),
            time=self.clock(),
            item=item,
            cell=cell,
            qty=qty,
            worker=worker,
            description=description,
            unit_weight_kg=self.unit_weight(item),
        )

    def book(self, m: Movement) -> None:
        key = (m.item, m.cell)
        self.booked[key] = self.booked.get(key, 0) + m.qty
        self._index(key)
        self.cell_g[m.cell] += (grams(self.item_weight[m.item]) or 0) * m.qty
        self.out.append(m)

    def move_physical(self, item: str, cell: str, qty: int) -> None:
        key = (item, cell)
        self.physical[key] = self.physical.get(key, 0) + qty
        self._index(key)

    def _index(self, key: tuple[str, str]) -> None:
        if self.pickable(key) > 0:
            self.stocked.add(key)
        else:
            self.stocked.discard(key)
        held = self.holding.setdefault(key[0], _IndexedSet())
        if self.booked.get(key, 0) > 0:
            held.add(key)
        else:
            held.discard(key)

    def other_cell(self, cell: str) -> str:
        while True:
            c = self.rng.choice(self.cells).cell
            if c != cell:
                return c

    def pickable(self, key: tuple[str, str]) -> int:
        return min(self.physical.get(key, 0), self.booked.get(key, 0))

    # -- actions
    def receipt(self, worker: str) -> None:
        rng = self.rng
        item = rng.choice(self.items).item
        holding = self.holding.get(item)
        near = holding is not None and len(holding) > 0 and rng.random() < 0.6
        cell = rng.choice(holding.items)[1] if near and holding else rng.choice(self.cells).cell
        unit_g = grams(self.item_weight[item]) or 1
        room = (self.capacity_g[cell] - self.cell_g[cell]) // max(1, unit_g)
        want = rng.randint(1, 60 if unit_g < 5000 else 12)
        qty = want if rng.random() < self.cfg.overfill_rate else min(want, room)
        if qty <= 0:
            return
        self.doc += 1
        desc = f"goods receipt PO-{self.doc}"
        right = self.movement(item, cell, qty, worker, desc)
        self.move_physical(item, cell, qty)
        if rng.random() < self.cfg.mistake_rate:
            if rng.random() < 0.5 and qty > 1:
                wrong_qty = qty * 10 if rng.random() < 0.5 else max(1, qty // 2)
                wrong = Movement(**{**right.to_dict(), "qty": wrong_qty})
                reason = f"wrong quantity (booked {wrong_qty}, received {qty})"
            else:
                other = self.other_cell(cell)
                wrong = Movement(**{**right.to_dict(), "cell": other})
                reason = f"wrong cell (booked {other}, stored in {cell})"
            self.book(wrong)
            self.pending.append(_Mistake(wrong, right, reason, len(self.out) + rng.randint(3, 60)))
        else:
            self.book(right)

    def pick(self, worker: str) -> None:
        rng = self.rng
        if not self.stocked:
            return
        item, cell = rng.choice(self.stocked.items)
        avail = self.pickable((item, cell))
        qty = rng.randint(1, min(avail, 25))
        self.doc += 1
        right = self.movement(item, cell, -qty, worker, f"pick for order SO-{self.doc}")
        self.move_physical(item, cell, -qty)
        if rng.random() < self.cfg.mistake_rate and avail > 1:
            wrong_qty = rng.randint(1, avail - 1)
            wrong_qty += wrong_qty >= qty  # any quantity but the right one
            wrong = Movement(**{**right.to_dict(), "qty": -wrong_qty})
            self.book(wrong)
            reason = f"wrong quantity (booked {wrong_qty}, picked {qty})"
            self.pending.append(_Mistake(wrong, right, reason, len(self.out) + rng.randint(3, 60)))
        else:
            self.book(right)

    def transfer(self, worker: str) -> None:
        rng = self.rng
        if not self.stocked:
            return
        item, src = rng.choice(self.stocked.items)
        dst = self.other_cell(src)
        unit_g = grams(self.item_weight[item]) or 1
        room = (self.capacity_g[dst] - self.cell_g[dst]) // max(1, unit_g)
        qty = min(self.pickable((item, src)), rng.randint(1, 30), room)
        if qty <= 0:
            return
        out = self.movement(item, src, -qty, worker, f"transfer {src} -> {dst}")
        into = self.movement(item, dst, qty, worker, f"transfer {src} -> {dst}")
        out, into = replace(out, transfer=f"T{out.id}"), replace(into, transfer=f"T{out.id}")
        self.move_physical(item, src, -qty)
        self.move_physical(item, dst, qty)
        self.book(out)
        self.book(into)

    def correct_due(self, force: bool = False) -> None:
        due = [p for p in self.pending if force or p.due <= len(self.out)]
        for p in due:
            self.pending.remove(p)
            who = self.rng.choice(self.workers)
            storno = p.wrong.storno(self.next_id(), self.day.isoformat(), self.clock(), who, p.reason)
            rebook = Movement(
                **{
                    **p.right.to_dict(),
                    "id": self.next_id(),
                    "date": self.day.isoformat(),
                    "time": self.clock(),
                    "worker": who,
                    "description": f"re-booking after storno of {p.wrong.id}: {p.right.description}",
                }
            )
            # the positive entry first: booked stock never dips below zero
            for m in sorted((storno, rebook), key=lambda m: -m.qty):
                self.book(m)

    def run(self) -> Iterator[Movement]:
        cfg, rng = self.cfg, self.rng
        emitted = 0
        for d in range(cfg.days):
            self.day = cfg.start + timedelta(days=d)
            self.minute = 0
            on_shift = rng.sample(self.workers, k=max(1, min(len(self.workers), rng.randint(2, 4))))
            for _ in range(cfg.movements_per_day):
                worker = rng.choice(on_shift)
                r = rng.random()
                if r < 0.45:
                    self.receipt(worker)
                elif r < 0.85:
                    self.pick(worker)
                else:
                    self.transfer(worker)
                self.correct_due(force=False)
            self.correct_due(force=True)  # the end-of-shift check finds what is still wrong
            yield from self.out[emitted:]
            emitted = len(self.out)


def generate(cfg: GeneratorConfig) -> Warehouse:
    """The whole ledger of ``cfg`` (deterministic in ``cfg``; the first N days do not depend on
    ``cfg.days``). Every mistake is corrected the same day."""
    sim = _Sim(cfg)
    movements = list(sim.run())
    return Warehouse(sim.items, sim.cells, sim.workers, movements)


def day_slice(w: Warehouse, start: date, from_day: int) -> Sequence[Movement]:
    """The movements booked on day ``from_day`` (0-based) and later."""
    first = (start + timedelta(days=from_day)).isoformat()
    return [m for m in w.movements if m.date >= first]
