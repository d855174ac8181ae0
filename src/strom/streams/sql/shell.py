"""``strom sql``: a ksqlDB-shaped shell and ``--file`` runner over Spark SQL on strom topics.

    strom sql --bootstrap-server HOST:PORT [--file F] [--state-dir D] [--state-server URL] [--once]

Without ``--file``: an interactive prompt (readline history; a statement ends with ``;``, may
span lines; ``exit``/``quit`` or Ctrl-D leaves, Ctrl-C stops a push query). With ``--file``: the
file's statements in order, stopping at the first error with exit code 1; the whole file is
parsed first, so a syntax error runs nothing. Persistent queries keep running until Ctrl-C (the
shell or file runner is their server); ``--once`` runs each persistent and push query over what
is in the topics now (Spark's availableNow trigger), one after the other, then exits. On start,
the persistent queries of the catalog (``--state-dir``) resume from their checkpoints.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

from strom.streams.sql.parser import SqlError, parse, split_statements, tokenize

__all__ = ["add_parser", "main", "run"]


def _configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092", metavar="HOST:PORT[,...]")
    p.add_argument(
        "--file", "-f", metavar="FILE", help="run the statements of FILE, then keep the queries running"
    )
    p.add_argument(
        "--state-dir",
        default="strom-sql",
        metavar="DIR",
        help="catalog (metastore.json) and query checkpoints (default ./strom-sql)",
    )
    p.add_argument(
        "--state-server",
        metavar="URL",
        help="the strom streams serve instance answering pull queries (http://HOST:PORT)",
    )
    p.add_argument(
        "--once", action="store_true", help="run each query over the data there now (availableNow), then exit"
    )


def add_parser(sub: Any) -> None:
    """``strom sql`` in strom's CLI."""
    _configure(sub.add_parser("sql", help="ksqlDB-shaped SQL over strom topics on Spark (shell or --file)"))


def _err(e: BaseException) -> str:
    return f"Error: {e}"


def run(args: argparse.Namespace, spark: Any = None) -> int:
    from strom.streams.sql.engine import Engine

    stmts = []
    if args.file:
        try:
            text = Path(args.file).read_text()
        except OSError as e:
            print(f"strom sql: cannot read {args.file}: {e.strerror}", file=sys.stderr)
            return 2
        try:
            stmts = [(parse(toks), toks) for toks in split_statements(text)]
        except SqlError as e:
            print(f"strom sql: {args.file}: {_err(e)}", file=sys.stderr)
            return 1
        for stmt, toks in stmts:
            _attach_text(stmt, toks, text)
    engine = Engine(
        args.bootstrap_server,
        Path(args.state_dir),
        state_server=args.state_server,
        spark=spark,
        once=args.once,
        out=lambda line: print(line, flush=True),
    )
    try:
        try:
            engine.resume()
        except SqlError as e:
            print(f"strom sql: cannot resume the catalog's queries: {_err(e)}", file=sys.stderr)
            return 1
        if args.file:
            for stmt, _ in stmts:
                try:
                    engine.execute(stmt)
                except SqlError as e:
                    print(f"strom sql: {args.file}: {_err(e)}", file=sys.stderr)
                    return 1
            if not args.once:
                return _serve(engine)
            return 0
        return _repl(engine)
    finally:
        engine.close()


def _attach_text(stmt: Any, toks: list[Any], text: str) -> None:
    """The statement's own text (for SHOW QUERIES and resuming), from its first to last token."""
    from strom.streams.sql.parser import CreateAs

    if not isinstance(stmt, CreateAs):
        return
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    first, last = toks[0], toks[-1]
    start = offsets[first.line - 1] + first.col - 1
    end = offsets[last.line - 1] + last.col - 1
    # the last token's extent: re-tokenize from it
    end += len(text[end:].split(";", 1)[0]) if last.kind in ("STR", "QID") else len(last.text)
    stmt.text = " ".join(text[start:end].split())


def _serve(engine: Any) -> int:
    from strom.cli.spark_run import stop_on_signals

    stopping = stop_on_signals()
    print("queries running; Ctrl-C stops them (they resume from their checkpoints next time)", flush=True)
    while not stopping.is_set():
        for qid, q in list(engine.running.items()):
            if not q.isActive and q.exception() is not None:
                print(f"strom sql: query {qid} failed: {str(q.exception()).splitlines()[0]}", file=sys.stderr)
                return 1
        stopping.wait(0.5)
    return 0


def _repl(engine: Any) -> int:
    with contextlib.suppress(ImportError):  # no readline on this platform: plain input()
        import readline  # noqa: F401 - line editing and history for input()
    print(
        "strom sql: ksqlDB statements over strom topics on Spark; end each with ';', 'exit' leaves.",
        flush=True,
    )
    buf = ""
    while True:
        try:
            line = input("strom> " if not buf else "    > ")
        except EOFError:
            print()
            return 0
        except KeyboardInterrupt:
            print()
            buf = ""
            continue
        if not buf and line.strip().rstrip(";").lower() in ("exit", "quit"):
            return 0
        buf += line + "\n"
        try:
            toks = tokenize(buf)
        except SqlError as e:
            if "unterminated" in e.message:
                continue
            print(_err(e), flush=True)
            buf = ""
            continue
        if not any(t.kind == "OP" and t.text == ";" for t in toks):
            continue
        text, buf = buf, ""
        try:
            stmts = split_statements(text)
        except SqlError as e:  # text after the last ';'
            print(_err(e), flush=True)
            continue
        for toks in stmts:
            try:
                stmt = parse(toks)
                _attach_text(stmt, toks, text)
                engine.execute(stmt)
            except SqlError as e:
                print(_err(e), flush=True)
                break
            except KeyboardInterrupt:
                print("interrupted", flush=True)
                break


def main(argv: list[str] | None = None, spark: Any = None) -> int:
    p = argparse.ArgumentParser(
        prog="strom sql", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    _configure(p)
    return run(p.parse_args(argv), spark)


if __name__ == "__main__":
    sys.exit(main())
