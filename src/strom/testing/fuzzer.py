"""A structure-aware request fuzzer against an in-process broker.

Seeds are a valid request of every API x version strom serves (:mod:`request_samples`), their
names pointing at topics, groups and transactional ids that exist, so mutations reach deep into
the handlers. Each frame is one of:

- a *semantic* mutation: fields of the decoded request replaced by edge values (null, empty,
  -1, the type's extremes, long or odd names, duplicated elements, records that are not record
  batches) and encoded again: requests that decode but make no sense, for the handlers;
- a *wire* mutation of the encoded frame: counts and lengths set huge or negative, varints
  stretched, bytes flipped, truncation, junk inserted: for the decoder and its bounds check.

Every frame goes through the real network driver (``KafkaProtocol``) over a fake transport, one
connection at a time (a connection the broker closes is replaced). The run fails on any traceback
or ERROR logged by the broker or the loop (a *crash*), and on a request not answered within
``--hang-seconds`` unless its API may legitimately wait (Fetch long-polls, group joins).

    python -m strom.testing.fuzzer --frames 100000 --seed 1

Exit status 0: no crash, no hang; 1 otherwise (the offending frames are printed in hex).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import logging
import os
import random
import shutil
import struct
import sys
import tempfile
import threading
import time
import traceback
import typing
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from ..protocol import codec
from ..protocol.api_versions import api_name
from ..protocol.records import build_batch
from .request_samples import all_versions, encode_body, sample_entity

# APIs whose answer may legitimately wait (long-poll, rebalance): a timeout there is no hang
# (CreateTopics and CreatePartitions make partitions in a worker thread: thousands take seconds;
# ShareFetch long-polls like Fetch)
WAITING_APIS = frozenset({1, 11, 14, 19, 37, 68, 78})
SEED_TOPICS = {"s1": (2, {}), "fuzz-compacted": (1, {"cleanup.policy": "compact"})}
NAMES = ("s1", "", "x" * 300, "__consumer_offsets", "a/b", "..", "fuzz-topic", "s1 ", "\u00e9t\u00e9")
INTS = {
    "int8": (0, -1, 1, 127, -128),
    "int16": (0, -1, 1, 32767, -32768),
    "int32": (0, -1, 1, 2, 1000, 2**31 - 1, -(2**31)),
    "int64": (0, -1, 1, 2**63 - 1, -(2**63)),
}


@dataclasses.dataclass
class Finding:
    kind: str  # "crash" or "hang"
    api: str
    version: int
    detail: str
    frame: bytes


class _Transport:
    """Enough of an asyncio transport for KafkaProtocol: counts what it writes and, like a real
    transport, tells the protocol the connection is lost once closed (else the broker would keep
    every closed connection in ``broker.connections``)."""

    def __init__(self) -> None:
        self.closed = False
        self.written = 0
        self.protocol: Any = None

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else None

    def write(self, data: bytes) -> None:
        self.written += len(data)

    def writelines(self, parts: list[Any]) -> None:
        for p in parts:
            self.written += len(p)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.protocol is not None:
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def is_closing(self) -> bool:
        return self.closed

    def get_write_buffer_size(self) -> int:
        return 0


class _Watchdog:
    """Notices the event loop blocked (a handler doing long work on the loop thread, which no
    ``wait_for`` can interrupt): a stall longer than ``limit`` seconds is a finding, with the
    loop thread's stack; a stall of ``fatal`` seconds ends the run (exit 1, findings printed)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: float, fatal: float) -> None:
        self.loop = loop
        self.limit = limit
        self.fatal = fatal
        self.beat = time.monotonic()
        self.current: tuple[str, int, bytes] = ("", 0, b"")
        self.stalls: list[Finding] = []
        self.stop = threading.Event()
        self.loop_thread = threading.get_ident()
        self.thread = threading.Thread(target=self._watch, name="fuzz-watchdog", daemon=True)

    def start(self) -> None:
        self._tick()
        self.thread.start()

    def _tick(self) -> None:
        self.beat = time.monotonic()
        if not self.stop.is_set():
            self.loop.call_later(0.05, self._tick)

    def _watch(self) -> None:
        reported = 0.0
        while not self.stop.wait(0.1):
            stalled = time.monotonic() - self.beat
            if stalled > self.limit and self.beat != reported:
                reported = self.beat
                frame = sys._current_frames().get(self.loop_thread)
                stack = "".join(traceback.format_stack(frame, limit=6)) if frame else "?"
                api, version, raw = self.current
                detail = f"loop blocked {stalled:.1f} s at\n{stack}"
                self.stalls.append(Finding("stall", api, version, detail, raw))
            if stalled > self.fatal:
                for f in self.stalls:
                    print(f"{f.kind} {f.api} v{f.version}: {f.detail}\n  frame {f.frame.hex()}", flush=True)
                os._exit(1)


