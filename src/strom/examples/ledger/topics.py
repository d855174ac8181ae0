"""Topic set-up and small reads for the ledger example, on :mod:`strom.client`.

Error contract: broker failures raise :class:`strom.client.KafkaError`; an existing topic is fine.
"""

from __future__ import annotations

from strom.client import EARLIEST, LATEST, Client, KafkaError
from strom.examples.ledger import model

__all__ = ["ensure_topics", "latest_values"]

TOPIC_ALREADY_EXISTS = 36
COMPACT = {"cleanup.policy": "compact"}


async def ensure_topics(bootstrap: str, ledger_partitions: int = 3, view_partitions: int = 3) -> None:
    """Create the ledger (append-only), master-data and view topics (compacted), ``alerts`` and
    ``ledger-dead-letters`` (append-only) where missing. Existing topics are left as they are."""
    specs: dict[str, tuple[int, int, dict[str, str]]] = {
        model.LEDGER: (ledger_partitions, 1, {"cleanup.policy": "delete", "retention.ms": "-1"}),
        model.ITEMS: (1, 1, COMPACT),
        model.CELLS: (1, 1, COMPACT),
        model.ALERTS: (1, 1, {"cleanup.policy": "delete"}),
        model.DEAD_LETTERS: (1, 1, {"cleanup.policy": "delete", "retention.ms": "-1"}),
    }
    for t in model.VIEW_TOPICS:
        specs[t] = (view_partitions, 1, COMPACT)
    async with Client(bootstrap) as c:
        existing = set(await c.list_topics())
        wanted = {t: s for t, s in specs.items() if t not in existing}
        if not wanted:
            return
        for err in (await c.create_topics(wanted)).values():
            if err is not None and err.code != TOPIC_ALREADY_EXISTS:
                raise err


async def latest_values(bootstrap: str, topic: str) -> dict[str, bytes]:
    """The latest value per key of a (compacted, non-transactional) topic; tombstones remove keys.
    An absent topic reads as empty."""
    out: dict[str, bytes] = {}
    async with Client(bootstrap) as c:
        if topic not in await c.list_topics():
            return out
        tm = await c.topic(topic, refresh=True)
        parts = sorted(tm.partitions)
        starts = await c.list_offsets(topic, dict.fromkeys(parts, EARLIEST))
        ends = await c.list_offsets(topic, dict.fromkeys(parts, LATEST))
        assert isinstance(starts, dict) and isinstance(ends, dict)
        for p in parts:
            pos, end = starts[p], ends[p]
            while pos < end:
                r = await c.fetch(topic, p, pos, max_wait_ms=100)
                for record in r.records:
                    if record.key is None:
                        continue
                    k = record.key.decode()
                    if record.value is None:
                        out.pop(k, None)
                    else:
                        out[k] = bytes(record.value)
                nxt = r.next_offset
                if nxt is None or nxt <= pos:
                    raise KafkaError(-1, f"no progress reading {topic}-{p} at offset {pos}")
                pos = nxt
    return out
