"""Transaction administration over :class:`strom.client.Client`: ListTransactions,
DescribeTransactions and InitProducerId (used to fence a transactional id and abort its open
transaction).

Works against any Kafka-compatible broker, like Kafka's AdminClient: ListTransactions goes to
every broker (each lists the transactional ids it coordinates); DescribeTransactions and
InitProducerId go to the transaction coordinator of the id.

Error contract: errors of one transactional id raise :class:`~strom.client.errors.KafkaError`.
"""

from __future__ import annotations

import asyncio
import datetime
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from strom.client.client import BrokerMetadata, Client
from strom.client.connection import KafkaConnection
from strom.client.errors import KafkaError, KafkaProtocolError
from strom.client.groups import COORDINATOR_RETRY_CODES, TRANSACTION, with_coordinator
from strom.protocol.codec import duration_ms
from strom.protocol.errors import ProtocolError
from strom.protocol.framing import read_uvarint, skip_tagged_fields

__all__ = [
    "ListedTransaction",
    "TransactionDescription",
    "describe_transaction",
    "fence_transactional_id",
    "list_transactions",
]

INIT_PRODUCER_ID = 22
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66


@dataclass(frozen=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str
    coordinator: int


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    coordinator: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int | None
    """When the current transaction started (``None`` when there is none)."""
    partitions: tuple[tuple[str, int], ...]


def _ms(value: object) -> int:
    if isinstance(value, datetime.timedelta):
        return duration_ms(value)
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, int):
        return value
    raise KafkaProtocolError(f"expected a time in milliseconds, got {value!r}")


async def list_transactions(
    client: Client,
    *,
    states: Sequence[str] = (),
    producer_ids: Sequence[int] = (),
    duration_ms: int = -1,
) -> list[ListedTransaction]:
    """Transactional ids of the whole cluster (ListTransactions on every broker). Filters:
    ``states`` (e.g. ``Ongoing``), ``producer_ids``, and ``duration_ms`` (transactions running
    longer than that; needs ListTransactions v1, else applied by describing each)."""
    md = await client.metadata([])
    brokers = list(md.brokers.values())
    out: list[ListedTransaction] = []

    async def one(b: BrokerMetadata) -> None:
        conn = await client.connection(b.host, b.port)
        version = conn.version(LIST_TRANSACTIONS)
        resp = await conn.request(
            LIST_TRANSACTIONS,
            {
                "state_filters": list(states),
                "producer_id_filters": list(producer_ids),
                "duration_filter": duration_ms,
            },
            version=version,
        )
        code = int(resp.error_code)
        if code:
            raise KafkaError(code, f"list transactions on broker {b.node_id}")
        listed = [
            ListedTransaction(
                str(t.transactional_id), int(t.producer_id), str(t.transaction_state), b.node_id
            )
            for t in resp.transaction_states
        ]
        if duration_ms >= 0 and version < 1:
            now = datetime.datetime.now(datetime.UTC).timestamp() * 1000
            kept = []
            for t in listed:
                d = await describe_transaction(client, t.transactional_id)
                if d.start_time_ms is not None and now - d.start_time_ms > duration_ms:
                    kept.append(t)
            listed = kept
        out.extend(listed)

    await asyncio.gather(*(one(b) for b in brokers))
    return sorted(out, key=lambda t: t.transactional_id)


