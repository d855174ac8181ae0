"""Pure parts of ``strom groups`` and ``strom transactions``: argument validation, topic specs,
dates and durations, the reset CSV, table layout, the offsets view, clamping, and decoding a
classic consumer assignment."""

from __future__ import annotations

import datetime
import struct

import pytest

from strom.cli import groups as g
from strom.cli import transactions as tx
from strom.cli.commands import CommandError
from strom.cli.main import build_parser, run
from strom.client.client import BrokerMetadata
from strom.client.errors import KafkaProtocolError
from strom.client.groups import (
    GroupDescription,
    MemberDescription,
    OffsetAndMetadata,
    parse_consumer_assignment,
)
from strom.client.transactions import TransactionDescription


def _args(*argv: str) -> object:
    return build_parser().parse_args(["groups", *argv])


@pytest.mark.parametrize(
    ("argv", "action"),
    [
        (["list"], "list"),
        (["--list"], "list"),
        (["--describe", "--group", "a"], "describe"),
        (["describe", "--all-groups", "--members"], "describe"),
        (["--delete", "--group", "a", "--group", "b"], "delete"),
        (["reset-offsets", "--group", "a", "--topic", "t", "--to-earliest"], "reset-offsets"),
        (
            ["--reset-offsets", "--group", "a", "--all-topics", "--shift-by", "-3", "--execute"],
            "reset-offsets",
        ),
        (["reset-offsets", "--group", "a", "--from-file", "f.csv"], "reset-offsets"),
    ],
)
def test_group_action_accepts(argv: list[str], action: str) -> None:
    assert g.group_action(_args(*argv)) == action  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "exactly one of"),
        (["list", "--describe"], "exactly one of"),
        (["describe"], "needs --group or --all-groups"),
        (["delete", "--group", "a", "--all-groups"], "not both"),
        (["describe", "--group", "a", "--members", "--state"], "at most one"),
        (["reset-offsets", "--group", "a", "--topic", "t"], "exactly one of --to-earliest"),
        (["reset-offsets", "--group", "a", "--topic", "t", "--to-earliest", "--to-latest"], "exactly one"),
        (["reset-offsets", "--group", "a", "--to-earliest"], "--topic or --all-topics"),
        (["reset-offsets", "--group", "a", "--topic", "t", "--all-topics", "--to-latest"], "not both"),
        (
            ["reset-offsets", "--group", "a", "--topic", "t", "--to-latest", "--dry-run", "--execute"],
            "not both",
        ),
    ],
)
def test_group_action_rejects(argv: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message) as e:
        g.group_action(_args(*argv))  # type: ignore[arg-type]
    assert e.value.exit_code == 2


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["groups", "describe"]) == 2
    assert "needs --group" in capsys.readouterr().err
    assert run(["transactions", "describe"]) == 2
    assert "needs --transactional-id" in capsys.readouterr().err
    assert run(["transactions", "abort", "--topic", "t", "--partition", "0", "--start-offset", "5"]) == 2
    assert "WriteTxnMarkers" in capsys.readouterr().err


def test_parse_topic_spec() -> None:
    assert g.parse_topic_spec("t") == ("t", None)
    assert g.parse_topic_spec("t:2,0,2") == ("t", [0, 2])
    assert g.parse_topic_spec("my.topic-1:5") == ("my.topic-1", [5])
    for bad in (":1", "t:", "t:a", "t:-1"):
        with pytest.raises(CommandError):
            g.parse_topic_spec(bad)


def test_parse_datetime() -> None:
    utc = datetime.UTC
    expected = int(datetime.datetime(2024, 5, 1, 12, 30, 15, 250_000, tzinfo=utc).timestamp() * 1000)
    assert g.parse_datetime("2024-05-01T12:30:15.250Z") == expected
    assert g.parse_datetime("2024-05-01T14:30:15.250+02:00") == expected
    assert g.parse_datetime("2024-05-01T14:30:15.250+0200") == expected
    assert g.parse_datetime("2024-05-01T07:30:15.250-0500") == expected
    # no zone: the given local zone (the machine's by default)
    tz = datetime.timezone(datetime.timedelta(hours=3))
    assert g.parse_datetime("2024-05-01T15:30:15.250", tz) == expected
    with pytest.raises(CommandError):
        g.parse_datetime("yesterday")


def test_parse_duration() -> None:
    assert g.parse_duration("PT1H") == 3_600_000
    assert g.parse_duration("P1DT30M") == 86_400_000 + 1_800_000
    assert g.parse_duration("PT0.5S") == 500
    assert g.parse_duration("pt10m") == 600_000
    for bad in ("P", "PT", "1H", "PT1X", ""):
        with pytest.raises(CommandError):
            g.parse_duration(bad)


