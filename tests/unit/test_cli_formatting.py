"""CLI pure helpers and argument parsing: Kafka tool formats, partitioner, parser errors."""

from __future__ import annotations

import argparse
import uuid

import pytest

from strom.cli import commands
from strom.cli.formatting import (
    LineError,
    LineReader,
    MessageFormatter,
    describe_lines,
    murmur2,
    parse_properties_args,
    partition_for_key,
    unescape,
)
from strom.cli.main import build_parser, run
from strom.client.client import PartitionMetadata, TopicMetadata, parse_bootstrap
from strom.protocol.records import Record


def rec(offset: int = 5, key: bytes | None = b"k", value: bytes | None = b"v", headers=None, ts_type=0):
    return Record(offset, 1700000000000, ts_type, key, value, headers or [])


# ---------------------------------------------------------------- consumer output


def test_formatter_default_prints_value_only() -> None:
    assert MessageFormatter().format(0, rec()) == b"v\n"
    assert MessageFormatter().format(0, rec(value=None)) == b"null\n"


def test_formatter_all_columns_in_kafka_order() -> None:
    fmt = MessageFormatter.from_properties(
        parse_properties_args(
            [
                "print.key=true",
                "print.offset=true",
                "print.timestamp=true",
                "print.headers=true",
                "print.partition=true",
            ]
        )
    )
    line = fmt.format(0, rec(headers=[("a", b"1"), ("b", None)]))
    assert line == b"CreateTime:1700000000000\tPartition:0\tOffset:5\ta:1,b:null\tk\tv\n"
    assert fmt.format(3, rec(key=None, ts_type=1)).startswith(b"LogAppendTime:1700000000000\tPartition:3")
    assert b"\tNO_HEADERS\tnull\tv\n" in fmt.format(3, rec(key=None))


def test_formatter_separators_and_escapes() -> None:
    props = parse_properties_args(["print.key=true", "key.separator=\\t|", "line.separator=\\n\\n"])
    assert props["key.separator"] == "\t|"
    assert MessageFormatter.from_properties(props).format(0, rec()) == b"k\t|v\n\n"


def test_formatter_rejects_bad_bool() -> None:
    with pytest.raises(ValueError):
        MessageFormatter.from_properties({"print.key": "yes"})


# ---------------------------------------------------------------- producer input


def test_line_reader_plain_value() -> None:
    assert LineReader().parse(b"hello\tworld") == (None, b"hello\tworld", [])


def test_line_reader_key_and_static_headers() -> None:
    r = LineReader.from_properties({"parse.key": "true", "key.separator": ":"}, [("h", b"x")])
    assert r.parse(b"k:v:w") == (b"k", b"v:w", [("h", b"x")])
    assert r.parse(b":v") == (b"", b"v", [("h", b"x")])
    with pytest.raises(LineError, match="line number 7"):
        r.parse(b"novalue", 7)


def test_line_reader_ignore_error_and_null_marker() -> None:
    r = LineReader.from_properties({"parse.key": "true", "ignore.error": "true", "null.marker": "NULL"})
    assert r.parse(b"whole") == (None, b"whole", [])
    assert r.parse(b"NULL\tNULL") == (None, None, [])


def test_line_reader_headers() -> None:
    r = LineReader.from_properties({"parse.headers": "true", "parse.key": "true"})
    assert r.parse(b"a:1,b\tk\tv") == (b"k", b"v", [("a", b"1"), ("b", None)])
    assert r.parse(b"\tk\tv") == (b"k", b"v", [])
    with pytest.raises(LineError):
        r.parse(b"no-delimiter")


def test_static_headers_parsing() -> None:
    assert commands.parse_static_headers(["a=1,b=2", "c"], ",") == [("a", b"1"), ("b", b"2"), ("c", None)]
    assert commands.parse_static_headers(["a=1;b=x,y"], ";") == [("a", b"1"), ("b", b"x,y")]
    with pytest.raises(commands.CommandError):
        commands.parse_static_headers(["=1"], ",")