def _decode_describe_v0(body: bytes) -> list[SimpleNamespace]:
    """DescribeTransactions v0 response (flexible; header v1) into plain objects."""
    pos = 4

    def uvarint() -> int:
        nonlocal pos
        value, pos = read_uvarint(body, pos)
        return value

    def skip_tags() -> None:
        nonlocal pos
        pos = skip_tagged_fields(body, pos)

    def fixed(fmt: str) -> int:
        nonlocal pos
        (v,) = struct.unpack_from(fmt, body, pos)
        pos += struct.calcsize(fmt)
        return int(v)

    def string() -> str:
        nonlocal pos
        n = uvarint() - 1
        s = body[pos : pos + n].decode()
        pos += n
        return s

    try:
        skip_tags()  # response header v1
        fixed(">i")  # throttle
        states = []
        for _ in range(uvarint() - 1):
            t = SimpleNamespace(
                error_code=fixed(">h"),
                transactional_id=string(),
                transaction_state=string(),
                transaction_timeout=fixed(">i"),
                transaction_start_time=fixed(">q"),
                producer_id=fixed(">q"),
                producer_epoch=fixed(">h"),
                topics=[],
            )
            for _t in range(uvarint() - 1):
                topic = string()
                parts = [fixed(">i") for _p in range(uvarint() - 1)]
                skip_tags()
                t.topics.append(SimpleNamespace(topic=topic, partitions=parts))
            skip_tags()
            states.append(t)
        return states
    except (IndexError, struct.error, UnicodeDecodeError, ProtocolError) as e:
        raise KafkaProtocolError(f"malformed DescribeTransactions response: {e}") from e


async def describe_transaction(client: Client, transactional_id: str) -> TransactionDescription:
    """DescribeTransactions of one transactional id at its coordinator. Raises
    TRANSACTIONAL_ID_NOT_FOUND for an unknown id."""

    async def call(coordinator: BrokerMetadata, conn: KafkaConnection) -> TransactionDescription:
        # Decoded by hand: brokers send transaction_start_time -1 when no transaction is open,
        # which kio's timestamp type refuses to parse.
        body = await conn.request_raw(
            DESCRIBE_TRANSACTIONS, {"transactional_ids": [transactional_id]}, version=0
        )
        for t in _decode_describe_v0(body):
            if t.transactional_id != transactional_id:
                continue
            code = int(t.error_code)
            if code:
                raise KafkaError(code, f"transactional id {transactional_id!r}")
            start = _ms(t.transaction_start_time)
            return TransactionDescription(
                transactional_id=transactional_id,
                coordinator=coordinator.node_id,
                state=str(t.transaction_state),
                producer_id=int(t.producer_id),
                producer_epoch=int(t.producer_epoch),
                timeout_ms=_ms(t.transaction_timeout),
                start_time_ms=start if start >= 0 else None,
                partitions=tuple(sorted((str(tp.topic), int(p)) for tp in t.topics for p in tp.partitions)),
            )
        raise KafkaProtocolError(f"DescribeTransactions response lacks {transactional_id!r}")

    return await with_coordinator(client, transactional_id, TRANSACTION, call)


async def fence_transactional_id(
    client: Client, transactional_id: str, *, transaction_timeout_ms: int, timeout_s: float = 60.0
) -> tuple[int, int]:
    """InitProducerId with ``transactional_id``, as a new producer instance would send it:
    the coordinator bumps the epoch (fencing the current producer, whose next request fails
    with PRODUCER_FENCED / INVALID_PRODUCER_EPOCH) and aborts its open transaction. Retried
    while the coordinator answers CONCURRENT_TRANSACTIONS (the abort markers are being
    written) or a coordinator error. Returns the new ``(producer_id, producer_epoch)``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s

    async def call(_: BrokerMetadata, conn: KafkaConnection) -> tuple[int, int]:
        while True:
            resp = await conn.request(
                INIT_PRODUCER_ID,
                {
                    "transactional_id": transactional_id,
                    "transaction_timeout": transaction_timeout_ms,
                    "producer_id": -1,
                    "producer_epoch": -1,
                },
            )
            code = int(resp.error_code)
            if not code:
                return int(resp.producer_id), int(resp.producer_epoch)
            if code == ErrorCode.concurrent_transactions and loop.time() < deadline:
                await asyncio.sleep(0.05)
                continue
            if code in COORDINATOR_RETRY_CODES:
                raise KafkaError(code, f"transactional id {transactional_id!r}")
            raise KafkaError(code, f"init producer id of {transactional_id!r}")

    return await with_coordinator(client, transactional_id, TRANSACTION, call)
