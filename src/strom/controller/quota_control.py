"""Client quotas in the metadata log: Kafka's ``ClientQuotaControlManager`` (KIP-546 on KRaft),
and the describe side of Kafka's ``ClientQuotasImage``.

Theory of operation
-------------------
Replicated state: for each entity (a set of (entity type, name or None for the default) parts:
``user``, ``client-id``, or ``ip`` alone) its quota values by key, as ``ClientQuotaRecord`` puts
them (``remove`` drops a key). Every broker reads its metadata image's quotas.

AlterClientQuotas (49) checks each entry as Kafka's controller does: the entity must be non-empty,
name each type once, use only user/client-id/ip, never an empty name, and ip alone; the keys must
be the entity's (producer_byte_rate, consumer_byte_rate, request_percentage,
controller_mutation_rate for users and clients; connection_creation_rate for ips), the integer
ones whole. A failing entry is INVALID_REQUEST with Kafka's message and changes nothing; the
others become records. DescribeClientQuotas (48): :func:`describe` filters the image's entities
with EXACT (0), DEFAULT (1) or SPECIFIED (2) components, ``strict`` asking for no other types.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping
from typing import Any

from ..metadata.image import ClientQuotaEntity, entity_key
from ..metadata.records import ClientQuotaRecord, EntityData
from ..protocol.errors import ErrorCode

__all__ = ["ClientQuotaControlManager", "QuotaError", "describe", "validate_entity"]

USER, CLIENT_ID, IP = "user", "client-id", "ip"
# key -> whether its value must be whole
CLIENT_KEYS = {
    "producer_byte_rate": True,
    "consumer_byte_rate": True,
    "request_percentage": False,
    "controller_mutation_rate": False,
}
IP_KEYS = {"connection_creation_rate": True}
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


class QuotaError(ValueError):
    def __init__(self, message: str, code: int = ErrorCode.INVALID_REQUEST) -> None:
        super().__init__(message)
        self.code = code


def validate_entity(parts: list[tuple[str, str | None]]) -> dict[str, str | None]:
    seen: dict[str, str | None] = {}
    for etype, name in parts:
        if etype in seen:
            raise QuotaError("Invalid empty entity")
        if etype not in (USER, CLIENT_ID, IP):
            raise QuotaError(f"Unhandled client quota entity type: {etype}")
        if name is not None and name == "":
            raise QuotaError(f"Empty {etype} not supported")
        seen[etype] = name
    if not seen:
        raise QuotaError("Invalid empty client quota entity")
    if IP in seen:
        if len(seen) > 1:
            raise QuotaError(
                "Invalid quota entity combination, IP entity should not be combined with User or ClientId"
            )
        ip = seen[IP]
        if ip is not None:
            try:
                ipaddress.ip_address(ip)
            except ValueError:
                raise QuotaError(f"{ip} is not a valid IP or resolvable host.") from None
    return seen


def _check_op(entity: Mapping[str, str | None], key: str, value: float, remove: bool) -> None:
    keys = IP_KEYS if IP in entity else CLIENT_KEYS
    if key not in keys:
        raise QuotaError(f"Invalid configuration key {key}")
    if remove:
        return
    if math.isnan(value) or math.isinf(value):
        raise QuotaError(f"Invalid value {value} for configuration key {key}")
    if keys[key] and value != math.floor(value):
        raise QuotaError(f"Configuration {key} must be a {'Integer' if IP in entity else 'Long'} value")
    if value <= 0:
        raise QuotaError(f"Configuration {key} must be a positive value, got {value}")


class ClientQuotaControlManager:
    def __init__(self) -> None:
        self.entities: dict[ClientQuotaEntity, dict[str, float]] = {}

    def alter_client_quotas(self, request: Any) -> tuple[list[Any], dict[str, Any]]:
        records: list[Any] = []
        entries = []
        for e in request.entries:
            parts = [
                (str(p.entity_type), None if p.entity_name is None else str(p.entity_name)) for p in e.entity
            ]
            shown = [{"entity_type": t, "entity_name": n} for t, n in parts]
            try:
                entity = validate_entity(parts)
                seen_keys: set[str] = set()
                for op in e.ops:
                    key = str(op.key)
                    if key in seen_keys:
                        raise QuotaError(f"Duplicate configuration key {key}")
                    seen_keys.add(key)
                    _check_op(entity, key, float(op.value), bool(op.remove))
            except QuotaError as err:
                entries.append({"error_code": err.code, "error_message": str(err), "entity": shown})
                continue
            if not request.validate_only:
                data = tuple(EntityData(entity_type=t, entity_name=n) for t, n in sorted(entity.items()))
                current = self.entities.get(entity_key(data), {})
                for op in e.ops:
                    if op.remove:
                        if str(op.key) in current:
                            records.append(ClientQuotaRecord(entity=data, key=str(op.key), remove=True))
                    elif current.get(str(op.key)) != float(op.value):
                        records.append(ClientQuotaRecord(entity=data, key=str(op.key), value=float(op.value)))
            entries.append({"error_code": 0, "error_message": None, "entity": shown})
        return records, {"throttle_time": 0, "entries": entries}

    def replay(self, record: ClientQuotaRecord) -> None:
        key = entity_key(record.entity)
        quotas = self.entities.setdefault(key, {})
        if record.remove:
            quotas.pop(record.key, None)
            if not quotas:
                del self.entities[key]
        else:
            quotas[record.key] = record.value

    def to_records(self) -> list[ClientQuotaRecord]:
        out = []
        for entity in sorted(self.entities, key=lambda e: tuple((t, n is None, n or "") for t, n in e)):
            parts = tuple(EntityData(entity_type=t, entity_name=n) for t, n in entity)
            for key, value in sorted(self.entities[entity].items()):
                out.append(ClientQuotaRecord(entity=parts, key=key, value=value))
        return out


def describe(entities: Mapping[ClientQuotaEntity, Mapping[str, float]], request: Any) -> dict[str, Any]:
    """DescribeClientQuotas over an image's quotas (Kafka's ``ClientQuotasImage.describe``)."""
    components: dict[str, tuple[int, str | None]] = {}
    try:
        for c in request.components:
            etype, mtype = str(c.entity_type), int(c.match_type)
            match = None if c.match is None else str(c.match)
            if etype in components:
                raise QuotaError(f"Entity type {etype} cannot appear more than once in the filter.")
            if etype not in (USER, CLIENT_ID, IP):
                raise QuotaError(
                    f"Unable to handle unknown entity type {etype}", ErrorCode.UNSUPPORTED_VERSION
                )
            if mtype == MATCH_EXACT and match is None:
                raise QuotaError(f"Entity type {etype} with match type EXACT needs a match")
            if mtype not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
                raise QuotaError(f"Unknown match type {mtype}")
            components[etype] = (mtype, match)
        if IP in components and len(components) > 1:
            raise QuotaError(
                "Invalid entity filter component combination, IP filter component should "
                "not be used with User or ClientId filter component."
            )
    except QuotaError as e:
        return {"throttle_time": 0, "error_code": e.code, "error_message": str(e), "entries": None}
    strict = bool(request.strict)
    out = []
    for entity, quotas in sorted(
        entities.items(), key=lambda kv: tuple((t, n is None, n or "") for t, n in kv[0])
    ):
        named = dict(entity)
        if strict and set(named) != set(components):
            continue
        ok = True
        for etype, (mtype, match) in components.items():
            if etype not in named:
                ok = False
            elif mtype == MATCH_EXACT:
                ok = named[etype] == match
            elif mtype == MATCH_DEFAULT:
                ok = named[etype] is None
            else:
                ok = named[etype] is not None
            if not ok:
                break
        if ok and quotas:
            out.append(
                {
                    "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                    "values": [{"key": k, "value": v} for k, v in sorted(quotas.items())],
                }
            )
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "entries": out}