def test_unescape() -> None:
    assert unescape("a\\tb\\\\n\\x") == "a\tb\\n\\x"


# ---------------------------------------------------------------- partitioner, describe


def test_murmur2_matches_kafka_vectors() -> None:
    # from Kafka's UtilsTest.testMurmur2
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107
    assert 0 <= partition_for_key(b"21", 3) < 3


def test_describe_lines_kafka_format() -> None:
    t = TopicMetadata(
        name="t",
        partitions={
            0: PartitionMetadata(0, 1, (1, 2), (1,)),
            1: PartitionMetadata(1, -1, (2, 1), (), offline_replicas=(2,)),
        },
        topic_id=uuid.UUID(int=1),
    )
    lines = describe_lines(t, {"retention.ms": "1000", "cleanup.policy": "compact"})
    assert lines[0] == (
        "Topic: t\tTopicId: AAAAAAAAAAAAAAAAAAAAAQ\tPartitionCount: 2\tReplicationFactor: 2\t"
        "Configs: retention.ms=1000,cleanup.policy=compact"
    )
    assert lines[1] == "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 1,2\tIsr: 1"
    assert lines[2] == "\tTopic: t\tPartition: 1\tLeader: none\tReplicas: 2,1\tIsr: \tOffline: 2"


def test_parse_bootstrap() -> None:
    assert parse_bootstrap("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap(["[::1]:9093", "host"]) == [("::1", 9093), ("host", 9092)]
    assert parse_bootstrap("PLAINTEXT://h:5") == [("h", 5)]
    with pytest.raises(ValueError):
        parse_bootstrap("h:notaport")
    with pytest.raises(ValueError):
        parse_bootstrap("")


# ---------------------------------------------------------------- argument parsing


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_topics_subcommand_and_flag_forms() -> None:
    a = parse(
        "topics",
        "--bootstrap-server",
        "h:1",
        "create",
        "--topic",
        "t",
        "--partitions",
        "3",
        "--config",
        "retention.ms=5",
    )
    assert (a.action, a.topic, a.partitions, a.config, a.bootstrap_server) == (
        "create",
        "t",
        3,
        ["retention.ms=5"],
        "h:1",
    )
    b = parse("topics", "--list")
    assert b.flag_list and b.bootstrap_server == "127.0.0.1:9092"


def test_produce_and_consume_flags() -> None:
    p = parse(
        "produce",
        "--topic",
        "t",
        "--key-separator",
        ":",
        "--header",
        "a=1",
        "--compression-type",
        "zstd",
        "--acks",
        "1",
        "--property",
        "parse.key=true",
    )
    assert (p.key_separator, p.header, p.compression_type, p.acks) == (":", ["a=1"], "zstd", "1")
    c = parse(
        "consume", "--topic", "t", "--from-beginning", "--max-messages", "3", "--property", "print.key=true"
    )
    assert c.from_beginning and c.max_messages == 3 and c.property == ["print.key=true"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["topics"], "exactly one of"),
        (["topics", "list", "--describe"], "exactly one of"),
        (["topics", "create"], "create needs --topic"),
        (["topics", "delete"], "delete needs --topic"),
    ],
)
def test_topics_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(argv) == 2
    assert message in capsys.readouterr().err


def test_consume_offset_spec_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["consume", "--topic", "t", "--offset", "x", "--bootstrap-server", "127.0.0.1:1"]) == 2
    assert "--offset must be" in capsys.readouterr().err
    assert run(["consume", "--topic", "t", "--offset", "1", "--from-beginning"]) == 2


def test_unreachable_broker_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["topics", "--bootstrap-server", "127.0.0.1:1", "list"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no broker reachable" in err and "Traceback" not in err


def test_serve_config_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["serve", "--override", "num.partitions=0"]) == 2
    assert "configuration error" in capsys.readouterr().err
    assert run(["serve", "--override", "bogus"]) == 2


def test_parser_rejects_missing_topic() -> None:
    with pytest.raises(SystemExit) as e:
        parse("produce")
    assert e.value.code == 2
