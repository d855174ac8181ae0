"""Pure helpers of the CLI: Kafka's console-producer line parsing, console-consumer output
formatting, kafka-topics.sh describe output, and the default partitioner (murmur2).

Everything here works on bytes and plain values; no I/O. Error contract: :class:`LineError`
(a ``ValueError``) for a producer input line that does not match the configured format.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from strom.client.client import PartitionMetadata, TopicMetadata, topic_id_str
from strom.client.partitioner import murmur2, partition_for_key
from strom.protocol.records import Record

__all__ = [
    "LineError",
    "LineReader",
    "MessageFormatter",
    "PartitionFilter",
    "describe_lines",
    "murmur2",
    "parse_properties_args",
    "partition_for_key",
    "unescape",
]


class LineError(ValueError):
    pass


def unescape(text: str) -> str:
    r"""Interpret ``\t``, ``\n``, ``\r`` and ``\\`` in separators given on the command line
    (Kafka's tools take them literally from Java properties, where those escapes apply)."""
    out = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            mapped = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}.get(nxt)
            if mapped is not None:
                out.append(mapped)
                i += 2
                continue
        out.append(ch)
        i += 1
    return "".join(out)


def parse_properties_args(items: Iterable[str] | None) -> dict[str, str]:
    """``["print.key=true", ...]`` -> dict. Raises ``ValueError`` for an item without ``=``."""
    out: dict[str, str] = {}
    for item in items or ():
        if "=" not in item:
            raise ValueError(f"property {item!r} is not of the form key=value")
        k, v = item.split("=", 1)
        out[k.strip()] = unescape(v)
    return out


def _bool(props: Mapping[str, str], name: str, default: bool) -> bool:
    raw = props.get(name)
    if raw is None:
        return default
    low = raw.strip().lower()
    if low not in ("true", "false"):
        raise ValueError(f"property {name} must be true or false, not {raw!r}")
    return low == "true"


def _show(line: bytes) -> str:
    text = line.decode("utf-8", "replace")
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass
class LineReader:
    """kafka-console-producer's ``LineMessageReader``: ``parse.key``, ``key.separator``,
    ``parse.headers``, ``headers.delimiter``, ``headers.separator``, ``headers.key.separator``,
    ``null.marker``, ``ignore.error``; plus static headers added to every record."""

    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_marker: bytes | None = None
    ignore_error: bool = False
    static_headers: Sequence[tuple[str, bytes | None]] = ()

    @classmethod
    def from_properties(
        cls, props: Mapping[str, str], static_headers: Sequence[tuple[str, bytes | None]] = ()
    ) -> LineReader:
        def sep(name: str, default: str) -> bytes:
            value = props.get(name, default)
            if value == "":
                raise ValueError(f"property {name} must not be empty")
            return value.encode()

        marker = props.get("null.marker")
        return cls(
            parse_key=_bool(props, "parse.key", False),
            key_separator=sep("key.separator", "\t"),
            parse_headers=_bool(props, "parse.headers", False),
            headers_delimiter=sep("headers.delimiter", "\t"),
            headers_separator=sep("headers.separator", ","),
            headers_key_separator=sep("headers.key.separator", ":"),
            null_marker=marker.encode() if marker else None,
            ignore_error=_bool(props, "ignore.error", False),
            static_headers=tuple(static_headers),
        )

    def _null(self, value: bytes) -> bytes | None:
        return None if self.null_marker is not None and value == self.null_marker else value

    def parse(
        self, line: bytes, lineno: int = 0
    ) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        """One input line (without its newline) -> (key, value, headers)."""
        rest = line
        headers: list[tuple[str, bytes | None]] = []
        if self.parse_headers:
            head, sep, tail = rest.partition(self.headers_delimiter)
            if not sep:
                if not self.ignore_error:
                    raise LineError(f"no headers delimiter found on line number {lineno}: {_show(line)}")
            else:
                rest = tail
                if head:
                    for item in head.split(self.headers_separator):
                        hk, hsep, hv = item.partition(self.headers_key_separator)
                        if not hk:
                            raise LineError(f"header key is empty on line number {lineno}: {_show(line)}")
                        headers.append((hk.decode("utf-8", "replace"), self._null(hv) if hsep else None))
        key: bytes | None = None
        value: bytes | None = rest
        if self.parse_key:
            k, sep, v = rest.partition(self.key_separator)
            if sep:
                key, value = self._null(k), v
            elif not self.ignore_error:
                raise LineError(f"no key separator found on line number {lineno}: {_show(line)}")
        if value is not None:
            value = self._null(value)
        headers.extend(self.static_headers)
        return key, value, headers


