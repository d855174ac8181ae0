"""Where ``strom sql`` keeps its catalog: streams, tables, persistent queries and ``SET``
properties, in ``<state-dir>/metastore.json``.

Why a file in the state directory and not a command topic (ksqlDB's
``_confluent-ksql-<service>_command_topic``): the persistent queries' Spark checkpoints live in
the same directory (``<state-dir>/queries/<QUERY_ID>``) and a query can only resume from its
checkpoint, so the catalog and the checkpoints belong together — a command topic read by a shell
on another machine would name queries whose state it does not have. The file is rewritten
atomically (temp file + rename) after every change, so a crash leaves the old or the new
catalog, never half of one.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Metastore", "QueryInfo", "SourceInfo"]


@dataclass
class SourceInfo:
    kind: str  # STREAM | TABLE
    name: str
    topic: str
    key_format: str
    value_format: str
    columns: list[dict[str, Any]]  # {name, type, spark, key}
    timestamp: str | None = None
    timestamp_format: str | None = None
    delimiter: str = ","
    window: dict[str, Any] | None = None  # {kind, size_ms} of a windowed table's keys
    query: str | None = None  # the persistent query writing it

    @property
    def key_column(self) -> dict[str, Any] | None:
        return next((c for c in self.columns if c["key"]), None)

    @property
    def value_columns(self) -> list[dict[str, Any]]:
        return [c for c in self.columns if not c["key"]]


@dataclass
class QueryInfo:
    id: str
    sql: str
    sink: str
    sources: list[str]
    state: str = "RUNNING"  # RUNNING | ERROR


@dataclass
class Metastore:
    path: Path
    sources: dict[str, SourceInfo] = field(default_factory=dict)
    queries: dict[str, QueryInfo] = field(default_factory=dict)
    props: dict[str, str] = field(default_factory=dict)
    next_query: int = 1

    @classmethod
    def load(cls, state_dir: Path) -> Metastore:
        path = state_dir / "metastore.json"
        m = cls(path)
        if path.exists():
            d = json.loads(path.read_text())
            m.sources = {k: SourceInfo(**v) for k, v in d.get("sources", {}).items()}
            m.queries = {k: QueryInfo(**v) for k, v in d.get("queries", {}).items()}
            m.props = dict(d.get("props", {}))
            m.next_query = int(d.get("next_query", 1))
        return m

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        d = {
            "sources": {k: asdict(v) for k, v in self.sources.items()},
            "queries": {k: asdict(v) for k, v in self.queries.items()},
            "props": self.props,
            "next_query": self.next_query,
        }
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(d, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
