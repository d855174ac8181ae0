"""strom sql's parser (no Spark, no broker): statements, ksqlDB types, rendering to Spark SQL,
and one clear positioned error for bad input; the CLI's --file stops at a bad statement."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.streams.sql import parser as P
from strom.streams.sql.shell import main


def one(text: str) -> P.Statement:
    stmts = P.split_statements(text)
    assert len(stmts) == 1
    return P.parse(stmts[0])


def test_create_stream_and_table_with_types() -> None:
    s = one(
        "create stream pv (viewtime BIGINT, userid VARCHAR KEY, tags ARRAY<STRING>, m MAP<STRING, INT>,"
        " addr STRUCT<city VARCHAR, zip INT>, amount DECIMAL(10, 2), ok BOOLEAN)"
        " with (KAFKA_TOPIC='pv', value_format='json', partitions=2, timestamp='viewtime');"
    )
    assert isinstance(s, P.CreateSource) and s.kind == "STREAM" and s.name == "PV"
    assert [(c.name, c.spark, c.key) for c in s.columns] == [
        ("viewtime", "bigint", False),
        ("userid", "string", True),
        ("tags", "array<string>", False),
        ("m", "map<string,int>", False),
        ("addr", "struct<`city`:string,`zip`:int>", False),
        ("amount", "decimal(10,2)", False),
        ("ok", "boolean", False),
    ]
    assert s.props == {"KAFKA_TOPIC": "pv", "VALUE_FORMAT": "JSON", "PARTITIONS": 2, "TIMESTAMP": "viewtime"}
    t = one("CREATE TABLE users (id VARCHAR PRIMARY KEY, region STRING) WITH (kafka_topic='u');")
    assert isinstance(t, P.CreateSource) and t.kind == "TABLE" and t.columns[0].key


def test_create_table_as_select_with_join_window_and_clauses() -> None:
    text = """CREATE TABLE r WITH (kafka_topic='out') AS
      SELECT u.regionid, COUNT(*) AS n, WINDOWSTART AS ws -- comment
      FROM pageviews pv LEFT JOIN users u ON pv.userid = u.userid
      WINDOW HOPPING (SIZE 1 MINUTE, ADVANCE BY 10 SECONDS, GRACE PERIOD 2 SECONDS)
      WHERE left(pageid, 1) = 'P' AND s->city = 'x'
      GROUP BY u.regionid HAVING COUNT(*) > 1 EMIT CHANGES;"""
    s = one(text)
    assert isinstance(s, P.CreateAs) and s.kind == "TABLE" and s.props == {"KAFKA_TOPIC": "out"}
    sel = s.select
    assert sel.source.name == "PAGEVIEWS" and sel.source.alias == "pv"
    assert sel.join is not None and sel.join.kind == "LEFT" and sel.join.right.name == "USERS"
    assert [(q, c) for q, c, _ in sel.join.on] == [("pv", "userid"), ("u", "userid")]
    assert sel.window == P.WindowSpec(
        "HOPPING", 60_000, 10_000, 2_000, sel.window.tok if sel.window else None
    )
    assert [P.render(i.expr, {"WINDOWSTART": "X"}) for i in sel.items] == ["u.regionid", "COUNT(*)", "X"]
    assert [i.alias for i in sel.items] == [None, "n", "ws"]
    assert sel.where is not None and P.render(sel.where) == "left(pageid, 1) = 'P' AND s.city = 'x'"
    assert [P.render(g) for g in sel.group_by] == ["u.regionid"] and sel.emit_changes


def test_other_statements() -> None:
    assert one("SHOW streams;") == P.Show("STREAMS")
    assert one("list QUERIES;") == P.Show("QUERIES")
    assert one("DESCRIBE x EXTENDED;") == P.Describe("X", True)
    assert one("DROP TABLE IF EXISTS t DELETE TOPIC;") == P.Drop("TABLE", "T", True, True)
    assert one("TERMINATE ctas_t_1;") == P.Terminate("CTAS_T_1")
    assert one("SET 'auto.offset.reset' = 'earliest';") == P.SetProperty("auto.offset.reset", "earliest")
    assert one("INSERT INTO s (a, b) VALUES ('it''s', -2.5);") == P.Insert("S", ["a", "b"], ["it's", -2.5])
    sel = one("SELECT * FROM s WHERE x = 1 EMIT CHANGES LIMIT 3;")
    assert isinstance(sel, P.Select) and sel.items[0].star == "" and sel.limit == 3
    assert len(P.split_statements("SHOW TABLES; /* c ; */ SHOW TOPICS; -- ; \n")) == 2


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("CREATE STREAM x (a FOO) WITH (kafka_topic='t');", "line 1:20: unknown type 'FOO'"),
        ("SELECT a FROM;", "line 1:14: expected a stream or table name"),
        ("SELEC 1;", "line 1:1: unknown statement 'SELEC'"),
        ("SELECT 'abc FROM x;", "line 1:8: unterminated string"),
        ("CREATE TABLE t (a INT) WITH (kafka_topic='x');", "a table needs a PRIMARY KEY"),
        ("CREATE STREAM s (a INT PRIMARY KEY) WITH (kafka_topic='x');", "a stream has KEY columns"),
        ("CREATE STREAM s (a INT) WITH (topic='x');", "line 1:31: unknown property 'topic'"),
        ("CREATE STREAM s (a INT) WITH (kafka_topic='x', value_format='AVRO');", "'AVRO' is not supported"),
        ("CREATE TABLE t AS SELECT a FROM s EMIT CHANGES;", "needs GROUP BY"),
        ("SELECT a FROM s WINDOW TUMBLING (SIZE 3 PARSECS) GROUP BY a;", "line 1:41: expected a time unit"),
        ("SELECT a FROM s WINDOW HOPPING (SIZE 3 SECONDS) GROUP BY a;", "needs ADVANCE BY"),
        ("SELECT a FROM s FULL OUTER JOIN t ON s.a = t.a EMIT CHANGES;", "FULL joins are not supported"),
        ("SELECT a FROM s JOIN t ON s.a < t.a EMIT CHANGES;", "line 1:31: a join condition is one equality"),
        ("SELECT a FROM s EMIT FINAL;", "EMIT FINAL is not supported"),
        ("SHOW TABLES", "missing ';'"),
        ("SELECT a FROM s GROUP BY a EMIT CHANGES extra;", "line 1:41: unexpected 'extra'"),
        ("SELECT a, FROM s;", "line 1:11: expected a column or expression"),
        ("SELECT a FROM s ¤;", "unexpected character"),
    ],
)
def test_bad_statements_name_the_position(text: str, where: str) -> None:
    with pytest.raises(P.SqlError) as e:
        for toks in P.split_statements(text):
            P.parse(toks)
    assert where in str(e.value)


def test_file_runner_stops_at_a_bad_statement(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "bad.sql"
    f.write_text("SHOW STREAMS;\nCREATE STREAM s (a INT) WITH (kafka_topic='t', partitions=x);\n")
    assert main(["--file", str(f), "--state-dir", str(tmp_path / "st")]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"strom sql: {f}: Error: line 2:59: PARTITIONS must be a whole number"
    # a statement about something that does not exist: one line, exit 1, no Spark needed
    f.write_text("DESCRIBE nothing;\n")
    assert main(["--file", str(f), "--state-dir", str(tmp_path / "st")]) == 1
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("NOTHING does not exist (SHOW STREAMS; SHOW TABLES; list what does)")
    )
    assert main(["--file", str(tmp_path / "missing.sql")]) == 2


def test_shell_goes_on_after_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = iter(
        ["SELEC x;", "SET", "  'auto.offset.reset' = 'earliest';", "DESCRIBE foo;", "SHOW PROPERTIES;"]
    )

    def fake_input(prompt: str = "") -> str:
        try:
            return next(lines)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr("builtins.input", fake_input)
    assert main(["--state-dir", str(tmp_path / "st")]) == 0
    out = capsys.readouterr().out
    assert "Error: line 1:1: unknown statement 'SELEC'" in out
    assert "Successfully changed local property 'auto.offset.reset' to 'earliest'." in out
    assert "Error: FOO does not exist" in out
    assert "| auto.offset.reset | earliest |" in out
    assert "Traceback" not in out