@dataclass
class MessageFormatter:
    """kafka-console-consumer's ``DefaultMessageFormatter`` (``print.timestamp``,
    ``print.partition``, ``print.offset``, ``print.headers``, ``print.key``, ``print.value``,
    ``key.separator``, ``line.separator``, ``headers.separator``, ``headers.key.separator``,
    ``null.literal``). Column order: timestamp, partition, offset, headers, key, value."""

    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    print_key: bool = False
    print_value: bool = True
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_literal: bytes = b"null"

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> MessageFormatter:
        return cls(
            print_timestamp=_bool(props, "print.timestamp", False),
            print_partition=_bool(props, "print.partition", False),
            print_offset=_bool(props, "print.offset", False),
            print_headers=_bool(props, "print.headers", False),
            print_key=_bool(props, "print.key", False),
            print_value=_bool(props, "print.value", True),
            key_separator=props.get("key.separator", "\t").encode(),
            line_separator=props.get("line.separator", "\n").encode(),
            headers_separator=props.get("headers.separator", ",").encode(),
            headers_key_separator=props.get("headers.key.separator", ":").encode(),
            null_literal=props.get("null.literal", "null").encode(),
        )

    def format(self, partition: int, record: Record) -> bytes:
        cols: list[bytes] = []
        if self.print_timestamp:
            if record.timestamp < 0:
                cols.append(b"NO_TIMESTAMP")
            else:
                kind = b"LogAppendTime" if record.timestamp_type == 1 else b"CreateTime"
                cols.append(kind + b":" + str(record.timestamp).encode())
        if self.print_partition:
            cols.append(b"Partition:" + str(partition).encode())
        if self.print_offset:
            cols.append(b"Offset:" + str(record.offset).encode())
        if self.print_headers:
            if record.headers:
                cols.append(
                    self.headers_separator.join(
                        k.encode() + self.headers_key_separator + (self.null_literal if v is None else v)
                        for k, v in record.headers
                    )
                )
            else:
                cols.append(b"NO_HEADERS")
        if self.print_key:
            cols.append(self.null_literal if record.key is None else record.key)
        if self.print_value:
            cols.append(self.null_literal if record.value is None else record.value)
        out = self.key_separator.join(cols)
        # Kafka ends a message with line.separator only when the value is printed
        return out + self.line_separator if self.print_value else out


@dataclass(frozen=True)
class PartitionFilter:
    """kafka-topics.sh --describe's report options. With any of them set, only the partitions
    matching at least one are printed, without the topic line."""

    under_replicated: bool = False
    unavailable: bool = False
    under_min_isr: bool = False
    at_min_isr: bool = False

    @property
    def active(self) -> bool:
        return self.under_replicated or self.unavailable or self.under_min_isr or self.at_min_isr

    def matches(self, p: PartitionMetadata, live_brokers: Collection[int], min_isr: int) -> bool:
        has_leader = p.leader >= 0
        return (
            (self.under_replicated and len(p.isr) < len(p.replicas))
            or (self.unavailable and (not has_leader or p.leader not in live_brokers))
            or (self.under_min_isr and (not has_leader or min_isr > len(p.isr)))
            or (self.at_min_isr and min_isr == len(p.isr))
        )


def describe_lines(
    topic: TopicMetadata,
    configs: Mapping[str, str | None],
    reassignments: Mapping[int, tuple[Sequence[int], Sequence[int]]] | None = None,
    *,
    only: PartitionFilter | None = None,
    live_brokers: Collection[int] = (),
    min_isr: int = 1,
) -> list[str]:
    """kafka-topics.sh --describe output for one topic. ``reassignments`` maps a partition with
    an ongoing reassignment to its (adding, removing) replicas, shown as Kafka shows them;
    ``only`` selects partitions as the report options do (see :class:`PartitionFilter`)."""
    cfg = ",".join(f"{k}={'' if v is None else v}" for k, v in configs.items())
    lines = [
        f"Topic: {topic.name}\tTopicId: {topic_id_str(topic.topic_id)}\t"
        f"PartitionCount: {len(topic.partitions)}\tReplicationFactor: {topic.replication_factor}\t"
        f"Configs: {cfg}"
    ]
    if only is not None and only.active:
        lines = []
    for p in topic.partitions.values():
        if only is not None and only.active and not only.matches(p, live_brokers, min_isr):
            continue
        leader = str(p.leader) if p.leader >= 0 else "none"
        line = (
            f"\tTopic: {topic.name}\tPartition: {p.partition}\tLeader: {leader}\t"
            f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}"
        )
        moving = (reassignments or {}).get(p.partition)
        if moving is not None:
            line += f"\tAdding Replicas: {','.join(map(str, moving[0]))}"
            line += f"\tRemoving Replicas: {','.join(map(str, moving[1]))}"
        if p.offline_replicas:
            line += f"\tOffline: {','.join(map(str, p.offline_replicas))}"
        lines.append(line)
    return lines
