"""The state server's sans-IO half: table specs, key/value formats and per-partition stores.

A table is materialised per partition: ``key -> (value, offset of the record)``, a tombstone
(null value) deletes. A windowed table uses Kafka Streams' windowed key layout
(``TimeWindowedSerde``): the key bytes followed by the window start as an 8-byte big-endian
epoch-millisecond; its records are partitioned by the *inner* key (Kafka Streams'
``WindowedStreamPartitioner``), so ``murmur2(inner key)`` finds the partition of every window
of a key. Each store knows its *position* (the next offset it will apply: the answer reflects
every record below it) and the end offset seen at assignment (``target``); it is *ready* once
its position reached the target.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from dataclasses import dataclass, field
from typing import Any

from strom.client.partitioner import partition_for_key

__all__ = [
    "FORMATS",
    "PartitionStore",
    "SpecError",
    "TableSpec",
    "decode_url_key",
    "parse_table_spec",
    "render",
]

FORMATS = ("string", "bytes", "json")
WINDOW_START = struct.Struct(">q")


class SpecError(ValueError):
    """A bad ``--table`` spec or a key that cannot be encoded in the table's key format."""


@dataclass(frozen=True)
class TableSpec:
    name: str
    topic: str
    value_format: str = "string"
    key_format: str = "string"
    windowed: bool = False
    window_size_ms: int | None = None

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "topic": self.topic,
            "key_format": self.key_format,
            "value_format": self.value_format,
            "windowed": self.windowed,
        }
        if self.window_size_ms is not None:
            d["window_size_ms"] = self.window_size_ms
        return d


def parse_table_spec(text: str, windowed: bool = False) -> TableSpec:
    """``NAME=TOPIC[:VALUE_FORMAT[:KEY_FORMAT]]``, windowed ones may end in ``@SIZE_MS``."""
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise SpecError(f"table spec {text!r}: expected NAME=TOPIC[:VALUE_FORMAT[:KEY_FORMAT]]")
    if "/" in name or not name.strip():
        raise SpecError(f"table spec {text!r}: bad table name {name!r}")
    size: int | None = None
    if windowed and "@" in rest:
        rest, _, size_text = rest.rpartition("@")
        try:
            size = int(size_text)
        except ValueError:
            raise SpecError(f"table spec {text!r}: window size {size_text!r} is not an integer") from None
        if size <= 0:
            raise SpecError(f"table spec {text!r}: window size must be positive")
    parts = rest.split(":")
    if len(parts) > 3 or not parts[0]:
        raise SpecError(f"table spec {text!r}: expected NAME=TOPIC[:VALUE_FORMAT[:KEY_FORMAT]]")
    topic = parts[0]
    value_format = parts[1] if len(parts) > 1 else "string"
    key_format = parts[2] if len(parts) > 2 else "string"
    for what, fmt in (("value", value_format), ("key", key_format)):
        if fmt not in FORMATS:
            raise SpecError(
                f"table spec {text!r}: unknown {what} format {fmt!r} (one of {', '.join(FORMATS)})"
            )
    return TableSpec(name, topic, value_format, key_format, windowed, size)


def decode_url_key(text: str, fmt: str) -> bytes:
    """The key bytes a URL path segment names: string/json keys are their UTF-8 text (a JSON key
    must be spelled exactly as its producer wrote it), bytes keys are base64url."""
    if fmt == "bytes":
        try:
            return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (binascii.Error, ValueError):
            raise SpecError(f"key {text!r} is not base64url (the table's key format is bytes)") from None
    if fmt == "json":
        try:
            json.loads(text)
        except ValueError:
            raise SpecError(f"key {text!r} is not JSON (the table's key format is json)") from None
    return text.encode()


def render(data: bytes, fmt: str) -> Any:
    """Bytes of a key or value as JSON: string text, parsed JSON, or base64 for bytes (and for
    anything that does not decode, as ``{"base64": ...}`` rather than a guess)."""
    if fmt == "bytes":
        return base64.b64encode(data).decode()
    try:
        text = data.decode()
        return json.loads(text) if fmt == "json" else text
    except (UnicodeDecodeError, ValueError):
        return {"undecodable": True, "base64": base64.b64encode(data).decode()}


@dataclass
class PartitionStore:
    """One partition of one table, as applied up to ``position``."""

    topic: str
    partition: int
    windowed: bool
    target: int = 0
    position: int = 0
    ready: bool = False
    # plain: key -> (value, offset); windowed: key -> {window start -> (value, offset)}
    rows: dict[bytes, tuple[bytes, int]] = field(default_factory=dict)
    windows: dict[bytes, dict[int, tuple[bytes, int]]] = field(default_factory=dict)
    skipped: int = 0

    def apply(self, key: bytes | None, value: bytes | None, offset: int) -> None:
        if offset >= self.position:
            self.position = offset + 1
        if key is None:
            self.skipped += 1
        elif self.windowed:
            if len(key) < WINDOW_START.size:
                self.skipped += 1
            else:
                inner, start = key[: -WINDOW_START.size], WINDOW_START.unpack(key[-WINDOW_START.size :])[0]
                if value is None:
                    w = self.windows.get(inner)
                    if w is not None:
                        w.pop(start, None)
                        if not w:
                            del self.windows[inner]
                else:
                    self.windows.setdefault(inner, {})[start] = (value, offset)
        elif value is None:
            self.rows.pop(key, None)
        else:
            self.rows[key] = (value, offset)
        self.check_ready()

    def reached(self, position: int) -> None:
        """The consumer is at ``position`` (end of partition, control records skipped)."""
        if position > self.position:
            self.position = position
        self.check_ready()

    def check_ready(self) -> None:
        if not self.ready and self.position >= self.target:
            self.ready = True

    def get(self, key: bytes) -> tuple[bytes, int] | None:
        return self.rows.get(key)

    def range(self, lo: bytes | None, hi: bytes | None) -> list[tuple[bytes, bytes, int]]:
        return [
            (k, v, o)
            for k, (v, o) in self.rows.items()
            if (lo is None or k >= lo) and (hi is None or k <= hi)
        ]

    def fetch(self, key: bytes, t_from: int | None, t_to: int | None) -> list[tuple[int, bytes, int]]:
        w = self.windows.get(key, {})
        return sorted(
            (s, v, o)
            for s, (v, o) in w.items()
            if (t_from is None or s >= t_from) and (t_to is None or s <= t_to)
        )


def windowed_key(key: bytes, start_ms: int) -> bytes:
    """Kafka Streams' ``TimeWindowedSerializer`` layout: key + 8-byte big-endian window start."""
    return key + WINDOW_START.pack(start_ms)


def partition_of(key: bytes, partitions: int) -> int:
    """Where Kafka's default partitioner (murmur2) puts ``key`` (the inner key if windowed)."""
    return partition_for_key(key, partitions)
