"""Avro schema resolution (the Avro specification's rules), used for compatibility checks.

``can_read(reader, writer)`` answers whether data written with ``writer`` can be read with
``reader``: the question Confluent's BACKWARD (reader = new schema) and FORWARD (reader = old
schema) levels ask. Schemas are the parsed JSON form (dicts, lists, strings), with named types
referenced by name; ``names`` maps full names to their definitions (see :func:`collect_names`).
Logical types do not change resolution (their underlying type does), as in Confluent's checker.
"""

from __future__ import annotations

from typing import Any

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "error", "enum", "fixed"})

# writer type -> reader types it is promoted to (the spec's "promotions")
_PROMOTIONS: dict[str, frozenset[str]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}


def _fullname(name: str, namespace: str | None) -> str:
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


def collect_names(schema: Any, names: dict[str, Any], namespace: str | None = None) -> None:
    """Adds every named type defined in ``schema`` to ``names`` (full name -> definition)."""
    if isinstance(schema, list):
        for branch in schema:
            collect_names(branch, names, namespace)
        return
    if not isinstance(schema, dict):
        return
    kind = schema.get("type")
    if kind in NAMED:
        full = _fullname(str(schema["name"]), schema.get("namespace", namespace))
        ns = full.rpartition(".")[0] or None
        names[full] = dict(schema, _fullname=full, _namespace=ns)
        if kind in ("record", "error"):
            for field in schema.get("fields", []):
                collect_names(field.get("type"), names, ns)
    elif kind == "array":
        collect_names(schema.get("items"), names, namespace)
    elif kind == "map":
        collect_names(schema.get("values"), names, namespace)
    elif isinstance(kind, dict | list):
        collect_names(kind, names, namespace)


class _Resolver:
    def __init__(self, reader_names: dict[str, Any], writer_names: dict[str, Any]) -> None:
        self.reader_names = reader_names
        self.writer_names = writer_names
        self.assumed: set[tuple[str, str]] = set()

    @staticmethod
    def _deref(schema: Any, names: dict[str, Any], namespace: str | None) -> tuple[Any, str | None]:
        """Returns (definition, namespace in force inside it)."""
        while True:
            if isinstance(schema, str):
                if schema in PRIMITIVES:
                    return schema, namespace
                full = _fullname(schema, namespace)
                found = names.get(full, names.get(schema))
                if found is None:
                    raise ValueError(f"unknown type {schema!r}")
                return found, found.get("_namespace")
            if isinstance(schema, dict):
                kind = schema.get("type")
                if kind in PRIMITIVES:
                    return kind, namespace
                if kind in NAMED:
                    full = _fullname(str(schema["name"]), schema.get("namespace", namespace))
                    return names.get(full, dict(schema, _fullname=full)), full.rpartition(".")[0] or None
                if isinstance(kind, dict | list | str) and kind not in ("array", "map"):
                    schema = kind
                    continue
            return schema, namespace

    def check(self, reader: Any, writer: Any, rns: str | None, wns: str | None, path: str) -> list[str]:
        r, rns = self._deref(reader, self.reader_names, rns)
        w, wns = self._deref(writer, self.writer_names, wns)
        if isinstance(w, list):  # every writer branch must be readable
            problems: list[str] = []
            for branch in w:
                problems += self.check(r, branch, rns, wns, path)
            return problems
        if isinstance(r, list):
            for branch in r:
                if not self.check(branch, w, rns, wns, path):
                    return []
            return [f"{path}: reader union lacks a branch for writer type {_kind(w)}"]
        rk, wk = _kind(r), _kind(w)
        if isinstance(r, str) and isinstance(w, str):
            if rk == wk or rk in _PROMOTIONS.get(wk, frozenset()):
                return []
            return [f"{path}: type mismatch, reader {rk} cannot read writer {wk}"]
        if rk != wk and not ({rk, wk} <= {"record", "error"}):
            return [f"{path}: type mismatch, reader {rk} cannot read writer {wk}"]
        if rk in NAMED:
            rname, wname = r["_fullname"], w["_fullname"]
            if not _names_match(r, w):
                return [f"{path}: name mismatch, reader {rname} vs writer {wname}"]
            if (rname, wname) in self.assumed:
                return []
            self.assumed.add((rname, wname))
        if rk in ("record", "error"):
            return self._record(r, w, rns, wns, path)
        if rk == "enum":
            missing = [s for s in w.get("symbols", []) if s not in r.get("symbols", [])]
            if missing and "default" not in r:
                return [f"{path}: reader enum {r['_fullname']} lacks symbols {missing}"]
            return []
        if rk == "fixed":
            if r.get("size") != w.get("size"):
                return [f"{path}: fixed size {w.get('size')} read as {r.get('size')}"]
            return []
        if rk == "array":
            return self.check(r["items"], w["items"], rns, wns, f"{path}/items")
        if rk == "map":
            return self.check(r["values"], w["values"], rns, wns, f"{path}/values")
        return [f"{path}: unsupported type {rk}"]

    def _record(self, r: dict[str, Any], w: dict[str, Any], rns: str | None, wns: str | None,
                path: str) -> list[str]:
        problems: list[str] = []
        wfields = {f["name"]: f for f in w.get("fields", [])}
        for rf in r.get("fields", []):
            candidates = [rf["name"], *rf.get("aliases", [])]
            wf = next((wfields[n] for n in candidates if n in wfields), None)
            fpath = f"{path}/fields/{rf['name']}"
            if wf is None:
                if "default" not in rf:
                    problems.append(f"{fpath}: reader field {rf['name']!r} has no default "
                                    "and is missing from the writer")
                continue
            problems += self.check(rf["type"], wf["type"], rns, wns, fpath)
        return problems


def _kind(s: Any) -> str:
    if isinstance(s, str):
        return s
    if isinstance(s, list):
        return "union"
    return str(s.get("type"))


def _names_match(r: dict[str, Any], w: dict[str, Any]) -> bool:
    rname, wname = r["_fullname"], w["_fullname"]
    if rname == wname or rname.rpartition(".")[2] == wname.rpartition(".")[2]:
        return True
    aliases = {_fullname(a, r.get("_namespace")) for a in r.get("aliases", [])}
    return wname in aliases


def can_read(reader: Any, writer: Any, reader_names: dict[str, Any] | None = None,
             writer_names: dict[str, Any] | None = None) -> list[str]:
    """Problems (empty when compatible) reading data written with ``writer`` using ``reader``."""
    rn = dict(reader_names or {})
    wn = dict(writer_names or {})
    collect_names(reader, rn)
    collect_names(writer, wn)
    try:
        return _Resolver(rn, wn).check(reader, writer, None, None, "")
    except (ValueError, KeyError, TypeError) as e:
        return [f"cannot resolve schemas: {e}"]