def test_parse_reset_file() -> None:
    text = "t,0,5\n\nt,1,7\nu,0,0\n"
    assert g.parse_reset_file(text, "grp") == {("t", 0): 5, ("t", 1): 7, ("u", 0): 0}
    multi = "grp,t,0,5\nother,t,0,9\ngrp,t,1,6\n"
    assert g.parse_reset_file(multi, "grp") == {("t", 0): 5, ("t", 1): 6}
    for bad in ("t,0", "t,x,1", "t,0,1,2,3", ",0,1"):
        with pytest.raises(CommandError):
            g.parse_reset_file(bad, "grp")


def test_format_table() -> None:
    lines = g.format_table(["A", "LONGHEADER", "C"], [["xyz", 1, "last column"], ["q", 22, ""]], [5])
    assert lines == ["A     LONGHEADER C", "xyz   1          last column", "q     22"]


def _member(mid: str, assignment: dict[str, tuple[int, ...]]) -> MemberDescription:
    return MemberDescription(mid, None, f"client-{mid}", "/10.0.0.1", assignment)


def test_offset_rows() -> None:
    d = GroupDescription(
        "grp",
        "Stable",
        "consumer",
        "range",
        (_member("m2", {"t": (1,)}), _member("m1", {"t": (0,), "u": ()})),
        BrokerMetadata(1, "h", 9092),
    )
    committed = {("t", 0): OffsetAndMetadata(5), ("old", 0): OffsetAndMetadata(3)}
    log_end = {("t", 0): 9, ("t", 1): 4, ("old", 0): 3}
    rows = g.offset_rows(d, committed, log_end)
    assert [(r.topic, r.partition, r.current, r.log_end, r.lag, r.consumer_id) for r in rows] == [
        ("old", 0, 3, 3, 0, "-"),
        ("t", 0, 5, 9, 4, "m1"),
        ("t", 1, None, 4, None, "m2"),
    ]
    assert rows[1].host == "/10.0.0.1" and rows[1].client_id == "client-m1"
    # a committed offset beyond the (earlier) log end never shows a negative lag
    assert g.OffsetRow("t", 0, 10, 8).lag == 0
    assert g.OffsetRow("t", 0, 3, None).lag is None


def test_clamp_offset() -> None:
    warnings: list[str] = []
    assert g.clamp_offset(("t", 0), 5, 2, 9, warnings.append) == 5
    assert g.clamp_offset(("t", 0), 50, 2, 9, warnings.append) == 9
    assert g.clamp_offset(("t", 1), 0, 2, 9, warnings.append) == 2
    assert warnings == [
        "New offset (50) is higher than latest offset for topic partition t-0. Value will be set to 9",
        "New offset (0) is lower than earliest offset for topic partition t-1. Value will be set to 2",
    ]


def _assignment(version: int, topics: dict[str, list[int]], user_data: bytes | None = None) -> bytes:
    out = struct.pack(">hi", version, len(topics))
    for t, ps in topics.items():
        out += struct.pack(">h", len(t)) + t.encode() + struct.pack(">i", len(ps))
        out += b"".join(struct.pack(">i", p) for p in ps)
    return out + (
        struct.pack(">i", -1) if user_data is None else struct.pack(">i", len(user_data)) + user_data
    )


def test_parse_consumer_assignment() -> None:
    assert parse_consumer_assignment(b"") == {}
    assert parse_consumer_assignment(_assignment(0, {"a": [2, 0], "b": []})) == {"a": (0, 2), "b": ()}
    assert parse_consumer_assignment(_assignment(3, {"x": [1]}, b"sticky")) == {"x": (1,)}
    with pytest.raises(KafkaProtocolError):
        parse_consumer_assignment(_assignment(0, {"abc": [1, 2]})[:12])


def test_transactions_describe_row() -> None:
    d = TransactionDescription("tx", 1, "Ongoing", 7, 2, 60000, 1_000, (("t", 0), ("t", 1), ("u", 3)))
    row = tx.describe_row(d, 4_500)
    assert row == ["1", "tx", "7", "2", "Ongoing", "60000", "1000", "3500", "t-0,t-1,u-3"]
    idle = TransactionDescription("tx", 1, "CompleteCommit", 7, 2, 60000, None, ())
    assert tx.describe_row(idle, 4_500)[6:] == ["None", "None", ""]
    assert len(tx.DESCRIBE_HEADERS) == len(row)
