"""Booking by hand: a movement, a transfer (both legs) or the storno of a row, validated against
the catalogue and the ledger and written in ONE Kafka transaction per command, so a transfer or
a transfer's storno is in the ledger with both legs or not at all.

The catalogue is the master data: an item must be in the compacted ``items`` topic and a cell in
``cells`` before a movement may name them (``strom-ledger item`` / ``strom-ledger cell`` add
them; ``strom-ledger generate`` writes its own). Validation (each a :class:`BookingError` with a
one-line message, nothing written):

* the item or a cell is not in the catalogue; a quantity is zero (a transfer's must be positive);
  a transfer's source and target cell are the same;
* a storno names a row that is not in the ledger, a row that is itself a storno, or a row already
  reversed. The storno of a transfer leg reverses both legs, as one transfer.

Ids are ``<YYYYMMDD>-<6 hex digits>`` (random: bookings need no coordination).

Error contract: :class:`BookingError` for invalid bookings and for an unreachable broker.
"""

from __future__ import annotations

import asyncio
import time as _time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from strom.client import KafkaError
from strom.examples.ledger import model
from strom.examples.ledger.generator import ledger_partition
from strom.examples.ledger.topics import ensure_topics, latest_values

__all__ = ["BookingError", "Catalogue", "book", "read_ledger", "storno", "transfer", "write"]


class BookingError(Exception):
    """A booking that was refused (the message is one line, for the storekeeper)."""


@dataclass
class Catalogue:
    items: dict[str, model.Item]
    cells: dict[str, model.Cell]

    @classmethod
    def load(cls, bootstrap: str) -> Catalogue:
        try:
            raw_items = asyncio.run(latest_values(bootstrap, model.ITEMS))
            raw_cells = asyncio.run(latest_values(bootstrap, model.CELLS))
        except (KafkaError, OSError) as e:
            raise BookingError(f"cannot read the catalogue from {bootstrap}: {_one_line(e)}") from None
        items = {k: model.Item.from_json(v) for k, v in raw_items.items()}
        cells = {k: model.Cell.from_json(v) for k, v in raw_cells.items()}
        return cls(items, cells)

    def check_item(self, item: str) -> None:
        if item not in self.items:
            raise BookingError(
                f"unknown item {item!r}: not in the catalogue ({_known(self.items)}); "
                f"add it with: strom-ledger item {item} --name NAME"
            )

    def check_cell(self, cell: str) -> None:
        if cell not in self.cells:
            raise BookingError(
                f"unknown cell {cell!r}: not in the catalogue ({_known(self.cells)}); "
                f"add it with: strom-ledger cell {cell} --capacity-kg KG"
            )


def _known(names: dict[str, Any]) -> str:
    if not names:
        return "the catalogue is empty"
    shown = sorted(names)[:8]
    more = f", ... {len(names) - len(shown)} more" if len(names) > len(shown) else ""
    return "known: " + ", ".join(shown) + more


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def _now_time() -> str:
    return datetime.now().strftime("%H:%M:%S")


def new_id(date: str) -> str:
    return f"{date.replace('-', '')}-{uuid.uuid4().hex[:6]}"


def _worker(worker: str | None) -> str | None:
    return worker.strip() or None if worker is not None else None


def _check_date(date: str) -> str:
    if model.check_record({"id": "x", "date": date, "item": "x", "cell": "x", "qty": 1}) is not None:
        raise BookingError(f"invalid date {date!r} (YYYY-MM-DD)")
    return date


def book(
    bootstrap: str,
    *,
    date: str,
    item: str,
    cell: str,
    qty: int,
    description: str,
    worker: str | None = None,
    time: str | None = None,
    unit_weight_kg: float | None = None,
) -> list[model.Movement]:
    """Book one movement (``qty`` > 0 into ``cell``, < 0 out of it). Returns what was written."""
    _check_date(date)
    if qty == 0:
        raise BookingError("qty must not be 0 (positive: into the cell, negative: out of it)")
    cat = Catalogue.load(bootstrap)
    cat.check_item(item)
    cat.check_cell(cell)
    m = model.Movement(
        id=new_id(date),
        date=date,
        time=time or _now_time(),
        item=item,
        cell=cell,
        qty=qty,
        worker=_worker(worker),
        description=description,
        unit_weight_kg=unit_weight_kg,
    )
    write(bootstrap, [m])
    return [m]


