"""``strom transactions``: list, describe and abort transactions, like ``kafka-transactions.sh``
(same columns), over :mod:`strom.client.transactions`.

Abort: Kafka's tool aborts a hanging transaction by writing the abort marker itself
(WriteTxnMarkers, a broker-internal API strom does not expose to clients). ``strom
transactions abort --transactional-id ID`` instead sends ``InitProducerId`` for that id, as a
new instance of the producer would: the coordinator aborts the open transaction (abort markers
to every partition, the last stable offset moves on) and bumps the producer epoch, so the
producer that opened it is fenced (its next request fails with PRODUCER_FENCED /
INVALID_PRODUCER_EPOCH) and must be re-created. This works the same on strom and on Apache
Kafka; it needs the transactional id, not the partition and offset.

Error contract: usage mistakes raise :class:`~strom.cli.commands.CommandError` with exit code 2,
failures exit code 1; Kafka errors propagate as :class:`~strom.client.errors.KafkaError`.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from strom.cli.commands import CommandError, _client
from strom.cli.groups import format_table
from strom.client.client import Client
from strom.client.errors import KafkaConnectionError, KafkaError
from strom.client.transactions import (
    TransactionDescription,
    describe_transaction,
    fence_transactional_id,
    list_transactions,
)

__all__ = ["ACTIONS", "add_parser", "describe_row", "transactions"]

ACTIONS = ("list", "describe", "abort")
DESCRIBE_HEADERS = (
    "CoordinatorId",
    "TransactionalId",
    "ProducerId",
    "ProducerEpoch",
    "TransactionState",
    "TransactionTimeoutMs",
    "CurrentTransactionStartTimeMs",
    "TransactionDurationMs",
    "TopicPartitions",
)
LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
OPEN_STATES = frozenset({"Ongoing", "PrepareAbort", "PrepareEpochFence"})

ABORT_HELP = (
    "abort the open transaction of --transactional-id by fencing it: strom sends InitProducerId "
    "for the id, as a new producer instance would, which aborts the transaction (abort markers, "
    "the last stable offset moves on) and bumps the producer epoch, so the producer that opened "
    "it is fenced and must be re-created. Works on strom and on Apache Kafka. Kafka's "
    "--topic/--partition/--start-offset form needs WriteTxnMarkers, which is not available to clients."
)


def add_parser(sub: Any, add_bootstrap: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register ``strom transactions`` on the subparsers ``sub`` of the ``strom`` parser."""
    p = sub.add_parser(
        "transactions",
        help="list, describe, abort transactions (like kafka-transactions.sh)",
        description="list: every transactional id of the cluster; describe: one transactional id "
        "and its open transaction; abort: " + ABORT_HELP,
    )
    add_bootstrap(p)
    p.add_argument("action", choices=ACTIONS)
    p.add_argument("--transactional-id", help="describe/abort: the transactional id")
    p.add_argument(
        "--state",
        "--state-filter",
        dest="states",
        action="append",
        default=[],
        metavar="STATE[,STATE]",
        help="list: only these states (Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, ...)",
    )
    p.add_argument(
        "--producer-id",
        dest="producer_ids",
        action="append",
        default=[],
        type=int,
        metavar="ID",
        help="list: only this producer id (repeatable)",
    )
    p.add_argument(
        "--duration-filter",
        type=int,
        default=-1,
        metavar="MS",
        help="list: only transactions running for longer than MS milliseconds",
    )
    p.add_argument(
        "--transaction-timeout-ms",
        type=int,
        default=None,
        help="abort: transaction timeout sent with InitProducerId (default: the id's current one)",
    )
    # Kafka's marker-based abort (refused with an explanation)
    for flag in ("--topic", "--partition", "--start-offset", "--producer-epoch", "--coordinator-epoch"):
        p.add_argument(flag, dest="kafka_" + flag[2:].replace("-", "_"), help=argparse.SUPPRESS)




