"""The console's view of registry-framed records: with ``--schema-registry-url`` a key or value in
Confluent's wire format (magic byte 0, schema id, for Protobuf the message indexes) is decoded
through the registry with its writer's schema, by the Avro / JSON Schema / Protobuf converters of
``strom connect`` (the same decoding confluent-kafka's deserializers do), and shown as JSON with
its format and schema id (``avro #3``). Bytes that only look framed (an unknown id, a payload
that does not decode) are shown as before (text, JSON or hex).

Registry calls block (urllib): :meth:`RegistryView.decode_rows` runs in a worker thread, never on
the event loop (which is the broker's when the console is served by the broker)."""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import logging
import threading
from typing import Any

log = logging.getLogger("strom.console")

_CONVERTERS = {
    "AVRO": "io.confluent.connect.avro.AvroConverter",
    "JSON": "io.confluent.connect.json.JsonSchemaConverter",
    "PROTOBUF": "io.confluent.connect.protobuf.ProtobufConverter",
}


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    if isinstance(v, bytes | bytearray):
        return base64.b64encode(bytes(v)).decode()
    if isinstance(v, datetime.datetime | datetime.date | datetime.time):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    return v


class RegistryView:
    def __init__(self, url: str, user_info: str | None = None) -> None:
        from strom.serde import RegistryClient

        self.url = url.rstrip("/")
        self.client = RegistryClient(self.url, timeout=10.0, user_info=user_info)
        self._types: dict[int, str | None] = {}  # schema id -> schema type (None: not a schema)
        self._convs: dict[tuple[str, bool], Any] = {}
        self._lock = threading.Lock()

    def _type(self, sid: int) -> str | None:
        if sid not in self._types:
            from strom.serde import SerdeError

            try:
                self._types[sid] = str(self.client.schema(sid).get("schemaType", "AVRO"))
            except SerdeError as e:
                log.debug("schema id %d: %s", sid, e)
                self._types[sid] = None
        return self._types[sid]

    def _converter(self, stype: str, is_key: bool) -> Any:
        if (stype, is_key) not in self._convs:
            from strom.connect.converters import make_converter

            conv: Any = make_converter(_CONVERTERS[stype], {"schema.registry.url": self.url}, is_key)
            conv.client = self.client  # shares the schema cache (and the credentials)
            self._convs[(stype, is_key)] = conv
        return self._convs[(stype, is_key)]

    def decode(self, topic: str, data: bytes | None, is_key: bool = False) -> tuple[str, str] | None:
        """``(kind, pretty JSON)`` of a framed record, e.g. ``("avro #3", "{...}")``; None: not a
        record of this registry."""
        if data is None or len(data) < 5 or data[0] != 0:
            return None
        sid = int.from_bytes(data[1:5], "big")
        with self._lock:
            stype = self._type(sid)
            if stype not in _CONVERTERS:
                return None
            try:
                _schema, value = self._converter(stype, is_key).to_connect(topic, data)
            except Exception as e:  # not decodable with that schema: shown raw
                log.debug("record with schema id %d not decoded: %s", sid, e)
                return None
        kind = {"AVRO": "avro", "JSON": "json-schema", "PROTOBUF": "protobuf"}[stype]
        return f"{kind} #{sid}", json.dumps(_jsonable(value), indent=2, ensure_ascii=False)

    def decode_rows(self, topic: str, rows: list[dict[str, Any]], limit: int) -> None:
        """Replaces the shown key/value of each row whose ``_raw`` (key, value) is framed."""
        for row in rows:
            key, value = row.pop("_raw", (None, None))
            k = self.decode(topic, key, is_key=True)
            if k is not None:
                row["key_kind"], row["key"] = k[0], k[1][:256]
            v = self.decode(topic, value)
            if v is not None:
                row["value_kind"], row["value"], row["truncated"] = v[0], v[1][:limit], len(v[1]) > limit
