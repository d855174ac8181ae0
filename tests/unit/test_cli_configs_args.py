"""Pure parts of ``strom configs`` / ``records delete`` / ``topics alter``: argument shapes,
Kafka's --add-config syntax, describe output, offset JSON."""

from __future__ import annotations

import pytest

from strom.cli import configs as cc
from strom.cli.commands import CommandError
from strom.cli.main import build_parser, run
from strom.client.admin import ConfigInfo


def args(*argv: str) -> object:
    return build_parser().parse_args(["configs", *argv])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("retention.ms=1000", [("retention.ms", "1000")]),
        ("a=1,b=2", [("a", "1"), ("b", "2")]),
        ("cleanup.policy=[compact,delete],x=y", [("cleanup.policy", "compact,delete"), ("x", "y")]),
        ("k=a=b", [("k", "a=b")]),
        (" a = 1 , ", [("a", "1")]),
    ],
)
def test_parse_config_list(text: str, expected: list[tuple[str, str]]) -> None:
    assert cc.parse_config_list(text) == expected


@pytest.mark.parametrize("text", ["novalue", "a=[1,2", "a=1]", "=3"])
def test_parse_config_list_errors(text: str) -> None:
    with pytest.raises(CommandError) as ei:
        cc.parse_config_list(text)
    assert ei.value.exit_code == 2


def test_targets() -> None:
    t = cc.target_from_args(args("describe", "--entity-type", "topics", "--entity-name", "t"))  # type: ignore[arg-type]
    assert (t.entity_type, t.name, t.resource_type) == ("topics", "t", 2)
    t = cc.target_from_args(args("describe", "--entity-type", "brokers", "--entity-default"))  # type: ignore[arg-type]
    assert t.is_default and t.name == ""
    assert cc.target_from_args(args("--describe", "--broker-defaults")).is_default  # type: ignore[arg-type]
    t = cc.target_from_args(args("describe", "--broker", "1"))  # type: ignore[arg-type]
    assert (t.entity_type, t.name, t.resource_type) == ("brokers", "1", 4)
    t = cc.target_from_args(args("describe", "--entity-type", "topics"))  # type: ignore[arg-type]
    assert t.name is None  # every topic


@pytest.mark.parametrize(
    "argv",
    [
        ["describe"],
        ["describe", "--topic", "a", "--broker", "1"],
        ["describe", "--entity-name", "t"],
        ["describe", "--entity-type", "topics", "--entity-default"],
        ["describe", "--entity-type", "brokers", "--entity-name", "one"],
        ["describe", "--entity-type", "brokers", "--entity-name", "1", "--entity-default"],
    ],
)
def test_bad_targets(argv: list[str]) -> None:
    with pytest.raises(CommandError) as ei:
        cc.target_from_args(args(*argv))  # type: ignore[arg-type]
    assert ei.value.exit_code == 2


def test_alter_ops() -> None:
    ops = cc.alter_ops(
        args(  # type: ignore[arg-type]
            "alter",
            "--topic",
            "t",
            "--add-config",
            "a=1,b=[x,y]",
            "--delete-config",
            "c,d",
            "--append-config",
            "cleanup.policy=compact",
        )
    )
    assert ops == [
        ("a", 0, "1"),
        ("b", 0, "x,y"),
        ("cleanup.policy", 2, "compact"),
        ("c", 1, None),
        ("d", 1, None),
    ]
    with pytest.raises(CommandError, match="alter needs"):
        cc.alter_ops(args("alter", "--topic", "t"))  # type: ignore[arg-type]
    with pytest.raises(CommandError, match="more than once"):
        cc.alter_ops(args("alter", "--topic", "t", "--add-config", "a=1", "--delete-config", "a"))  # type: ignore[arg-type]


def test_describe_lines_like_kafka_configs() -> None:
    entries = [
        ConfigInfo(
            "retention.ms",
            "1000",
            1,
            synonyms=(("retention.ms", "1000", 1), ("log.retention.hours", "168", 5)),
        ),
        ConfigInfo("cleanup.policy", "delete", 5, synonyms=(("log.cleanup.policy", "delete", 5),)),
        ConfigInfo("secret.password", None, 1, sensitive=True, synonyms=(("secret.password", "x", 1),)),
    ]
    target = cc.ConfigTarget("topics", "t")
    assert cc.describe_config_lines(target, entries, all_configs=False) == [
        "Dynamic configs for topic t are:",
        "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000, "
        "DEFAULT_CONFIG:log.retention.hours=168}",
        "  secret.password=null sensitive=true synonyms={DYNAMIC_TOPIC_CONFIG:secret.password=null}",
    ]
    lines = cc.describe_config_lines(target, entries, all_configs=True)
    assert lines[0] == "All configs for topic t are:" and len(lines) == 4
    assert cc.ConfigTarget("brokers", "").header(False) == "Default configs for brokers in the cluster are:"
    assert (
        cc.ConfigTarget("brokers", "").done()
        == "Completed updating default config for brokers in the cluster."
    )
    assert cc.ConfigTarget("brokers", "1").done() == "Completed updating config for broker 1."


def test_parse_offset_json() -> None:
    doc = (
        '{"partitions": [{"topic": "t", "partition": 0, "offset": 3},'
        ' {"topic": "t", "partition": 1, "offset": -1}], "version": 1}'
    )
    assert cc.parse_offset_json(doc) == {"t": {0: 3, 1: -1}}
    for bad in ("[]", "{", '{"partitions": []}', '{"partitions": [{"topic": "t"}]}'):
        with pytest.raises(CommandError):
            cc.parse_offset_json(bad)


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["configs", "--bootstrap-server", "127.0.0.1:1", "describe", "--alter", "--topic", "t"]) == 2
    assert run(["configs", "--bootstrap-server", "127.0.0.1:1", "alter", "--topic", "t"]) == 2
    assert run(["topics", "--bootstrap-server", "127.0.0.1:1", "alter", "--topic", "t"]) == 2
    assert run(["records", "--bootstrap-server", "127.0.0.1:1", "delete"]) == 2
    assert run(["dump-log"]) == 2
    err = capsys.readouterr().err
    assert "alter needs --partitions" in err and "alter needs --add-config" in err


@pytest.mark.parametrize("text", ["SCRAM-SHA-256=[password=s3cret]]", "SCRAM-SHA-256=[password=s3cret"])
def test_unbalanced_brackets_never_echo_the_value(text: str) -> None:
    with pytest.raises(CommandError) as e:
        cc.parse_config_list(text)
    assert "unbalanced" in str(e.value) and "s3cret" not in str(e.value)