class _Collector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


# --------------------------------------------------------------------------- mutations


def _edge(tp: Any, kafka_type: str | None, rng: random.Random) -> Any:
    origin = typing.get_origin(tp)
    if origin is typing.Union or isinstance(tp, type(int | None)):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if rng.random() < 0.3:
            return None
        return _edge(args[0], kafka_type, rng)
    if origin is tuple:
        return ()
    if kafka_type in INTS:
        return rng.choice(INTS[kafka_type])
    if kafka_type == "string":
        return rng.choice(NAMES)
    if kafka_type == "records":
        return rng.choice(
            [
                b"",
                b"\x00" * 61,
                build_batch([(b"k", b"v", [], 0)]),
                build_batch([(None, b"v" * 100, [], 0)], compression=rng.choice([1, 2, 3, 4])),
                rng.randbytes(rng.randint(1, 200)),
            ]
        )
    if kafka_type == "bytes":
        return rng.choice([b"", rng.randbytes(rng.randint(1, 64))])
    if kafka_type == "uuid":
        return rng.choice([uuid.UUID(int=0), uuid.UUID(int=rng.getrandbits(128))])
    if kafka_type == "bool":
        return rng.random() < 0.5
    return None  # leave other kinds as they are


@functools.cache
def _fields(cls: type) -> tuple[tuple[dataclasses.Field[Any], ...], dict[str, Any]]:
    return dataclasses.fields(cls), typing.get_type_hints(cls)  # type: ignore[arg-type]


def _mutate_entity(obj: Any, rng: random.Random, rate: float) -> Any:
    fields, hints = _fields(type(obj))  # type: ignore[arg-type]
    changes: dict[str, Any] = {}
    for f in fields:
        value = getattr(obj, f.name)
        kafka_type = f.metadata.get("kafka_type")
        if isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
            roll = rng.random()
            if roll < rate:
                changes[f.name] = () if rng.random() < 0.5 else value + value  # empty or duplicates
            else:
                changes[f.name] = tuple(_mutate_entity(v, rng, rate) for v in value)
        elif dataclasses.is_dataclass(value):
            changes[f.name] = _mutate_entity(value, rng, rate)
        elif rng.random() < rate:
            new = _edge(hints[f.name], kafka_type, rng)
            if new is not None or typing.get_origin(hints[f.name]) in (typing.Union,):
                changes[f.name] = new
    return dataclasses.replace(obj, **changes) if changes else obj


def _wire_mutation(body: bytes, rng: random.Random) -> bytes:
    out = bytearray(body)
    for _ in range(rng.randint(1, 3)):
        if not out:
            break
        pos = rng.randrange(len(out))
        kind = rng.randrange(6)
        if kind == 0:
            out[pos:pos] = rng.choice([b"\xff\xff\xff\xff\x0f", b"\xfe\xff\xff\xff\x0f", b"\x80\x80\x80\x01"])
        elif kind == 1:
            out[pos : pos + 4] = struct.pack(">i", rng.choice([-2, -1, 0x7FFFFFFF, 0x10000, 3]))
        elif kind == 2:
            out[pos : pos + 2] = struct.pack(">h", rng.choice([-2, -1, 0x7FFF, 300]))
        elif kind == 3:
            out[pos] = rng.randrange(256)
        elif kind == 4:
            del out[pos:]
        else:
            out[pos:pos] = rng.randbytes(rng.randint(1, 8))
    return bytes(out)


class Corpus:
    def __init__(self) -> None:
        self.keys = all_versions()
        self.samples = {kv: sample_entity(codec.request_type(*kv), 2) for kv in self.keys}
        self.bodies = {kv: encode_body(obj) for kv, obj in self.samples.items()}

    def frame(self, rng: random.Random, correlation_id: int) -> tuple[int, int, bytes]:
        key, version = rng.choice(self.keys)
        if rng.random() < 0.5:
            try:
                rate = rng.choice([0.05, 0.2, 0.5])
                body = encode_body(_mutate_entity(self.samples[(key, version)], rng, rate))
            except Exception:  # kio refuses some edge values for some fields: mutate the wire instead
                body = _wire_mutation(self.bodies[(key, version)], rng)
        else:
            body = _wire_mutation(self.bodies[(key, version)], rng)
        header = struct.pack(">hhih", key, version, correlation_id, 4) + b"fuzz"
        payload = header + body
        return key, version, struct.pack(">i", len(payload)) + payload


# --------------------------------------------------------------------------- the run


