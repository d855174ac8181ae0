"""The ksqlDB statements of ``strom sql``, parsed without Spark.

Only what is ksqlDB's own is parsed here: the statement shapes (``CREATE STREAM/TABLE``, ``... AS
SELECT``, ``SHOW``, ``DESCRIBE``, ``DROP``, ``TERMINATE``, ``SET``/``UNSET``), column lists with
ksqlDB's types (``KEY``/``PRIMARY KEY``), ``WITH (...)`` properties, the ``FROM ... [LEFT] JOIN
... ON a = b`` of a query, ``WINDOW TUMBLING/HOPPING/SESSION``, ``PARTITION BY``, ``EMIT
CHANGES`` and ``LIMIT``. Expressions (projections, ``WHERE``, ``GROUP BY``, ``HAVING``) stay token
lists that :func:`render` turns into Spark SQL text (ksqlDB's ``->`` struct access becomes ``.``,
its ``=>`` lambdas Spark's ``->``, quoted identifiers back-quoted).

Error contract: every malformed statement raises :class:`SqlError` with the 1-based line and
column of the offending token; nothing here raises anything else on any input text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Column",
    "CreateAs",
    "CreateSource",
    "Describe",
    "Drop",
    "Insert",
    "JoinSpec",
    "Select",
    "SelectItem",
    "SetProperty",
    "Show",
    "SourceRef",
    "SqlError",
    "Statement",
    "Terminate",
    "Token",
    "WindowSpec",
    "parse",
    "parse_duration",
    "render",
    "spark_type",
    "split_statements",
    "tokenize",
]


class SqlError(ValueError):
    """A statement strom sql cannot run; ``line``/``col`` are 1-based (0 when unknown)."""

    def __init__(self, message: str, line: int = 0, col: int = 0) -> None:
        super().__init__(message)
        self.message, self.line, self.col = message, line, col

    def __str__(self) -> str:
        if self.line:
            return f"line {self.line}:{self.col}: {self.message}"
        return self.message


@dataclass(frozen=True)
class Token:
    kind: str  # WORD, QID (quoted identifier), STR, NUM, OP, END
    text: str  # a WORD as written; STR/QID unquoted
    line: int
    col: int

    @property
    def up(self) -> str:
        return self.text.upper() if self.kind == "WORD" else ""

    def err(self, message: str) -> SqlError:
        return SqlError(message, self.line, self.col)

    def show(self) -> str:
        if self.kind == "END":
            return "end of statement"
        if self.kind == "STR":
            return f"'{self.text}'"
        if self.kind == "QID":
            return f"`{self.text}`"
        return f"'{self.text}'"


_OPS2 = ("<=", ">=", "<>", "!=", "||", "->", "=>", "::")
_OPS1 = "()[],;.=<>+-*/%:?{}&|^~!"
_NUM = re.compile(r"(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?)[a-zA-Z]*")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$@]*")


def tokenize(text: str) -> list[Token]:
    """Tokens of ``text`` (``--`` and ``/* */`` comments skipped), ``;`` included."""
    out: list[Token] = []
    i, line, lstart, n = 0, 1, 0, len(text)
    while i < n:
        c = text[i]
        col = i - lstart + 1
        if c == "\n":
            line, lstart, i = line + 1, i + 1, i + 1
            continue
        if c.isspace():
            i += 1
            continue
        if text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise SqlError("unterminated /* comment", line, col)
            for k in range(i, j):
                if text[k] == "\n":
                    line, lstart = line + 1, k + 1
            i = j + 2
            continue
        if c in "'\"`":
            # 'string' ('' escapes a quote); "identifier" and `identifier` keep their case
            j, buf = i + 1, []
            while True:
                if j >= n:
                    what = "string" if c == "'" else "quoted identifier"
                    raise SqlError(f"unterminated {what}", line, col)
                if text[j] == c:
                    if j + 1 < n and text[j + 1] == c:
                        buf.append(c)
                        j += 2
                        continue
                    break
                if text[j] == "\n":
                    line, lstart = line + 1, j + 1
                buf.append(text[j])
                j += 1
            out.append(Token("STR" if c == "'" else "QID", "".join(buf), line, col))
            i = j + 1
            continue
        m = _NUM.match(text, i) if c.isdigit() or (c == "." and i + 1 < n and text[i + 1].isdigit()) else None
        if m:
            out.append(Token("NUM", m.group(0), line, col))
            i = m.end()
            continue
        m = _WORD.match(text, i)
        if m:
            out.append(Token("WORD", m.group(0), line, col))
            i = m.end()
            continue
        if text[i : i + 2] in _OPS2:
            out.append(Token("OP", text[i : i + 2], line, col))
            i += 2
            continue
        if c in _OPS1:
            out.append(Token("OP", c, line, col))
            i += 1
            continue
        raise SqlError(f"unexpected character {c!r}", line, col)
    return out


def split_statements(text: str) -> list[list[Token]]:
    """The statements of ``text``, each a token list without its ``;``. A last statement without
    ``;`` is an error (as in ksqlDB's CLI, which waits for it)."""
    stmts: list[list[Token]] = []
    cur: list[Token] = []
    for t in tokenize(text):
        if t.kind == "OP" and t.text == ";":
            if cur:
                stmts.append(cur)
            cur = []
        else:
            cur.append(t)
    if cur:
        raise cur[-1].err("statement not terminated: missing ';'")
    return stmts


# -- statements ------------------------------------------------------------------------------


@dataclass
class Column:
    name: str
    type_text: str  # as ksqlDB shows it (VARCHAR, ARRAY<INT>, ...)
    spark: str  # the Spark DDL type
    key: bool = False


@dataclass
class SourceRef:
    name: str  # upper-cased unless quoted
    alias: str  # as written (the name when no alias)
    tok: Token


@dataclass
class JoinSpec:
    kind: str  # INNER | LEFT
    right: SourceRef
    on: tuple[tuple[str | None, str, Token], tuple[str | None, str, Token]]  # (qualifier, column)
    within_ms: tuple[int, int] | None = None
    grace_ms: int = 0


@dataclass
class WindowSpec:
    kind: str  # TUMBLING | HOPPING | SESSION
    size_ms: int
    advance_ms: int = 0
    grace_ms: int | None = None
    tok: Token | None = None


@dataclass
class SelectItem:
    expr: list[Token]
    alias: str | None
    star: str | None = None  # "" for *, the qualifier for q.*


@dataclass
class Select:
    items: list[SelectItem]
    source: SourceRef
    join: JoinSpec | None = None
    window: WindowSpec | None = None
    where: list[Token] | None = None
    group_by: list[list[Token]] = field(default_factory=list)
    having: list[Token] | None = None
    partition_by: list[Token] | None = None
    emit_changes: bool = False
    limit: int | None = None
    tok: Token | None = None


@dataclass
class CreateSource:
    kind: str  # STREAM | TABLE
    name: str
    columns: list[Column]
    props: dict[str, Any]
    or_replace: bool = False
    if_not_exists: bool = False


@dataclass
class CreateAs:
    kind: str
    name: str
    props: dict[str, Any]
    select: Select
    text: str
    or_replace: bool = False
    if_not_exists: bool = False


@dataclass
class Show:
    what: str  # STREAMS TABLES TOPICS QUERIES PROPERTIES
    extended: bool = False


@dataclass
class Describe:
    name: str
    extended: bool = False


@dataclass
class Drop:
    kind: str
    name: str
    if_exists: bool = False
    delete_topic: bool = False


@dataclass
class Terminate:
    query_id: str  # "ALL" for every query


@dataclass
class SetProperty:
    name: str
    value: str | None  # None: UNSET


@dataclass
class Insert:
    name: str
    columns: list[str] | None
    values: list[Any]


Statement = CreateSource | CreateAs | Select | Show | Describe | Drop | Terminate | SetProperty | Insert

SOURCE_PROPS = {
    "KAFKA_TOPIC",
    "VALUE_FORMAT",
    "KEY_FORMAT",
    "FORMAT",
    "PARTITIONS",
    "REPLICAS",
    "TIMESTAMP",
    "TIMESTAMP_FORMAT",
    "VALUE_DELIMITER",
    "RETENTION_MS",
    "CLEANUP_POLICY",
}
FORMATS = ("JSON", "KAFKA", "DELIMITED")

_UNITS = {
    "MILLISECOND": 1,
    "MILLISECONDS": 1,
    "SECOND": 1000,
    "SECONDS": 1000,
    "MINUTE": 60_000,
    "MINUTES": 60_000,
    "HOUR": 3_600_000,
    "HOURS": 3_600_000,
    "DAY": 86_400_000,
    "DAYS": 86_400_000,
}

_SIMPLE_TYPES = {
    "VARCHAR": "string",
    "STRING": "string",
    "INT": "int",
    "INTEGER": "int",
    "BIGINT": "bigint",
    "DOUBLE": "double",
    "BOOLEAN": "boolean",
    "TIMESTAMP": "timestamp",
    "DATE": "date",
    "BYTES": "binary",
    "TIME": "string",
}


def _ident_text(t: Token) -> str:
    """A name as ksqlDB stores it: upper-cased unless quoted."""
    return t.text if t.kind == "QID" else t.text.upper()


class _P:
    """A cursor over one statement's tokens."""

    def __init__(self, toks: list[Token]) -> None:
        self.toks = toks
        last = toks[-1] if toks else Token("END", "", 1, 1)
        self.end = Token(
            "END", "", last.line, last.col + len(last.text) + (2 if last.kind in ("STR", "QID") else 0)
        )
        self.i = 0

    def peek(self, k: int = 0) -> Token:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else self.end

    def next(self) -> Token:
        t = self.peek()
        self.i += 1
        return t

    def at(self, *words: str) -> bool:
        return all(self.peek(k).up == w for k, w in enumerate(words))

    def accept(self, *words: str) -> bool:
        if self.at(*words):
            self.i += len(words)
            return True
        return False

    def expect(self, word: str) -> Token:
        t = self.next()
        if t.up != word:
            raise t.err(f"expected {word}, found {t.show()}")
        return t

    def expect_op(self, op: str) -> Token:
        t = self.next()
        if t.kind != "OP" or t.text != op:
            raise t.err(f"expected '{op}', found {t.show()}")
        return t

    def is_op(self, op: str, k: int = 0) -> bool:
        t = self.peek(k)
        return t.kind == "OP" and t.text == op

    def ident(self, what: str = "a name") -> Token:
        t = self.next()
        if t.kind not in ("WORD", "QID"):
            raise t.err(f"expected {what}, found {t.show()}")
        return t

    def done(self) -> None:
        t = self.peek()
        if t.kind != "END":
            raise t.err(f"unexpected {t.show()}")

    def number(self) -> int:
        t = self.next()
        if t.kind != "NUM" or not t.text.isdigit():
            raise t.err(f"expected a whole number, found {t.show()}")
        return int(t.text)


def parse_duration(p: _P) -> int:
    """``n UNIT`` in milliseconds."""
    n = p.number()
    u = p.next()
    if u.up not in _UNITS:
        raise u.err(f"expected a time unit (MILLISECONDS, SECONDS, MINUTES, HOURS, DAYS), found {u.show()}")
    return n * _UNITS[u.up]


def _type(p: _P) -> tuple[str, str]:
    """(ksqlDB type text, Spark DDL type)."""
    t = p.next()
    u = t.up
    if u in _SIMPLE_TYPES:
        return u, _SIMPLE_TYPES[u]
    if u == "DECIMAL":
        p.expect_op("(")
        prec = p.number()
        p.expect_op(",")
        scale = p.number()
        p.expect_op(")")
        if not 1 <= prec <= 38 or scale > prec:
            raise t.err(f"DECIMAL({prec}, {scale}): precision 1..38 and scale <= precision")
        return f"DECIMAL({prec}, {scale})", f"decimal({prec},{scale})"
    if u == "ARRAY":
        p.expect_op("<")
        k, s = _type(p)
        p.expect_op(">")
        return f"ARRAY<{k}>", f"array<{s}>"
    if u == "MAP":
        p.expect_op("<")
        k1, s1 = _type(p)
        p.expect_op(",")
        k2, s2 = _type(p)
        p.expect_op(">")
        return f"MAP<{k1}, {k2}>", f"map<{s1},{s2}>"
    if u == "STRUCT":
        p.expect_op("<")
        fields_k, fields_s = [], []
        while True:
            f = p.ident("a field name")
            k, s = _type(p)
            fields_k.append(f"{f.text} {k}")
            fields_s.append(f"`{f.text}`:{s}")
            if p.is_op(">"):
                p.next()
                break
            p.expect_op(",")
        return f"STRUCT<{', '.join(fields_k)}>", f"struct<{','.join(fields_s)}>"
    raise t.err(
        f"unknown type {t.show()}: one of VARCHAR, STRING, INT, BIGINT, DOUBLE, BOOLEAN, DECIMAL(p, s), "
        "TIMESTAMP, DATE, BYTES, ARRAY<T>, MAP<K, V>, STRUCT<name T, ...>"
    )


def spark_type(type_text: str) -> str:
    """The Spark DDL type of a ksqlDB type written as text (``ARRAY<INT>`` -> ``array<int>``)."""
    p = _P(tokenize(type_text))
    _, s = _type(p)
    p.done()
    return s


def _props(p: _P) -> dict[str, Any]:
    p.expect_op("(")
    out: dict[str, Any] = {}
    while True:
        k = p.ident("a property name")
        name = k.text.upper()
        if name not in SOURCE_PROPS:
            raise k.err(f"unknown property {k.text!r}: one of {', '.join(sorted(SOURCE_PROPS))}")
        p.expect_op("=")
        v = p.next()
        if v.kind == "STR":
            val: Any = v.text
        elif v.kind == "NUM" and v.text.isdigit():
            val = int(v.text)
        elif v.kind in ("WORD", "QID"):
            val = v.text
        else:
            raise v.err(f"expected a value for {name}, found {v.show()}")
        if name in ("PARTITIONS", "REPLICAS", "RETENTION_MS") and not isinstance(val, int):
            raise v.err(f"{name} must be a whole number")
        if name in ("VALUE_FORMAT", "KEY_FORMAT", "FORMAT"):
            val = str(val).upper()
            if val not in FORMATS:
                raise v.err(f"{name} {val!r} is not supported: one of {', '.join(FORMATS)}")
        out[name] = val
        if p.is_op(")"):
            p.next()
            return out
        p.expect_op(",")


def _expr_until(p: _P, stops: set[str], what: str) -> list[Token]:
    """Tokens of an expression up to a depth-0 stop word, ``,`` or the end."""
    out: list[Token] = []
    depth = 0
    while True:
        t = p.peek()
        if t.kind == "END":
            break
        if depth == 0 and (t.up in stops or (t.kind == "OP" and t.text in (",", ")"))):
            if t.up in ("LEFT", "INNER", "FULL") and p.peek(1).up not in ("JOIN", "OUTER"):
                pass  # LEFT(...) the function
            else:
                break
        if t.kind == "OP" and t.text in ("(", "["):
            depth += 1
        elif t.kind == "OP" and t.text in (")", "]"):
            depth -= 1
        out.append(p.next())
    if not out:
        raise p.peek().err(f"expected {what}, found {p.peek().show()}")
    return out


_CLAUSES = {
    "FROM",
    "WINDOW",
    "WHERE",
    "GROUP",
    "HAVING",
    "PARTITION",
    "EMIT",
    "LIMIT",
    "JOIN",
    "LEFT",
    "INNER",
    "FULL",
    "AS",
    "ON",
    "WITHIN",
}


def _source_ref(p: _P) -> SourceRef:
    t = p.ident("a stream or table name")
    alias = t.text
    if p.accept("AS"):
        alias = p.ident("an alias").text
    elif p.peek().kind in ("WORD", "QID") and p.peek().up not in _CLAUSES:
        alias = p.next().text
    return SourceRef(_ident_text(t), alias, t)


def _col_ref(p: _P) -> tuple[str | None, str, Token]:
    a = p.ident("a column")
    if p.is_op("."):
        p.next()
        b = p.ident("a column")
        return a.text, b.text, a
    return None, a.text, a


def _select(p: _P) -> Select:
    start = p.expect("SELECT")
    items: list[SelectItem] = []
    while True:
        t = p.peek()
        if t.kind == "OP" and t.text == "*":
            p.next()
            items.append(SelectItem([t], None, ""))
        elif t.kind in ("WORD", "QID") and p.is_op(".", 1) and p.is_op("*", 2):
            p.i += 3
            items.append(SelectItem([t], None, t.text))
        else:
            expr = _expr_until(p, {"FROM", "AS"}, "a column or expression")
            alias = None
            if p.accept("AS"):
                alias = p.ident("an alias").text
            elif p.peek().kind in ("WORD", "QID") and p.peek().up not in _CLAUSES:
                alias = p.next().text
            items.append(SelectItem(expr, alias))
        if p.is_op(","):
            p.next()
            continue
        break
    if not p.at("FROM"):
        raise p.peek().err(f"expected FROM, found {p.peek().show()}")
    p.next()
    sel = Select(items, _source_ref(p), tok=start)
    kind = None
    jt = p.peek()
    if p.accept("LEFT", "OUTER", "JOIN") or p.accept("LEFT", "JOIN"):
        kind = "LEFT"
    elif p.accept("INNER", "JOIN") or p.accept("JOIN"):
        kind = "INNER"
    elif p.at("FULL") or p.at("RIGHT"):
        raise jt.err(f"{jt.text.upper()} joins are not supported (INNER and LEFT are)")
    if kind:
        right = _source_ref(p)
        within = None
        grace = 0
        if p.accept("WITHIN"):
            if p.is_op("("):
                p.next()
                before = parse_duration(p)
                p.expect_op(",")
                after = parse_duration(p)
                p.expect_op(")")
                within = (before, after)
            else:
                d = parse_duration(p)
                within = (d, d)
            if p.accept("GRACE", "PERIOD"):
                grace = parse_duration(p)
        p.expect("ON")
        left_col = _col_ref(p)
        eq = p.next()
        if eq.kind != "OP" or eq.text != "=":
            raise eq.err(f"a join condition is one equality of two columns (a.x = b.y); found {eq.show()}")
        right_col = _col_ref(p)
        sel.join = JoinSpec(kind, right, (left_col, right_col), within, grace)
        if p.at("LEFT") or p.at("JOIN") or p.at("INNER"):
            raise p.peek().err(
                "one JOIN per query is supported: write the first join to a stream (CREATE STREAM ... AS SELECT) and join that"  # noqa: E501
            )
    if p.at("WINDOW"):
        wt = p.next()
        sel.window = _window(p, wt)
    if p.accept("WHERE"):
        sel.where = _expr_until(p, {"GROUP", "HAVING", "PARTITION", "EMIT", "LIMIT"}, "a condition")
    if p.accept("GROUP"):
        p.expect("BY")
        while True:
            sel.group_by.append(
                _expr_until(p, {"HAVING", "PARTITION", "EMIT", "LIMIT"}, "a grouping expression")
            )
            if not p.is_op(","):
                break
            p.next()
    if p.accept("HAVING"):
        sel.having = _expr_until(p, {"PARTITION", "EMIT", "LIMIT"}, "a condition")
    if p.accept("PARTITION"):
        p.expect("BY")
        sel.partition_by = _expr_until(p, {"EMIT", "LIMIT"}, "a partitioning expression")
    if p.accept("EMIT"):
        t = p.next()
        if t.up == "FINAL":
            raise t.err("EMIT FINAL is not supported: use EMIT CHANGES")
        if t.up != "CHANGES":
            raise t.err(f"expected CHANGES, found {t.show()}")
        sel.emit_changes = True
    if p.accept("LIMIT"):
        sel.limit = p.number()
    if sel.window is not None and not sel.group_by:
        raise (sel.window.tok or start).err("a WINDOW needs a GROUP BY")
    if sel.partition_by is not None and sel.group_by:
        raise start.err("PARTITION BY and GROUP BY cannot be combined")
    return sel


def _window(p: _P, wt: Token) -> WindowSpec:
    kind = p.next()
    if kind.up not in ("TUMBLING", "HOPPING", "SESSION"):
        raise kind.err(f"expected TUMBLING, HOPPING or SESSION, found {kind.show()}")
    p.expect_op("(")
    w = WindowSpec(kind.up, 0, tok=wt)
    if kind.up == "SESSION":
        w.size_ms = parse_duration(p)
    else:
        p.expect("SIZE")
        w.size_ms = parse_duration(p)
    while p.is_op(","):
        p.next()
        if p.accept("ADVANCE", "BY"):
            if kind.up != "HOPPING":
                raise p.peek(-1).err("ADVANCE BY belongs to a HOPPING window")
            w.advance_ms = parse_duration(p)
        elif p.accept("RETENTION"):
            parse_duration(p)  # the state store's retention: Spark keeps window state until the watermark
        elif p.accept("GRACE", "PERIOD"):
            w.grace_ms = parse_duration(p)
        else:
            raise p.peek().err(f"expected ADVANCE BY, RETENTION or GRACE PERIOD, found {p.peek().show()}")
    p.expect_op(")")
    if w.size_ms <= 0:
        raise kind.err("the window size must be positive")
    if kind.up == "HOPPING":
        if not w.advance_ms:
            raise kind.err("a HOPPING window needs ADVANCE BY")
        if w.advance_ms > w.size_ms:
            raise kind.err("ADVANCE BY must not exceed SIZE")
    return w


def _columns(p: _P, kind: str) -> list[Column]:
    p.expect_op("(")
    cols: list[Column] = []
    seen: set[str] = set()
    while True:
        n = p.ident("a column name")
        type_text, spark = _type(p)
        key = False
        if p.accept("PRIMARY", "KEY"):
            if kind == "STREAM":
                raise p.peek(-2).err("a stream has KEY columns, not PRIMARY KEY")
            key = True
        elif p.at("KEY"):
            kt = p.next()
            if kind == "TABLE":
                raise kt.err("a table's key column is declared PRIMARY KEY")
            key = True
        if n.text.upper() in seen:
            raise n.err(f"duplicate column {n.text}")
        seen.add(n.text.upper())
        if n.text.upper() in ("ROWTIME", "ROWPARTITION", "ROWOFFSET", "WINDOWSTART", "WINDOWEND"):
            raise n.err(f"{n.text.upper()} is a reserved pseudo column")
        cols.append(Column(n.text, type_text, spark, key))
        if p.is_op(")"):
            p.next()
            break
        p.expect_op(",")
    if kind == "TABLE" and not any(c.key for c in cols):
        raise p.peek().err("a table needs a PRIMARY KEY column")
    if sum(c.key for c in cols) > 1:
        raise p.peek().err("one key column is supported")
    return cols


def _literal(p: _P) -> Any:
    t = p.next()
    neg = False
    if t.kind == "OP" and t.text == "-":
        neg, t = True, p.next()
    if t.kind == "STR" and not neg:
        return t.text
    if t.kind == "NUM":
        try:
            v: Any = int(t.text)
        except ValueError:
            try:
                v = float(t.text)
            except ValueError:
                raise t.err(f"bad number {t.text}") from None
        return -v if neg else v
    if t.up in ("TRUE", "FALSE") and not neg:
        return t.up == "TRUE"
    if t.up == "NULL" and not neg:
        return None
    raise t.err(f"expected a literal value, found {t.show()}")


def parse(toks: list[Token], text: str = "") -> Statement:
    """One statement (its tokens, without ``;``)."""
    if not toks:
        raise SqlError("empty statement")
    p = _P(toks)
    first = p.peek()
    w = first.up
    stmt: Statement
    if w == "CREATE":
        p.next()
        or_replace = p.accept("OR", "REPLACE")
        kt = p.next()
        if kt.up not in ("STREAM", "TABLE"):
            raise kt.err(f"expected STREAM or TABLE, found {kt.show()}")
        if_not_exists = p.accept("IF", "NOT", "EXISTS")
        name = _ident_text(p.ident("a stream or table name"))
        if p.is_op("("):
            cols = _columns(p, kt.up)
            if not p.accept("WITH"):
                raise p.peek().err(
                    f"expected WITH (KAFKA_TOPIC='...', VALUE_FORMAT='...'), found {p.peek().show()}"
                )
            props = _props(p)
            if "KAFKA_TOPIC" not in props:
                raise kt.err("WITH needs KAFKA_TOPIC")
            stmt = CreateSource(kt.up, name, cols, props, or_replace, if_not_exists)
        else:
            props = _props(p) if p.accept("WITH") else {}
            if not p.accept("AS"):
                raise p.peek().err(f"expected '(' (columns) or AS SELECT, found {p.peek().show()}")
            sel = _select(p)
            if sel.limit is not None:
                raise (
                    sel.tok.err("LIMIT is for push queries, not CREATE ... AS SELECT")
                    if sel.tok
                    else SqlError("LIMIT")
                )
            if kt.up == "TABLE" and not sel.group_by:
                raise kt.err("CREATE TABLE AS SELECT needs GROUP BY (a table is an aggregation here)")
            if kt.up == "STREAM" and sel.group_by:
                raise kt.err("an aggregation (GROUP BY) makes a TABLE: CREATE TABLE ... AS SELECT")
            stmt = CreateAs(kt.up, name, props, sel, text, or_replace, if_not_exists)
    elif w == "SELECT":
        stmt = _select(p)
    elif w in ("SHOW", "LIST"):
        p.next()
        t = p.next()
        what = {
            "STREAMS": "STREAMS",
            "TABLES": "TABLES",
            "TOPICS": "TOPICS",
            "QUERIES": "QUERIES",
            "PROPERTIES": "PROPERTIES",
        }.get(t.up)
        if what is None:
            raise t.err(f"expected STREAMS, TABLES, TOPICS, QUERIES or PROPERTIES, found {t.show()}")
        stmt = Show(what, p.accept("EXTENDED"))
    elif w == "DESCRIBE":
        p.next()
        name = _ident_text(p.ident("a stream or table name"))
        stmt = Describe(name, p.accept("EXTENDED"))
    elif w == "DROP":
        p.next()
        kt = p.next()
        if kt.up not in ("STREAM", "TABLE"):
            raise kt.err(f"expected STREAM or TABLE, found {kt.show()}")
        if_exists = p.accept("IF", "EXISTS")
        name = _ident_text(p.ident("a stream or table name"))
        stmt = Drop(kt.up, name, if_exists, p.accept("DELETE", "TOPIC"))
    elif w == "TERMINATE":
        p.next()
        stmt = Terminate(_ident_text(p.ident("a query id")))
    elif w in ("SET", "UNSET"):
        p.next()
        k = p.next()
        if k.kind != "STR":
            raise k.err(f"expected a quoted property name ('auto.offset.reset'), found {k.show()}")
        if w == "SET":
            p.expect_op("=")
            v = p.next()
            if v.kind != "STR":
                raise v.err(f"expected a quoted value, found {v.show()}")
            stmt = SetProperty(k.text, v.text)
        else:
            stmt = SetProperty(k.text, None)
    elif w == "INSERT":
        p.next()
        p.expect("INTO")
        name = _ident_text(p.ident("a stream or table name"))
        names: list[str] | None = None
        if p.is_op("("):
            p.next()
            names = []
            while True:
                names.append(p.ident("a column").text)
                if p.is_op(")"):
                    p.next()
                    break
                p.expect_op(",")
        p.expect("VALUES")
        p.expect_op("(")
        vals = []
        while True:
            vals.append(_literal(p))
            if p.is_op(")"):
                p.next()
                break
            p.expect_op(",")
        if names is not None and len(names) != len(vals):
            raise first.err(f"{len(names)} columns but {len(vals)} values")
        stmt = Insert(name, names, vals)
    else:
        raise first.err(
            f"unknown statement {first.show()}: CREATE, SELECT, INSERT, SHOW, DESCRIBE, DROP, TERMINATE, SET, UNSET"  # noqa: E501
        )
    p.done()
    return stmt


def render(toks: list[Token], replace: dict[str, str] | None = None) -> str:
    """Spark SQL text of an expression's tokens; ``replace`` maps upper-cased bare words (not
    followed by ``(``) to other text (``WINDOWSTART`` ...)."""
    out: list[str] = []
    for i, t in enumerate(toks):
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        prev = toks[i - 1] if i else None
        if t.kind == "STR":
            s = t.text.replace("\\", "\\\\").replace("'", "\\'")
            out.append(f"'{s}'")
        elif t.kind == "QID":
            out.append("`" + t.text.replace("`", "``") + "`")
        elif t.kind == "OP" and t.text == "->":
            out.append(".")
        elif t.kind == "OP" and t.text == "=>":
            out.append("->")
        elif (
            t.kind == "WORD"
            and replace
            and t.up in replace
            and not (nxt is not None and nxt.kind == "OP" and nxt.text == "(")
            and not (prev is not None and prev.kind == "OP" and prev.text in (".", "->"))
        ):
            out.append(replace[t.up])
        else:
            out.append(t.text)
    text = ""
    for i, piece in enumerate(out):
        t = toks[i]
        glue = i > 0 and not (
            (t.kind == "OP" and t.text in (".", ")", ",", "]", "->"))
            or (toks[i - 1].kind == "OP" and toks[i - 1].text in (".", "(", "[", "->"))
            or (t.kind == "OP" and t.text in ("(", "[") and toks[i - 1].kind == "WORD")
        )
        text += (" " if glue else "") + piece
    return text
