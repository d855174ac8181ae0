"""Schema Registry operations over a :class:`KafkaStore`, with Confluent's error codes."""

from __future__ import annotations

import json
from typing import Any

from strom.schema_registry import schemas
from strom.schema_registry.store import (
    KafkaStore,
    SchemaRecord,
    canonical_key,
    keyed,
    schema_key,
    schema_value,
)

MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
MAX_VERSION = 2**31 - 1
RETRIES = 10


class RegistryError(Exception):
    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def subject_not_found(s: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{s}' not found.")


def version_not_found(v: Any) -> RegistryError:
    return RegistryError(404, 40402, f"Version {v} not found.")


def schema_not_found(detail: str = "Schema not found") -> RegistryError:
    return RegistryError(404, 40403, detail)


def invalid_schema(msg: str) -> RegistryError:
    return RegistryError(422, 42201, msg)


def parse_version(v: str) -> int | None:
    """None for latest; RegistryError 42202 for an invalid id."""
    if v in ("latest", "-1"):
        return None
    try:
        n = int(v)
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_VERSION:
        raise RegistryError(422, 42202, f"The specified version '{v}' is not a valid version id. Allowed "
                            f"values are between [1, 2^31-1] and the string \"latest\"")
    return n


class Registry:
    def __init__(self, store: KafkaStore) -> None:
        self.store = store

    @property
    def state(self) -> Any:
        return self.store.state

    # -- reads -----------------------------------------------------------------------------
    def subjects(self, deleted: bool = False, prefix: str = "") -> list[str]:
        with self.store.lock:
            return sorted(s for s, vs in self.state.subjects.items()
                          if s.startswith(prefix) and any(deleted or not v.deleted for v in vs.values()))

    def _versions(self, subject: str, deleted: bool = False) -> dict[int, Any]:
        vs = self.state.subjects.get(subject)
        live = {n: v for n, v in (vs or {}).items() if deleted or not v.deleted}
        if not live:
            raise subject_not_found(subject)
        return live

    def versions(self, subject: str, deleted: bool = False) -> list[int]:
        with self.store.lock:
            return sorted(self._versions(subject, deleted))

    def version(self, subject: str, v: str, deleted: bool = False) -> dict[str, Any]:
        n = parse_version(v)
        with self.store.lock:
            vs = self._versions(subject, deleted=deleted or (n is not None and deleted))
            if n is None:
                n = max(vs)
            if n not in vs:
                raise version_not_found(n)
            rec = self.state.schemas[vs[n].id]
            return {"subject": subject, "version": n, "id": rec.id, **rec.to_response()}

    def all_schemas(self, prefix: str, deleted: bool, latest_only: bool) -> list[dict[str, Any]]:
        out = []
        with self.store.lock:
            for s in sorted(self.state.subjects):
                if not s.startswith(prefix):
                    continue
                vs = {n: v for n, v in self.state.subjects[s].items() if deleted or not v.deleted}
                chosen = [max(vs)] if latest_only and vs else sorted(vs)
                for n in chosen:
                    rec = self.state.schemas[vs[n].id]
                    out.append({"subject": s, "version": n, "id": rec.id, **rec.to_response()})
        return out

    def schema_by_id(self, sid: int) -> SchemaRecord:
        with self.store.lock:
            rec = self.state.schemas.get(sid)
            if rec is None:
                raise schema_not_found()
            return rec  # type: ignore[no-any-return]

    def subject_versions_of(self, sid: int, deleted: bool = False) -> list[tuple[str, int]]:
        with self.store.lock:
            if sid not in self.state.schemas:
                raise schema_not_found()
            return sorted((s, n) for s, vs in self.state.subjects.items() for n, v in vs.items()
                          if v.id == sid and (deleted or not v.deleted))

    def referenced_by(self, subject: str, v: str) -> list[int]:
        info = self.version(subject, v)
        with self.store.lock:
            out = set()
            for s, vs in self.state.subjects.items():
                for ver in vs.values():
                    if ver.deleted:
                        continue
                    for ref in self.state.schemas[ver.id].references:
                        if ref.get("subject") == subject and ref.get("version") == info["version"]:
                            out.add(ver.id)
                _ = s
            return sorted(out)

    def compatibility(self, subject: str | None, default_to_global: bool = False) -> str | None:
        with self.store.lock:
            if subject is not None and subject in self.state.configs:
                return str(self.state.configs[subject])
            if subject is not None and not default_to_global:
                return None
            return str(self.state.configs.get(None, "BACKWARD"))

    def mode(self, subject: str | None, default_to_global: bool = True) -> str | None:
        with self.store.lock:
            if subject is not None and subject in self.state.modes:
                return str(self.state.modes[subject])
            if subject is not None and not default_to_global:
                return None
            return str(self.state.modes.get(None, "READWRITE"))

    # -- parsing ---------------------------------------------------------------------------
    def _parse(self, body: dict[str, Any]) -> tuple[schemas.Parsed, str, list[dict[str, Any]]]:
        text = body.get("schema")
        if not isinstance(text, str) or not text.strip():
            raise invalid_schema("Empty schema")
        schema_type = str(body.get("schemaType") or "AVRO").upper()
        if schema_type not in schemas.TYPES:
            raise RegistryError(422, 42201, f"Invalid schema type {schema_type}")
        refs = body.get("references") or []
        if not isinstance(refs, list):
            raise invalid_schema("Invalid references")
        ref_texts: list[str] = []
        named: dict[str, str] = {}
        clean_refs: list[dict[str, Any]] = []
        with self.store.lock:
            for ref in refs:
                if not isinstance(ref, dict) or not {"name", "subject", "version"} <= ref.keys():
                    raise invalid_schema(f"Invalid reference {ref}")
                vs = self.state.subjects.get(str(ref["subject"]), {})
                ver = vs.get(int(ref["version"])) if str(ref["version"]).lstrip("-").isdigit() else None
                if ver is None or ver.deleted:
                    raise invalid_schema(f"Invalid schema {text}, reference {ref} not found")
                ref_texts += self._ref_closure(ver.id)
                named[str(ref["name"])] = self.state.schemas[ver.id].schema
                clean_refs.append({"name": ref["name"], "subject": ref["subject"],
                                   "version": int(ref["version"])})
        try:
            parsed = schemas.parse(schema_type, text, ref_texts, named)
        except schemas.InvalidSchema as e:
            raise invalid_schema(str(e)) from e
        return parsed, schema_type, clean_refs

    def _ref_closure(self, sid: int) -> list[str]:
        rec = self.state.schemas[sid]
        out: list[str] = []
        for ref in rec.references:
            ver = self.state.subjects.get(ref["subject"], {}).get(int(ref["version"]))
            if ver is not None:
                out += self._ref_closure(ver.id)
        return [*out, rec.schema]

    def _parsed_of(self, sid: int) -> schemas.Parsed:
        rec = self.state.schemas[sid]
        refs = []
        named: dict[str, str] = {}
        for ref in rec.references:
            ver = self.state.subjects.get(ref["subject"], {}).get(int(ref["version"]))
            if ver is not None:
                refs += self._ref_closure(ver.id)
                named[str(ref["name"])] = self.state.schemas[ver.id].schema
        return schemas.parse(rec.schema_type, rec.schema, refs, named)

    def _live_parsed(self, subject: str) -> list[schemas.Parsed]:
        vs = self.state.subjects.get(subject, {})
        return [self._parsed_of(vs[n].id) for n in sorted(vs) if not vs[n].deleted]

    # -- lookups and compatibility ---------------------------------------------------------
    def lookup(self, subject: str, body: dict[str, Any], deleted: bool = False) -> dict[str, Any]:
        with self.store.lock:
            if subject not in self.state.subjects:
                raise subject_not_found(subject)
        parsed, schema_type, refs = self._parse(body)
        key = canonical_key(schema_type, parsed.canonical, refs)
        with self.store.lock:
            for n, v in sorted(self._versions(subject, deleted).items()):
                rec = self.state.schemas[v.id]
                if canonical_key(rec.schema_type, rec.schema, rec.references) == key:
                    return {"subject": subject, "version": n, "id": v.id, **rec.to_response()}
        raise schema_not_found()

    def test_compatibility(self, subject: str, v: str | None, body: dict[str, Any]) -> list[str]:
        parsed, _type, _refs = self._parse(body)
        with self.store.lock:
            level = self.compatibility(subject, default_to_global=True) or "BACKWARD"
            if v is None:  # all versions
                olds = self._live_parsed(subject)
                if level != "NONE" and not level.endswith("_TRANSITIVE"):
                    level += "_TRANSITIVE"
                return schemas.check(level, parsed, olds)
            n = parse_version(v)
            vs = self.state.subjects.get(subject, {})
            live = {k: x for k, x in vs.items() if not x.deleted}
            if not live:
                if n is None:
                    return []
                raise subject_not_found(subject)
            if n is None:
                n = max(live)
            if n not in live:
                raise version_not_found(n)
            return schemas.check(level.removesuffix("_TRANSITIVE"), parsed, [self._parsed_of(live[n].id)])

    # -- writes ----------------------------------------------------------------------------
    def _check_writable(self, subject: str | None) -> str:
        mode = self.mode(subject) or "READWRITE"
        if mode in ("READONLY", "READONLY_OVERRIDE"):
            raise RegistryError(422, 42205, f"Subject {subject} is in read-only mode")
        return mode

    def register(self, subject: str, body: dict[str, Any]) -> dict[str, Any]:
        mode = self._check_writable(subject)
        parsed, schema_type, refs = self._parse(body)
        key = canonical_key(schema_type, parsed.canonical, refs)
        want_id, want_version = body.get("id"), body.get("version")
        if want_id is not None and not isinstance(want_id, int):
            raise RegistryError(422, 42201, f"Invalid schema id {want_id!r}")
        if want_version is not None and (
                not isinstance(want_version, int) or not 1 <= want_version <= MAX_VERSION):
            raise RegistryError(422, 42202,
                                f"The specified version '{want_version}' is not a valid version id.")
        if mode != "IMPORT" and want_id is not None and int(want_id) >= 0:
                raise RegistryError(422, 42205, "Subject is not in import mode")
        with self.store.write_lock:
            for _attempt in range(RETRIES):
                self.store.wait_caught_up()
                with self.store.lock:
                    vs = self.state.subjects.get(subject, {})
                    # already registered under this subject: return its id
                    for n in sorted(vs):
                        rec = self.state.schemas[vs[n].id]
                        if not vs[n].deleted and canonical_key(rec.schema_type, rec.schema,
                                                               rec.references) == key:
                            return {"id": rec.id, "version": n}
                    level = self.compatibility(subject, default_to_global=True) or "BACKWARD"
                    # an import copies history as it was: no compatibility check
                    problems = [] if mode == "IMPORT" else schemas.check(level, parsed,
                                                                         self._live_parsed(subject))
                    if problems:
                        raise RegistryError(409, 409, "Schema being registered is incompatible with an "
                                            f"earlier schema for subject \"{subject}\", details: "
                                            + "; ".join(problems))
                    sid = self.state.by_canonical.get(key)
                    if mode == "IMPORT" and want_id is not None and int(want_id) >= 0:
                        sid_req = int(want_id)
                        known = self.state.schemas.get(sid_req)
                        if known is not None and known.canonical != key:
                            raise RegistryError(422, 42207, f"Overwrite new schema with id {sid_req} is not "
                                                "permitted.")
                        sid = sid_req
                    if sid is None:
                        sid = self.state.max_id() + 1
                    version = max(vs, default=0) + 1
                    if mode == "IMPORT" and want_version is not None:
                        version = int(want_version)
                    rec = SchemaRecord(sid, parsed.canonical, schema_type, refs, key)
                    prior = vs.get(version)
                    prior_rec = self.state.schemas.get(prior.id) if prior else None
                self.store.append([(schema_key(subject, version), schema_value(subject, version, sid, rec,
                                                                               False))])
                with self.store.lock:
                    got = self.state.subjects.get(subject, {}).get(version)
                    if got is not None and got.id == sid and not got.deleted:
                        return {"id": sid, "version": version}
                    winner = got
                    winner_rec = self.state.schemas.get(got.id) if got else prior_rec
                # lost a race: put the winner's value back under the key we overwrote, retry
                if winner is not None and winner_rec is not None:
                    self.store.append([(schema_key(subject, version),
                                        schema_value(subject, version, winner.id, winner_rec,
                                                     winner.deleted))])
                elif prior is None:
                    self.store.append([(schema_key(subject, version), None)])
        raise RegistryError(500, 50001, "Error while registering schema: too many concurrent writers")

    def delete_version(self, subject: str, v: str, permanent: bool) -> int:
        self._check_writable(subject)
        n = parse_version(v)
        with self.store.write_lock:
            self.store.wait_caught_up()
            with self.store.lock:
                vs = self.state.subjects.get(subject)
                if not vs:
                    raise subject_not_found(subject)
                live = {k: x for k, x in vs.items() if permanent or not x.deleted}
                if not live:
                    raise subject_not_found(subject)
                if n is None:
                    n = max(live)
                ver = vs.get(n)
                if ver is None:
                    raise version_not_found(n)
                if permanent and not ver.deleted:
                    raise RegistryError(404, 40407, f"Subject '{subject}' Version {n} was not deleted "
                                        "first before being permanently deleted")
                if not permanent and ver.deleted:
                    raise RegistryError(404, 40406, f"Subject '{subject}' Version {n} was soft deleted. "
                                        "Set permanent=true to delete permanently")
                self._check_not_referenced(subject, n)
                rec = self.state.schemas[ver.id]
            value = None if permanent else schema_value(subject, n, ver.id, rec, True)
            self.store.append([(schema_key(subject, n), value)])
            return n

    def _check_not_referenced(self, subject: str, n: int) -> None:
        for s, vs in self.state.subjects.items():
            for ver in vs.values():
                if ver.deleted:
                    continue
                for ref in self.state.schemas[ver.id].references:
                    if ref.get("subject") == subject and int(ref.get("version", 0)) == n and s != subject:
                        raise RegistryError(422, 42206, f"One or more references exist to the schema "
                                            f"{{subject={subject},version={n}}}.")

    def delete_subject(self, subject: str, permanent: bool) -> list[int]:
        self._check_writable(subject)
        with self.store.write_lock:
            self.store.wait_caught_up()
            with self.store.lock:
                vs = self.state.subjects.get(subject)
                if not vs:
                    raise subject_not_found(subject)
                if permanent:
                    if any(not v.deleted for v in vs.values()):
                        raise RegistryError(404, 40405, f"Subject '{subject}' was not deleted first before "
                                            "being permanently deleted")
                    targets = sorted(vs)
                    records: list[tuple[bytes, bytes | None]] = [(schema_key(subject, n), None)
                                                                 for n in targets]
                    records += [(keyed("CONFIG", subject), None), (keyed("MODE", subject), None)]
                else:
                    targets = sorted(n for n, v in vs.items() if not v.deleted)
                    if not targets:
                        raise RegistryError(404, 40404, f"Subject '{subject}' was soft deleted.Set "
                                            "permanent=true to delete permanently")
                    for n in targets:
                        self._check_not_referenced(subject, n)
                    records = [(schema_key(subject, n),
                                schema_value(subject, n, vs[n].id, self.state.schemas[vs[n].id], True))
                               for n in targets]
            self.store.append(records)
            return targets

    def set_config(self, subject: str | None, requested: Any) -> str:
        level = str(requested).upper() if isinstance(requested, str) else ""
        if level not in schemas.LEVELS:
            raise RegistryError(422, 42203, "Invalid compatibility level. Valid values are none, backward, "
                                "forward, full, backward_transitive, forward_transitive, and full_transitive")
        self._check_writable(subject)
        self.store.append([(keyed("CONFIG", subject),
                            json.dumps({"compatibilityLevel": level}).encode())])
        return level

    def delete_config(self, subject: str | None) -> str:
        self._check_writable(subject)
        previous = self.compatibility(subject)
        if previous is None:
            raise RegistryError(404, 40408, f"Subject '{subject}' does not have subject-level "
                                "compatibility configured")
        self.store.append([(keyed("CONFIG", subject), None)])
        return previous

    def set_mode(self, subject: str | None, requested: Any, force: bool) -> str:
        mode = str(requested).upper() if isinstance(requested, str) else ""
        if mode not in MODES:
            raise RegistryError(422, 42204, "Invalid mode. Valid values are READWRITE, READONLY, "
                                "READONLY_OVERRIDE and IMPORT.")
        if mode == "IMPORT" and not force:
            with self.store.lock:
                nonempty = (any(self.state.subjects.values()) if subject is None
                            else bool(self.state.subjects.get(subject)))
            if nonempty:
                raise RegistryError(422, 42205, "Cannot import since found existing subjects")
        self.store.append([(keyed("MODE", subject), json.dumps({"mode": mode}).encode())])
        return mode

    def delete_mode(self, subject: str) -> str:
        previous = self.mode(subject, default_to_global=False)
        if previous is None:
            raise RegistryError(404, 40409,
                                f"Subject '{subject}' does not have subject-level mode configured")
        self.store.append([(keyed("MODE", subject), None)])
        return previous