async def _run(frames: int, seed: int, hang_seconds: float, data_dir: Path, report_every: float) -> tuple[
    int, list[Finding], Counter[str]
]:
    from ..config import BrokerConfig
    from ..server.broker import Broker
    from ..server.network import KafkaProtocol
    from .broker_process import free_port

    config = BrokerConfig.from_sources(
        overrides=[
            f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
            f"log.dirs={data_dir}",
            "offsets.topic.num.partitions=3",
            "transaction.state.log.num.partitions=3",
            "group.initial.rebalance.delay.ms=0",
        ]
    )
    broker = Broker(config)
    await broker.start()
    broker.native_sendfile = False  # the fake transport takes bytes; file regions are read with pread
    collector = _Collector()
    root = logging.getLogger()
    root.addHandler(collector)
    saved_level = root.level
    root.setLevel(logging.ERROR)  # what the broker logs at ERROR or with a traceback is a finding
    loop = asyncio.get_running_loop()
    loop_errors: list[str] = []
    loop.set_exception_handler(lambda _l, ctx: loop_errors.append(str(ctx.get("message"))))
    rng = random.Random(seed)
    corpus = Corpus()
    # a stall of 5 s is a handler doing unbounded work on the loop; shorter ones happen on a loaded
    # machine (an fsync on the loop thread: a known cost, not a bug this run looks for)
    watchdog = _Watchdog(loop, max(5.0, hang_seconds), max(60.0, 30 * hang_seconds))
    watchdog.start()
    findings: list[Finding] = []
    outcomes: Counter[str] = Counter()
    proto: KafkaProtocol | None = None
    transport = _Transport()
    sent = 0
    last_report = time.monotonic()
    try:
        for i in range(frames):
            if i % 1000 == 0:  # the seed topics back, the fuzzed ones gone (disk and descriptors)
                try:  # (the async forms: they also run on the metadata quorum)
                    for info in list(broker.metadata_cache.topics()):
                        if not info.internal and info.name not in SEED_TOPICS:
                            await broker.delete_topic_async(info.name)
                    for name, (partitions, configs) in SEED_TOPICS.items():
                        if broker.metadata_cache.topic(name) is None and not broker.is_being_created(name):
                            await broker.create_topic_async(name, partitions, configs)
                except Exception as e:  # the broker is in a state it cannot leave: report, stop
                    detail = f"topic reset failed: {e!r}"
                    findings.append(Finding("crash", "(between frames)", 0, detail, b""))
                    break
            if proto is None or proto.closed:
                transport = _Transport()
                proto = KafkaProtocol(broker)
                transport.protocol = proto
                done = asyncio.Event()
                _signal_when_handled(proto, done)
                proto.connection_made(transport)  # type: ignore[arg-type]
            key, version, frame = corpus.frame(rng, i & 0x7FFFFFFF)
            before = len(collector.records) + len(loop_errors)
            watchdog.current = (api_name(key), version, frame)
            done.clear()
            proto.data_received(frame)
            sent += 1
            if proto.queue or proto.busy:
                try:
                    await asyncio.wait_for(done.wait(), hang_seconds)
                except TimeoutError:
                    if key not in WAITING_APIS:
                        findings.append(Finding("hang", api_name(key), version, "no answer", frame))
                    outcomes["timeout"] += 1
                    proto.close()
            outcomes["closed" if proto.closed else "answered"] += 1
            if len(collector.records) + len(loop_errors) > before:
                msgs = [_describe(r) for r in collector.records[before:]] + loop_errors[before:]
                findings.append(Finding("crash", api_name(key), version, "; ".join(msgs)[:500], frame))
                del collector.records[:]
                del loop_errors[:]
            if watchdog.stalls:
                findings.extend(watchdog.stalls)
                watchdog.stalls.clear()
            if len(findings) >= 20:
                break
            if report_every and time.monotonic() - last_report > report_every:
                last_report = time.monotonic()
                print(
                    f"{sent} frames, {dict(outcomes)}, {len(findings)} findings, RSS {_rss_mb():.0f} MB",
                    file=sys.stderr,
                )
    finally:
        watchdog.stop.set()
        root.removeHandler(collector)
        root.setLevel(saved_level)
        if proto is not None:
            proto.close()
        await broker.stop()
    return sent, findings, outcomes


def _rss_mb() -> float:
    """This process's resident memory (Linux), to see a broker that leaks under fuzzing."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _describe(record: logging.LogRecord) -> str:
    """The message and, for a traceback, the exception and where it was raised."""
    text = record.getMessage()
    if record.exc_info and record.exc_info[1] is not None:
        exc = record.exc_info[1]
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        where = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb is not None else "?"
        text += f": {type(exc).__name__}: {exc} at {where}"
    return text


def _signal_when_handled(proto: Any, done: asyncio.Event) -> None:
    """Set ``done`` each time the connection's worker finishes a request (or closes)."""
    handle = proto._handle

    async def handled(req: Any) -> None:
        try:
            await handle(req)
        finally:
            done.set()

    proto._handle = handled
    close = proto.close

    def closed() -> None:
        close()
        done.set()

    proto.close = closed