def transfer(
    bootstrap: str,
    *,
    date: str,
    item: str,
    from_cell: str,
    to_cell: str,
    qty: int,
    description: str = "",
    worker: str | None = None,
    time: str | None = None,
    unit_weight_kg: float | None = None,
) -> list[model.Movement]:
    """Move ``qty`` pieces of ``item`` from one cell to another: two rows sharing a ``transfer``
    id, written in one transaction."""
    _check_date(date)
    if qty <= 0:
        raise BookingError("a transfer's qty must be positive (the pieces moved)")
    if from_cell == to_cell:
        raise BookingError(f"a transfer needs two different cells (both are {from_cell!r})")
    cat = Catalogue.load(bootstrap)
    cat.check_item(item)
    cat.check_cell(from_cell)
    cat.check_cell(to_cell)
    t = time or _now_time()
    tid = "T" + new_id(date)
    desc = description or f"transfer {from_cell} -> {to_cell}"
    legs = [
        model.Movement(new_id(date), date, t, item, cell, q, _worker(worker), desc, unit_weight_kg, None, tid)
        for cell, q in ((from_cell, -qty), (to_cell, qty))
    ]
    write(bootstrap, legs)
    return legs


def storno(
    bootstrap: str,
    row_id: str,
    *,
    date: str | None = None,
    worker: str | None = None,
    reason: str = "correction",
    time: str | None = None,
) -> list[model.Movement]:
    """Reverse ledger row ``row_id`` (both legs if it is a transfer leg), in one transaction."""
    day = _check_date(date or datetime.now().date().isoformat())
    rows = read_ledger(bootstrap)
    by_id = {m.id: m for m in rows}
    orig = by_id.get(row_id)
    if orig is None:
        raise BookingError(f"no ledger row {row_id!r}")
    if orig.is_storno:
        raise BookingError(
            f"{row_id} is a storno (of {orig.reverses}): a storno cannot be reversed; "
            "book the movement again instead"
        )
    targets = [orig]
    if orig.transfer is not None:
        targets = sorted(
            (m for m in rows if m.transfer == orig.transfer and not m.is_storno), key=lambda m: m.qty
        )
    reversed_by = {m.reverses: m.id for m in rows if m.reverses is not None}
    for m in targets:
        if m.id in reversed_by:
            raise BookingError(f"{m.id} was already reversed by {reversed_by[m.id]}")
    t = time or _now_time()
    tid = "T" + new_id(day) if orig.transfer is not None else None
    out = [m.storno(new_id(day), day, t, _worker(worker), reason, transfer=tid) for m in targets]
    write(bootstrap, out)
    return out


def read_ledger(bootstrap: str, timeout: float = 30.0) -> list[model.Movement]:
    """Every committed, usable movement of the ledger (unusable records are left out: they are
    the job's dead letters)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
    from confluent_kafka import KafkaError as CKError

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"strom-ledger-book-{uuid.uuid4().hex}",  # never joined nor committed
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "log_level": 0,
        }
    )
    try:
        try:
            md = c.list_topics(model.LEDGER, timeout=min(timeout, 10))
        except KafkaException as e:
            raise BookingError(f"cannot read the ledger from {bootstrap}: {_one_line(e)}") from None
        t = md.topics.get(model.LEDGER)
        if t is None or t.error is not None or not t.partitions:
            return []
        c.assign([TopicPartition(model.LEDGER, p, OFFSET_BEGINNING) for p in t.partitions])
        left = set(t.partitions)
        out: list[model.Movement] = []
        end = _time.monotonic() + timeout
        while left:
            if _time.monotonic() > end:
                raise BookingError(f"cannot read the ledger from {bootstrap}: timed out")
            for msg in c.consume(500, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == CKError._PARTITION_EOF:
                        left.discard(msg.partition())
                        continue
                    raise BookingError(f"cannot read the ledger from {bootstrap}: {err.str()}")
                value = msg.value()
                if value is None:
                    continue
                try:
                    out.append(model.Movement.from_json(value))
                except ValueError:
                    continue
        return out
    finally:
        c.close()


def write(bootstrap: str, movements: Sequence[model.Movement], timeout: float = 30.0) -> None:
    """Append ``movements`` to the ledger in one transaction (creating the topics if missing)."""
    from confluent_kafka import KafkaException, Producer

    try:
        asyncio.run(ensure_topics(bootstrap))
    except (KafkaError, OSError) as e:
        raise BookingError(f"cannot reach {bootstrap}: {_one_line(e)}") from None
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"strom-ledger-book-{uuid.uuid4().hex}",
            "enable.idempotence": True,
            "acks": "all",
            "log_level": 0,
        }
    )
    try:
        md = p.list_topics(model.LEDGER, timeout=10)
        t = md.topics.get(model.LEDGER)
        if t is None or t.error is not None or not t.partitions:
            raise BookingError(f"topic {model.LEDGER!r} not available on {bootstrap}")
        n = len(t.partitions)
        p.init_transactions(timeout)
        p.begin_transaction()
        for m in movements:
            part = ledger_partition(m.item, n)
            p.produce(model.LEDGER, key=m.id.encode(), value=m.to_json(), partition=part)
        p.commit_transaction(timeout)
    except KafkaException as e:
        raise BookingError(f"booking not written to {bootstrap}: {_one_line(e)}") from None
    finally:
        p.flush(1)
