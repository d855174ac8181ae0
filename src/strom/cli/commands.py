"""The client-side ``strom`` commands (topics, produce, consume) as coroutines over
:class:`strom.client.Client`. Arguments come parsed from :mod:`strom.cli.main`.

Error contract: expected failures raise :class:`CommandError` (one-line message, exit code) or
:class:`~strom.client.errors.KafkaError`; :mod:`strom.cli.main` prints them without traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import threading
import time
from pathlib import Path
from typing import BinaryIO

from kio.schema.errors import ErrorCode

from strom.cli.formatting import (
    LineError,
    LineReader,
    MessageFormatter,
    PartitionFilter,
    describe_lines,
    parse_properties_args,
    partition_for_key,
    unescape,
)
from strom.client.client import EARLIEST, LATEST, Client, ProduceInput, TopicMetadata, now_ms
from strom.client.cluster_admin import LIST_PARTITION_REASSIGNMENTS, list_partition_reassignments
from strom.client.errors import KafkaConnectionError, KafkaError
from strom.client.security import SecurityConfig
from strom.config import parse_properties
from strom.protocol.records import COMPRESSION_NAMES

__all__ = ["CommandError", "consume", "parse_static_headers", "produce", "topics"]


class CommandError(Exception):
    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _client(args: argparse.Namespace) -> Client:
    """The client of a tool command: ``--bootstrap-server``, ``--request-timeout-ms`` and the
    security settings of ``--command-config`` (a properties file of Kafka client settings, as
    Kafka's tools take: security.protocol, sasl.mechanism, sasl.jaas.config, ssl.*)."""
    security = None
    path = getattr(args, "command_config", None)
    if path:
        try:
            props = parse_properties(Path(path).read_text())
        except OSError as e:
            raise CommandError(f"cannot read --command-config {path}: {e.strerror or e}", 2) from None
        try:
            security = SecurityConfig.from_config(props)
        except ValueError as e:
            raise CommandError(f"--command-config {path}: {e}", 2) from None
    try:
        return Client(
            args.bootstrap_server,
            request_timeout_ms=args.request_timeout_ms,
            client_id="strom-cli",
            security=security,
        )
    except ValueError as e:
        raise CommandError(f"invalid --bootstrap-server: {e}", 2) from None


def _connection_error(e: KafkaConnectionError) -> CommandError:
    return CommandError(e.message or str(e))


async def _topic(client: Client, name: str) -> TopicMetadata:
    try:
        return await client.topic(name, refresh=True)
    except KafkaError as e:
        if e.code in (ErrorCode.unknown_topic_or_partition, ErrorCode.invalid_topic_exception):
            raise CommandError(f"topic {name!r} does not exist") from None
        raise


async def _topic_auto_create(client: Client, name: str, wait_s: float = 10.0) -> TopicMetadata:
    """The topic to produce to, created by the broker if it is missing and the broker allows it
    (a Metadata request with ``allow_auto_topic_creation``, as Kafka's console producer sends);
    waits until every partition has a leader."""
    deadline = time.monotonic() + wait_s
    while True:
        md = await client.metadata([name], allow_auto_topic_creation=True)
        t = md.topics.get(name)
        code = t.error_code if t is not None else int(ErrorCode.unknown_topic_or_partition)
        if t is not None and not code and t.partitions and all(p.leader >= 0 for p in t.partitions.values()):
            return t
        if code == ErrorCode.invalid_topic_exception:
            raise CommandError(f"invalid topic name {name!r}")
        if code == ErrorCode.unknown_topic_or_partition:  # Kafka's answer when it does not create
            raise CommandError(f"topic {name!r} does not exist (the broker does not create topics)")
        if time.monotonic() >= deadline:
            raise KafkaError(code or int(ErrorCode.leader_not_available), f"topic {name!r}")
        await asyncio.sleep(0.2)


# ---------------------------------------------------------------------------- topics


def _parse_configs(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise CommandError(f"--config {item!r} is not of the form key=value", 2)
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


async def topics(args: argparse.Namespace, action: str) -> int:
    configs = _parse_configs(args.config)
    client = _client(args)
    try:
        async with client:
            if action == "create":
                return await _create(client, args, configs)
            if action == "list":
                for name in await client.list_topics(include_internal=not args.exclude_internal):
                    print(name)
                return 0
            if action == "describe":
                return await _describe(client, args)
            return await _delete(client, args)
    except KafkaConnectionError as e:
        raise _connection_error(e) from None


async def _create(client: Client, args: argparse.Namespace, configs: dict[str, str]) -> int:
    partitions = args.partitions if args.partitions is not None else -1
    rf = args.replication_factor if args.replication_factor is not None else -1
    if args.partitions is not None and args.partitions < 1:
        raise CommandError("--partitions must be at least 1", 2)
    if args.replication_factor is not None and args.replication_factor < 1:
        raise CommandError("--replication-factor must be at least 1", 2)
    result = await client.create_topics({args.topic: (partitions, rf, configs)})
    err = result.get(args.topic)
    if err is not None:
        if err.code == ErrorCode.topic_already_exists:
            if args.if_not_exists:
                return 0
            raise CommandError(f"topic {args.topic!r} already exists")
        raise CommandError(f"cannot create topic {args.topic!r}: {err}")
    print(f"Created topic {args.topic}.")
    return 0


async def _describe(client: Client, args: argparse.Namespace) -> int:
    if args.topic:
        md = await client.metadata([args.topic])
        t = md.topics.get(args.topic)
        if t is None or t.error_code == ErrorCode.unknown_topic_or_partition:
            if args.if_exists:
                return 0
            raise CommandError(f"topic {args.topic!r} does not exist")
        if t.error_code:
            raise KafkaError(t.error_code, f"topic {args.topic!r}")
        selected = [t]
    else:
        md = await client.metadata(None)
        selected = [t for _, t in sorted(md.topics.items()) if not (args.exclude_internal and t.is_internal)]
    moving = await _ongoing_reassignments(client, [t.name for t in selected])
    only = PartitionFilter(
        under_replicated=args.under_replicated_partitions,
        unavailable=args.unavailable_partitions,
        under_min_isr=args.under_min_isr_partitions,
        at_min_isr=args.at_min_isr_partitions,
    )
    live = set(md.brokers)
    for t in selected:
        try:
            configs = await client.describe_configs(t.name)
        except KafkaError:
            configs = {}
        min_isr = 1
        if only.under_min_isr or only.at_min_isr:
            with contextlib.suppress(KafkaError, ValueError, TypeError):
                all_configs = await client.describe_configs(t.name, only_overrides=False)
                min_isr = int(all_configs.get("min.insync.replicas") or 1)
        lines = describe_lines(t, configs, moving.get(t.name), only=only, live_brokers=live, min_isr=min_isr)
        for line in lines:
            print(line)
    return 0


async def _ongoing_reassignments(
    client: Client, topics: list[str]
) -> dict[str, dict[int, tuple[tuple[int, ...], tuple[int, ...]]]]:
    """``{topic: {partition: (adding, removing)}}`` of ongoing reassignments, as Kafka's
    describe asks ListPartitionReassignments; empty from a broker that does not answer it."""
    if not topics or not (await client.any_connection()).supports(LIST_PARTITION_REASSIGNMENTS):
        return {}
    try:
        ongoing = await list_partition_reassignments(client)
    except KafkaError:
        return {}
    out: dict[str, dict[int, tuple[tuple[int, ...], tuple[int, ...]]]] = {}
    for (topic, p), r in ongoing.items():
        out.setdefault(topic, {})[p] = (r.adding, r.removing)
    return out


async def _delete(client: Client, args: argparse.Namespace) -> int:
    result = await client.delete_topics([args.topic])
    return topic_outcome(result.get(args.topic), args, "delete")


def topic_outcome(err: KafkaError | None, args: argparse.Namespace, verb: str) -> int:
    """Exit code of a change to topic ``args.topic``: 0, or 0 for a missing topic with
    ``--if-exists``; else :class:`CommandError`."""
    if err is not None:
        if err.code == ErrorCode.unknown_topic_or_partition:
            if args.if_exists:
                return 0
            raise CommandError(f"topic {args.topic!r} does not exist")
        raise CommandError(f"cannot {verb} topic {args.topic!r}: {err}")
    return 0


# ---------------------------------------------------------------------------- produce


def parse_static_headers(items: list[str], separator: str) -> list[tuple[str, bytes | None]]:
    """``--header a=1,b=2 --header c`` -> ``[("a", b"1"), ("b", b"2"), ("c", None)]``."""
    out: list[tuple[str, bytes | None]] = []
    sep = unescape(separator)
    if not sep:
        raise CommandError("--headers-separator must not be empty", 2)
    for item in items:
        for pair in item.split(sep):
            if not pair:
                continue
            k, eq, v = pair.partition("=")
            if not k:
                raise CommandError(f"--header {pair!r} has an empty key", 2)
            out.append((k, v.encode() if eq else None))
    return out


def _acks(value: str) -> int:
    if value == "all":
        return -1
    try:
        acks = int(value)
    except ValueError:
        raise CommandError(f"invalid acks {value!r} (all, -1, 0 or 1)", 2) from None
    if acks not in (-1, 0, 1):
        raise CommandError(f"invalid acks {value!r} (all, -1, 0 or 1)", 2)
    return acks


class _StdinChunks:
    """Reads a binary stream in a daemon thread and hands chunks (``None`` at EOF) to the loop.
    ``os.read`` returns what is available, so interactive input is sent line by line while
    piped input arrives in large chunks (and large batches)."""

    def __init__(self, stream: BinaryIO, loop: asyncio.AbstractEventLoop) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=64)
        self._stream = stream
        self._loop = loop
        threading.Thread(target=self._run, name="strom-stdin", daemon=True).start()

    def _put(self, item: bytes | None) -> None:
        fut = asyncio.run_coroutine_threadsafe(self.queue.put(item), self._loop)
        with contextlib.suppress(Exception):
            fut.result()

    def _read(self) -> bytes:
        try:
            fd = self._stream.fileno()
        except (OSError, ValueError, AttributeError):
            read1 = getattr(self._stream, "read1", None)
            data: bytes = read1(1 << 16) if read1 is not None else self._stream.read()
            return data
        return os.read(fd, 1 << 16)

    def _run(self) -> None:
        try:
            while True:
                chunk = self._read()
                if not chunk:
                    break
                self._put(chunk)
        except OSError:
            pass
        self._put(None)


async def produce(args: argparse.Namespace, stdin: BinaryIO | None = None) -> int:
    props = parse_properties_args(args.property)
    pprops = parse_properties_args(args.producer_property)
    if args.key_separator is not None:
        props["parse.key"] = "true"
        props["key.separator"] = unescape(args.key_separator)
    static = parse_static_headers(args.header, args.headers_separator)
    reader = LineReader.from_properties(props, static)
    acks = _acks(args.acks or pprops.get("acks", "all"))
    ctype = (args.compression_type or pprops.get("compression.type", "none")).lower()
    if ctype not in COMPRESSION_NAMES:
        raise CommandError(f"invalid compression type {ctype!r}", 2)
    compression = COMPRESSION_NAMES[ctype]
    batch_size = args.batch_size or int(pprops.get("batch.size", 512 * 1024))
    linger = (args.linger_ms if args.linger_ms is not None else int(pprops.get("linger.ms", 5))) / 1000
    client = _client(args)
    try:
        async with client:
            t = await _topic_auto_create(client, args.topic)
            if args.partition is not None and args.partition not in t.partitions:
                raise CommandError(f"topic {args.topic!r} has no partition {args.partition}")
            source = _StdinChunks(stdin or sys.stdin.buffer, asyncio.get_running_loop())
            sender = _Sender(client, t, args.partition, acks, compression, batch_size)
            await _produce_loop(source.queue, reader, sender, batch_size, linger)
            return 0
    except KafkaConnectionError as e:
        raise _connection_error(e) from None
    except LineError as e:
        raise CommandError(str(e)) from None


class _Sender:
    def __init__(
        self,
        client: Client,
        topic: TopicMetadata,
        partition: int | None,
        acks: int,
        compression: int,
        batch_size: int,
    ) -> None:
        self.client = client
        self.topic = topic
        self.partition = partition
        self.acks = acks
        self.compression = compression
        self.batch_size = batch_size
        self.partitions = sorted(topic.partitions)
        self.sticky = 0
        self.sent = 0

    def _choose(self, key: bytes | None) -> int:
        if self.partition is not None:
            return self.partition
        if key is not None:
            return self.partitions[partition_for_key(key, len(self.partitions))]
        return self.partitions[self.sticky % len(self.partitions)]

    async def send(self, records: list[ProduceInput]) -> None:
        by_part: dict[int, list[list[ProduceInput]]] = {}
        sizes: dict[int, int] = {}
        for r in records:
            p = self._choose(r[0])
            size = 24 + len(r[0] or b"") + len(r[1] or b"") + sum(len(k) + len(v or b"") + 4 for k, v in r[2])
            batches = by_part.setdefault(p, [[]])
            if batches[-1] and sizes.get(p, 0) + size > self.batch_size:
                batches.append([])
                sizes[p] = 0
            batches[-1].append(r)
            sizes[p] = sizes.get(p, 0) + size
        self.sticky += 1

        async def one_partition(p: int, batches: list[list[ProduceInput]]) -> None:
            for batch in batches:
                await self.client.produce(
                    self.topic.name, p, batch, acks=self.acks, compression=self.compression
                )
                self.sent += len(batch)

        results = await asyncio.gather(
            *(one_partition(p, b) for p, b in by_part.items()), return_exceptions=True
        )
        for res in results:
            if isinstance(res, BaseException):
                raise res


async def _produce_loop(
    queue: asyncio.Queue[bytes | None], reader: LineReader, sender: _Sender, batch_size: int, linger: float
) -> None:
    rest = b""
    lineno = 0
    eof = False
    while not eof:
        chunk = await queue.get()
        if chunk is None:
            eof = True
            chunks = [rest]
        else:
            chunks = [rest, chunk]
            size = len(chunk)
            deadline = time.monotonic() + linger
            while size < batch_size:
                try:
                    if queue.empty():
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        nxt = await asyncio.wait_for(queue.get(), remaining)
                    else:
                        nxt = queue.get_nowait()
                except TimeoutError:
                    break
                if nxt is None:
                    eof = True
                    break
                chunks.append(nxt)
                size += len(nxt)
        data = b"".join(chunks)
        lines = data.split(b"\n")
        rest = b"" if eof else lines.pop()
        if eof and lines and lines[-1] == b"":
            lines.pop()
        if not lines:
            continue
        ts = now_ms()
        records: list[ProduceInput] = []
        bad: LineError | None = None
        for line in lines:
            lineno += 1
            if line.endswith(b"\r"):
                line = line[:-1]
            try:
                key, value, headers = reader.parse(line, lineno)
            except LineError as e:
                bad = e  # send what came before, like the line-by-line Kafka tool
                break
            records.append((key, value, headers, ts))
        if records:
            await sender.send(records)
        if bad is not None:
            raise bad


# ---------------------------------------------------------------------------- consume


def _start_spec(args: argparse.Namespace) -> int:
    if args.offset is not None and args.from_beginning:
        raise CommandError("--offset and --from-beginning cannot be used together", 2)
    if args.offset is None:
        return EARLIEST if args.from_beginning else LATEST
    text = str(args.offset).strip().lower()
    if text == "earliest":
        return EARLIEST
    if text == "latest":
        return LATEST
    try:
        value = int(text)
    except ValueError:
        raise CommandError(f"--offset must be a number, earliest or latest, not {args.offset!r}", 2) from None
    if value < 0:
        raise CommandError("--offset must not be negative", 2)
    return value


async def consume(args: argparse.Namespace, out: BinaryIO | None = None) -> int:
    props = parse_properties_args(args.property)
    fmt = MessageFormatter.from_properties(props)
    start = _start_spec(args)
    if args.max_messages is not None and args.max_messages < 0:
        raise CommandError("--max-messages must not be negative", 2)
    sink = out or sys.stdout.buffer
    count = 0
    started = False
    client = _client(args)
    try:
        async with client:
            t = await _topic(client, args.topic)
            started = True
            if args.partition is not None:
                if args.partition not in t.partitions:
                    raise CommandError(f"topic {args.topic!r} has no partition {args.partition}")
                parts = [args.partition]
            else:
                parts = sorted(t.partitions)
            reset = EARLIEST if start == EARLIEST or args.from_beginning else LATEST
            isolation = 1 if args.isolation_level == "read_committed" else 0
            if start >= 0:
                offsets = dict.fromkeys(parts, start)
            else:
                listed = await client.list_offsets(
                    t.name, dict.fromkeys(parts, start), isolation_level=isolation
                )
                assert isinstance(listed, dict)
                offsets = listed
            last_activity = time.monotonic()
            while args.max_messages is None or count < args.max_messages:
                wait = args.max_wait_ms
                if args.timeout_ms is not None:
                    remaining = args.timeout_ms - (time.monotonic() - last_activity) * 1000
                    if remaining <= 0:
                        break
                    wait = max(0, min(wait, int(remaining)))
                results = await client.fetch_many(
                    t.name,
                    offsets,
                    max_wait_ms=wait,
                    max_bytes=args.fetch_max_bytes,
                    isolation_level=isolation,
                )
                got = False
                for p in parts:
                    r = results[p]
                    if r.error_code == ErrorCode.offset_out_of_range:
                        reset_to = await client.list_offsets(t.name, p, reset, isolation_level=isolation)
                        assert isinstance(reset_to, int)
                        offsets[p] = reset_to
                        continue
                    if r.error_code:
                        raise KafkaError(r.error_code, f"fetch {t.name}-{p} at offset {offsets[p]}")
                    for record in r.records:
                        sink.write(fmt.format(p, record))
                        count += 1
                        offsets[p] = record.offset + 1
                        got = True
                        if args.max_messages is not None and count >= args.max_messages:
                            break
                    else:
                        nxt = r.next_offset
                        if nxt is not None and nxt > offsets[p]:
                            offsets[p] = nxt
                    if args.max_messages is not None and count >= args.max_messages:
                        break
                sink.flush()
                if got:
                    last_activity = time.monotonic()
    except KafkaConnectionError as e:
        raise _connection_error(e) from None
    finally:
        with contextlib.suppress(Exception):
            sink.flush()
        if started:
            print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0