def describe_row(d: TransactionDescription, now_ms: int) -> list[str]:
    """One row of kafka-transactions.sh describe (``None`` when no transaction is open)."""
    if d.start_time_ms is None:
        start, duration = "None", "None"
    else:
        start, duration = str(d.start_time_ms), str(max(now_ms - d.start_time_ms, 0))
    return [
        str(d.coordinator),
        d.transactional_id,
        str(d.producer_id),
        str(d.producer_epoch),
        d.state,
        str(d.timeout_ms),
        start,
        duration,
        ",".join(f"{t}-{p}" for t, p in d.partitions),
    ]


def _print_table(headers: tuple[str, ...], rows: list[list[str]]) -> None:
    for line in format_table(headers, rows):
        print(line)


def _validate(args: argparse.Namespace) -> None:
    if args.action in ("describe", "abort") and not args.transactional_id:
        if args.action == "abort" and any(
            getattr(args, "kafka_" + f) is not None
            for f in ("topic", "partition", "start_offset", "producer_epoch", "coordinator_epoch")
        ):
            raise CommandError(
                "abort by --topic/--partition/--start-offset needs WriteTxnMarkers, which strom does "
                "not expose; give --transactional-id (the producer is fenced and its transaction aborted)",
                2,
            )
        raise CommandError(f"{args.action} needs --transactional-id", 2)


async def transactions(args: argparse.Namespace) -> int:
    """Run ``strom transactions ACTION``; returns the exit code."""
    _validate(args)
    client = _client(args)
    try:
        async with client:
            if args.action == "list":
                states = [s.strip() for item in args.states for s in item.split(",") if s.strip()]
                listed = await list_transactions(
                    client, states=states, producer_ids=args.producer_ids, duration_ms=args.duration_filter
                )
                _print_table(
                    LIST_HEADERS,
                    [[t.transactional_id, str(t.coordinator), str(t.producer_id), t.state] for t in listed],
                )
                return 0
            try:
                d = await describe_transaction(client, args.transactional_id)
            except KafkaError as e:
                if e.code == ErrorCode.transactional_id_not_found:
                    raise CommandError(f"transactional id {args.transactional_id!r} does not exist") from None
                raise
            if args.action == "describe":
                _print_table(DESCRIBE_HEADERS, [describe_row(d, int(time.time() * 1000))])
                return 0
            return await _abort(client, args, d)
    except KafkaConnectionError as e:
        raise CommandError(e.message or str(e)) from None


async def _abort(client: Client, args: argparse.Namespace, d: TransactionDescription) -> int:
    tid = d.transactional_id
    if d.state == "PrepareCommit":
        raise CommandError(
            f"the transaction of {tid!r} is committing (state PrepareCommit); it can no longer be aborted"
        )
    if d.state not in OPEN_STATES:
        print(f"Transactional id '{tid}' has no open transaction (state {d.state}); nothing to abort.")
        return 0
    timeout_ms = args.transaction_timeout_ms if args.transaction_timeout_ms is not None else d.timeout_ms
    pid, epoch = await fence_transactional_id(client, tid, transaction_timeout_ms=timeout_ms)
    # the state afterwards, from ListTransactions (every broker answers it for any state)
    after = [
        t.state for t in await list_transactions(client, producer_ids=[pid]) if t.transactional_id == tid
    ]
    state = after[0] if after else "unknown"
    print(
        f"Aborted the transaction of '{tid}' (producer id {d.producer_id}, epoch {d.producer_epoch}, "
        f"partitions {','.join(f'{t}-{p}' for t, p in d.partitions) or 'none'}) by fencing it with "
        f"InitProducerId: producer id {pid}, epoch {epoch}, state now {state}. "
        "The producer that opened it is fenced and must be re-created.",
    )
    if state not in ("CompleteAbort", "Empty"):
        print(f"Warning: transactional id '{tid}' is in state {state}", file=sys.stderr)
    return 0