def fuzz(
    frames: int, seed: int = 0, hang_seconds: float = 2.0, report_every: float = 0.0
) -> tuple[int, list[Finding], Counter[str], float]:
    """Run ``frames`` frames; returns (frames sent, findings, outcomes, seconds)."""
    data_dir = Path(tempfile.mkdtemp(prefix="strom-fuzz-"))
    started = time.monotonic()
    try:
        sent, findings, outcomes = asyncio.run(_run(frames, seed, hang_seconds, data_dir, report_every))
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    return sent, findings, outcomes, time.monotonic() - started


_PING = struct.pack(">hhih", 18, 0, -7, 4) + b"fuzz"  # ApiVersions v0, correlation id -7


def fuzz_remote(host: str, port: int, frames: int, seed: int = 0, timeout: float = 10.0) -> tuple[
    int, list[Finding], Counter[str]
]:
    """Send ``frames`` fuzzed frames to a broker over TCP, each followed by an ApiVersions "ping":
    the ping's answer (responses come in order) says the frame was handled; a closed connection
    is reopened. A ping unanswered within ``timeout`` is a hang, unless the frame's API may
    legitimately wait (``WAITING_APIS``: a fuzzed Fetch may ask for hours of long poll, as Kafka
    would grant); a refused connection means the broker died. Crashes show in the broker's own
    log, which the caller reads."""
    import socket

    rng = random.Random(seed)
    corpus = Corpus()
    findings: list[Finding] = []
    outcomes: Counter[str] = Counter()
    ping = struct.pack(">i", len(_PING)) + _PING
    sock: socket.socket | None = None
    sent = 0
    for i in range(frames):
        key, version, frame = corpus.frame(rng, i & 0x7FFFFFFF)
        if sock is None:
            try:
                sock = socket.create_connection((host, port), timeout=timeout)
            except OSError as e:
                findings.append(Finding("crash", api_name(key), version, f"broker unreachable: {e}", frame))
                break
        try:
            sock.sendall(frame + ping)
            sent += 1
            if _read_until_ping(sock):
                outcomes["answered"] += 1
                continue
            outcomes["closed"] += 1
        except TimeoutError:
            if key in WAITING_APIS:  # a long poll (say a Fetch with max.wait of hours): no hang
                outcomes["waited"] += 1
            else:
                findings.append(Finding("hang", api_name(key), version, f"no answer in {timeout} s", frame))
                outcomes["timeout"] += 1
        except OSError:
            outcomes["closed"] += 1
        sock.close()
        sock = None
        if len(findings) >= 20:
            break
    if sock is not None:
        sock.close()
    return sent, findings, outcomes


def _read_until_ping(sock: Any) -> bool:
    """Read responses until the ping's; False if the broker closed the connection first."""
    buf = b""
    while True:
        while len(buf) >= 8:
            (size,) = struct.unpack_from(">i", buf)
            if len(buf) < 4 + size:
                break
            (cid,) = struct.unpack_from(">i", buf, 4)
            buf = buf[4 + size :]
            if cid == -7:
                return True
        chunk = sock.recv(1 << 16)
        if not chunk:
            return False
        buf += chunk


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--hang-seconds", type=float, default=2.0)
    parser.add_argument("--bootstrap", help="fuzz a running broker over TCP (host:port), not in-process")
    args = parser.parse_args(argv)
    if args.bootstrap:
        host, _, port = args.bootstrap.rpartition(":")
        started = time.monotonic()
        sent, findings, outcomes = fuzz_remote(host, int(port), args.frames, args.seed)
        seconds = time.monotonic() - started
        print(
            f"seed {args.seed}: {sent} frames in {seconds:.1f} s, "
            f"outcomes {dict(outcomes)}, {len(findings)} findings"
        )
        for f in findings:
            print(f"{f.kind} {f.api} v{f.version}: {f.detail}\n  frame {f.frame.hex()}")
        return 1 if findings else 0
    sent, findings, outcomes, seconds = fuzz(args.frames, args.seed, args.hang_seconds, report_every=30)
    print(
        f"seed {args.seed}: {sent} frames in {seconds:.1f} s ({sent / seconds:,.0f} frames/s), "
        f"outcomes {dict(outcomes)}, {len(findings)} findings, RSS at the end {_rss_mb():.0f} MB"
    )
    for f in findings:
        print(f"{f.kind} {f.api} v{f.version}: {f.detail}\n  frame {f.frame.hex()}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
