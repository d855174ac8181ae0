"""JSON Schema compatibility: the common cases of Confluent's rules.

``accepts(reader, writer)`` returns the problems that keep every document valid under
``writer`` from being valid under ``reader`` (empty: compatible). Confluent's rules for the
content model: a property added to an *open* content model (``additionalProperties`` absent or
true) is incompatible (old data may carry any value under that name), unless its schema accepts
anything; a property removed from a *closed* model is incompatible; a required property added is
incompatible; types may widen (``integer`` -> ``number``, more types), enums may grow, numeric
and length bounds may relax, ``additionalProperties`` may go from false to true but not back.
"""

from __future__ import annotations

from typing import Any


def _types(s: dict[str, Any]) -> set[str] | None:
    t = s.get("type")
    if t is None:
        return None
    return {t} if isinstance(t, str) else set(t)


def _open(s: dict[str, Any]) -> bool:
    ap = s.get("additionalProperties", True)
    return ap is not False


def _is_any(s: Any) -> bool:
    return s is True or s == {}


class _Ctx:
    """Resolves ``$ref``: local JSON pointers (``#/definitions/X``, ``#/$defs/X``) in each side's
    root document, and names of registered references."""

    def __init__(self, rroot: Any, wroot: Any, rrefs: dict[str, Any], wrefs: dict[str, Any]) -> None:
        self.roots = (rroot, wroot)
        self.refs = (rrefs, wrefs)
        self.seen: set[tuple[str, str]] = set()

    def deref(self, schema: Any, side: int) -> tuple[Any, str | None]:
        ref_name = None
        for _ in range(32):
            if not (isinstance(schema, dict) and isinstance(schema.get("$ref"), str)):
                break
            ref = schema["$ref"]
            ref_name = ref
            target: Any = None
            if ref.startswith("#"):
                target = self.roots[side]
                for part in ref[1:].lstrip("/").split("/") if ref != "#" else []:
                    part = part.replace("~1", "/").replace("~0", "~")
                    target = target.get(part) if isinstance(target, dict) else None
            else:
                target = self.refs[side].get(ref)
            if target is None:
                break
            schema = target
        return schema, ref_name


def accepts(reader: Any, writer: Any, path: str = "#", reader_refs: dict[str, Any] | None = None,
            writer_refs: dict[str, Any] | None = None) -> list[str]:
    return _accepts(_Ctx(reader, writer, reader_refs or {}, writer_refs or {}), reader, writer, path)


def _accepts(ctx: _Ctx, reader: Any, writer: Any, path: str) -> list[str]:
    reader, rref = ctx.deref(reader, 0)
    writer, wref = ctx.deref(writer, 1)
    if rref is not None and wref is not None:  # recursive definitions: assume what is being checked
        if (rref, wref) in ctx.seen:
            return []
        ctx.seen.add((rref, wref))
    if _is_any(reader):
        return []
    if reader is False:
        return [] if writer is False else [f"{path}: reader rejects everything"]
    if writer is False:
        return []
    if writer is True or writer == {}:
        return [f"{path}: writer accepts anything, reader is narrower"]
    if not isinstance(reader, dict) or not isinstance(writer, dict):
        return [f"{path}: unsupported schema form"]
    problems: list[str] = []
    rt, wt = _types(reader), _types(writer)
    if rt is not None:
        if wt is None:
            problems.append(f"{path}: type restricted to {sorted(rt)}")
        else:
            widened = rt | ({"integer"} if "number" in rt else set())
            if not wt <= widened:
                problems.append(f"{path}: type changed from {sorted(wt)} to {sorted(rt)}")
    if "enum" in reader and ("enum" not in writer or not all(v in reader["enum"] for v in writer["enum"])):
        problems.append(f"{path}: enum narrowed")
    if "const" in reader and reader.get("const") != writer.get("const"):
        problems.append(f"{path}: const changed")
    for key, looser in (("maxLength", max), ("maximum", max), ("exclusiveMaximum", max),
                        ("maxItems", max), ("maxProperties", max),
                        ("minLength", min), ("minimum", min), ("exclusiveMinimum", min),
                        ("minItems", min), ("minProperties", min)):
        if key in reader:
            if key not in writer:
                problems.append(f"{path}: {key} added")
            elif looser(reader[key], writer[key]) != reader[key]:
                problems.append(f"{path}: {key} tightened from {writer[key]} to {reader[key]}")
    if "pattern" in reader and reader.get("pattern") != writer.get("pattern"):
        problems.append(f"{path}: pattern changed")
    # objects
    rprops: dict[str, Any] = reader.get("properties", {})
    wprops: dict[str, Any] = writer.get("properties", {})
    for name, rs in rprops.items():
        ppath = f"{path}/properties/{name}"
        if name in wprops:
            problems += _accepts(ctx, rs, wprops[name], ppath)
        elif _open(writer) and not _is_any(rs):
            problems.append(f"{ppath}: property added to an open content model")
        elif not _open(writer) and isinstance(writer.get("additionalProperties"), dict):
            problems += _accepts(ctx, rs, writer["additionalProperties"], ppath)
    for name in wprops:
        if name not in rprops and not _open(reader):
            rap = reader.get("additionalProperties")
            if isinstance(rap, dict):
                problems += _accepts(ctx, rap, wprops[name], f"{path}/properties/{name}")
            else:
                problems.append(f"{path}/properties/{name}: property removed from a closed content model")
    new_required = set(reader.get("required", [])) - set(writer.get("required", []))
    if new_required:
        problems.append(f"{path}: required properties added {sorted(new_required)}")
    rap, wap = reader.get("additionalProperties", True), writer.get("additionalProperties", True)
    if rap is False and wap is not False:
        problems.append(f"{path}: additionalProperties removed")
    elif isinstance(rap, dict) and wap is not False:
        problems += _accepts(ctx, rap, wap if isinstance(wap, dict) else {}, f"{path}/additionalProperties")
    # arrays
    if "items" in reader:
        ri, wi = reader["items"], writer.get("items", {})
        if isinstance(ri, dict | bool) and isinstance(wi, dict | bool):
            problems += _accepts(ctx, ri, wi, f"{path}/items")
    # combinators: the reader's branches must cover each writer branch
    for comb in ("oneOf", "anyOf"):
        if comb in reader:
            other = "oneOf" if comb == "anyOf" else "anyOf"
            wbranches: list[Any] = writer.get(comb) or writer.get(other) or [writer]
            for i, wb in enumerate(wbranches):
                if all(_accepts(ctx, rb, wb, f"{path}/{comb}/{i}") for rb in reader[comb]):
                    problems.append(f"{path}/{comb}: no reader branch accepts writer branch {i}")
    if "allOf" in reader:
        for i, rb in enumerate(reader["allOf"]):
            target = writer["allOf"][i] if i < len(writer.get("allOf", [])) else writer
            problems += _accepts(ctx, rb, target, f"{path}/allOf/{i}")
    return problems
