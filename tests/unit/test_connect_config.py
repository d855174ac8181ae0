"""strom connect's connector config model: the JSON a Connect user posts and the .properties
files of Connect's standalone mode; every mistake is a one-line ConfigError."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.cli.main import run
from strom.connect.config import FILE_SINK, FILE_SOURCE, load_config, parse_config, parse_properties
from strom.connect.data import ConfigError

SINK = {"connector.class": "FileStreamSink", "topics": "a,b", "file": "/tmp/out.txt"}


def test_kafka_quickstart_properties(tmp_path: Path) -> None:
    # Kafka's config/connect-file-source.properties, as shipped
    f = tmp_path / "connect-file-source.properties"
    f.write_text(
        "# comment\nname=local-file-source\nconnector.class=FileStreamSource\ntasks.max=1\n"
        "file=test.txt\ntopic=connect-test\n"
    )
    cfg = load_config(f)
    assert (cfg.name, cfg.connector_class, cfg.kind, cfg.tasks_max) == (
        "local-file-source",
        FILE_SOURCE,
        "source",
        1,
    )
    assert cfg.connector_props() == {"file": "test.txt", "topic": "connect-test", "batch.size": "2000"}
    assert cfg.key_converter[0] == "org.apache.kafka.connect.json.JsonConverter"


def test_json_forms(tmp_path: Path) -> None:
    cfg = parse_config(
        {
            "name": "s",
            "config": {
                **SINK,
                "tasks.max": 2,
                "errors.tolerance": "all",
                "errors.deadletterqueue.topic.name": "dlq",
                "errors.deadletterqueue.context.headers.enable": True,
            },
        }
    )
    assert cfg.connector_class == FILE_SINK and cfg.topics == ["a", "b"] and cfg.tasks_max == 2
    assert cfg.errors.tolerance == "all" and cfg.errors.dlq_topic == "dlq" and cfg.errors.dlq_context_headers
    flat = parse_config({**SINK}, name="s2")  # PUT /connectors/s2/config
    assert flat.name == "s2"
    f = tmp_path / "c.json"
    f.write_text(
        '{"name": "x", "config": {"connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",'
        ' "topics.regex": "t-.*"}}'
    )
    assert load_config(f).topics_regex == "t-.*"


def test_properties_syntax() -> None:
    text = (
        "a = 1\nb:2\nc 3\n! bang comment\nlong=one,\\\n    two\nregex=.*\\\\.raw\nrep=$1\nu=\\u00e9\n"
        "key\\=with\\:seps=v\n"
    )
    assert parse_properties(text) == {
        "a": "1",
        "b": "2",
        "c": "3",
        "long": "one,two",
        "regex": ".*\\.raw",
        "rep": "$1",
        "u": "é",
        "key=with:seps": "v",
    }


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"name": "x", "config": {"connector.class": "com.acme.Jdbc"}}, "Failed to find any class"),
        ({"config": SINK}, 'Missing required configuration "name"'),
        ({"name": "x", "config": {"topics": "a"}}, "connector.class"),
        ({"name": "x", "config": {**SINK, "tasks.max": "two"}}, "tasks.max: Not a number"),
        ({"name": "x", "config": {**SINK, "tasks.max": "0"}}, "at least 1"),
        ({"name": "x", "config": {**SINK, "topics.regex": "a.*"}}, "not both"),
        (
            {"name": "x", "config": {"connector.class": "FileStreamSink", "file": "f"}},
            "one of topics or topics.regex",
        ),
        ({"name": "x", "config": {**SINK, "errors.tolerance": "some"}}, "errors.tolerance"),
        ({"name": "x", "config": {**SINK, "errors.log.enable": "yes"}}, "true or false"),
        ({"name": "x", "config": {**SINK, "errors.deadletterqueue.topic.name": "a"}}, "DLQ topic"),
        ({"name": "x", "config": {**SINK, "transforms": "a"}}, "transforms.a.type"),
        (
            {"name": "x", "config": {**SINK, "transforms": "a,a", "transforms.a.type": "Filter"}},
            "Duplicate alias",
        ),
        (
            {"name": "x", "config": {**SINK, "transforms": "a", "transforms.a.type": "Nope"}},
            "could not be found",
        ),
        (
            {
                "name": "x",
                "config": {
                    **SINK,
                    "transforms": "a",
                    "transforms.a.type": "Filter",
                    "transforms.a.predicate": "p",
                },
            },
            "not in predicates",
        ),
        (
            {
                "name": "x",
                "config": {
                    **SINK,
                    "transforms": "a",
                    "transforms.a.type": "Filter",
                    "transforms.a.negate": "true",
                },
            },
            "predicate is not",
        ),
        (
            {"name": "x", "config": {**SINK, "predicates": "p", "predicates.p.type": "TopicNameMatches"}},
            "pattern",
        ),
        ({"name": "x", "config": {**SINK, "value.converter": "com.acme.Conv"}}, "value.converter"),
        ({"name": "x", "config": {**SINK, "value.converter.schemas.enable": "maybe"}}, "schemas.enable"),
        (
            {"name": "x", "config": {**SINK, "value.converter": "io.confluent.connect.avro.AvroConverter"}},
            "schema.registry.url",
        ),
        ({"name": "x", "config": {"connector.class": "FileStreamSource", "topic": "a,b"}}, "single topic"),
        ({"name": "x", "config": {"connector.class": "FileStreamSource", "file": "f"}}, '"topic"'),
        ({"name": "a/b", "config": SINK}, "may not contain"),
        ({"name": "x", "config": {**SINK, "name": "y"}}, "doesn't match"),
        ({"name": "x", "config": {**SINK, "file": ["a"]}}, "expected a string"),
        ({"name": "h", "config": {"connector.class": "HttpSink", "topics": "t"}}, "http.api.url"),
        (
            {
                "name": "h",
                "config": {"connector.class": "HttpSink", "topics": "t", "http.api.url": "ftp://x"},
            },
            "not an http",
        ),
        (
            {
                "name": "h",
                "config": {
                    "connector.class": "HttpSink",
                    "topics": "t",
                    "http.api.url": "http://x",
                    "request.method": "GET",
                },
            },
            "request.method",
        ),
        (
            {
                "name": "h",
                "config": {
                    "connector.class": "HttpSink",
                    "topics": "t",
                    "http.api.url": "http://x",
                    "batch.max.size": "0",
                },
            },
            "at least 1",
        ),
        ([1, 2], "JSON object"),
    ],
)
def test_bad_configs(doc: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", "\\(").replace(".", "\\.")):
        parse_config(doc)  # type: ignore[arg-type]


def test_unknown_keys_are_warnings(caplog: pytest.LogCaptureFixture) -> None:
    """As Kafka Connect: a key no plugin knows is passed on and ignored, with a warning naming it."""
    import logging

    doc = {
        "name": "x",
        "config": {
            **SINK,
            "fiel": "typo",
            "transforms": "a",
            "transforms.a.type": "Filter",
            "transforms.a.fields": "f",
            "transforms.b.type": "Filter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enabled": "false",
        },
    }
    with caplog.at_level(logging.WARNING, logger="strom.connect"):
        cfg = parse_config(doc)
    assert cfg.props["fiel"] == "typo"
    named = sorted(w.split("'")[1] for w in cfg.warnings)
    assert named == ["fiel", "transforms.a.fields", "transforms.b.type", "value.converter.schemas.enabled"]
    assert all("was supplied but isn't a known config" in w for w in cfg.warnings)
    logged = " ".join(r.getMessage() for r in caplog.records)
    for key in named:
        assert f"'{key}'" in logged
    # a sink key on a source connector: accepted, warned
    src = parse_config(
        {"name": "s", "config": {"connector.class": "FileStreamSource", "topic": "t", "topics": "t"}}
    )
    assert (
        len(src.warnings) == 1
        and "'topics'" in src.warnings[0]
        and "sink connector config" in src.warnings[0]
    )
    assert parse_config({"name": "x", "config": SINK}).warnings == []


def test_cli_validate_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "sink.properties"
    good.write_text("name=s\nconnector.class=FileStreamSink\ntopics=t\nfile=/tmp/x\n")
    assert run(["connect", "validate", str(good)]) == 0
    assert '"name": "s"' in capsys.readouterr().out
    typo = tmp_path / "typo.properties"
    typo.write_text("name=s\nconnector.class=FileStreamSink\ntopics=t\nfile=/tmp/x\nfiles=/tmp/y\n")
    assert run(["connect", "validate", str(typo)]) == 0
    out = capsys.readouterr()
    assert '"files": "/tmp/y"' in out.out
    assert out.err.count("warning") == 1
    assert (
        "strom connect: warning: The configuration 'files' was supplied but isn't a known config" in out.err
    )
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "s", "config": {')
    assert run(["connect", "run", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("strom connect: error:") and "bad JSON" in err and "Traceback" not in err
    assert run(["connect", "run", str(good), "--trigger-interval-ms", "0"]) == 2  # before Spark starts
    assert capsys.readouterr().err == "strom connect: error: --trigger-interval-ms must be at least 1\n"
    assert run(["connect", "validate", str(tmp_path / "missing.json")]) == 2
    assert "cannot read connector config" in capsys.readouterr().err
