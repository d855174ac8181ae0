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


def accepts(reader: Any, writer: Any, path: str = "#") -> list[str]:
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
            problems += accepts(rs, wprops[name], ppath)
        elif _open(writer) and not _is_any(rs):
            problems.append(f"{ppath}: property added to an open content model")
        elif not _open(writer) and isinstance(writer.get("additionalProperties"), dict):
            problems += accepts(rs, writer["additionalProperties"], ppath)
    for name in wprops:
        if name not in rprops and not _open(reader):
            rap = reader.get("additionalProperties")
            if isinstance(rap, dict):
                problems += accepts(rap, wprops[name], f"{path}/properties/{name}")
            else:
                problems.append(f"{path}/properties/{name}: property removed from a closed content model")
    new_required = set(reader.get("required", [])) - set(writer.get("required", []))
    if new_required:
        problems.append(f"{path}: required properties added {sorted(new_required)}")
    rap, wap = reader.get("additionalProperties", True), writer.get("additionalProperties", True)
    if rap is False and wap is not False:
        problems.append(f"{path}: additionalProperties removed")
    elif isinstance(rap, dict) and wap is not False:
        problems += accepts(rap, wap if isinstance(wap, dict) else {}, f"{path}/additionalProperties")
    # arrays
    if "items" in reader:
        ri, wi = reader["items"], writer.get("items", {})
        if isinstance(ri, dict | bool) and isinstance(wi, dict | bool):
            problems += accepts(ri, wi, f"{path}/items")
    # combinators: the reader's branches must cover each writer branch
    for comb in ("oneOf", "anyOf"):
        if comb in reader:
            other = "oneOf" if comb == "anyOf" else "anyOf"
            wbranches: list[Any] = writer.get(comb) or writer.get(other) or [writer]
            for i, wb in enumerate(wbranches):
                if all(accepts(rb, wb, f"{path}/{comb}/{i}") for rb in reader[comb]):
                    problems.append(f"{path}/{comb}: no reader branch accepts writer branch {i}")
    if "allOf" in reader:
        for i, rb in enumerate(reader["allOf"]):
            target = writer["allOf"][i] if i < len(writer.get("allOf", [])) else writer
            problems += accepts(rb, target, f"{path}/allOf/{i}")
    return problems
