"""Per-column (de)serialization throughput of the Spark source/sink's keyFormat/valueFormat
(strom.spark.formats), without Spark or a registry (writer schema preloaded): Avro records of
four fields (string, int, array of 2 strings, optional string), the same as JSON, and strings.

    python bench/spark_formats.py [--records 200000]
"""

from __future__ import annotations

import argparse
import io
import json
import time
from typing import Any

import fastavro
import pyarrow as pa

from strom.serde import frame
from strom.spark.formats import FieldFormat, _avro_spark, codec, decode_column, encode_column, resolve_format

SCHEMA = {
    "type": "record",
    "name": "U",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "age", "type": "int"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "email", "type": ["null", "string"]},
    ],
}
JSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "email": {"type": "string"},
    },
}


def where(i: int) -> str:
    return f"row {i}"


def timed(label: str, n: int, fn: Any) -> Any:
    t = time.perf_counter()
    out = fn()
    d = time.perf_counter() - t
    print(f"{label:28s} {n / d:>12,.0f} records/s")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    n = ap.parse_args().records
    parsed = fastavro.parse_schema(SCHEMA)
    rows = [
        {
            "name": f"user{i}",
            "age": i % 90,
            "tags": ["a", "b"],
            "email": f"u{i}@example.com" if i % 2 else None,
        }
        for i in range(n)
    ]

    def enc(r: dict[str, Any]) -> bytes:
        b = io.BytesIO()
        fastavro.schemaless_writer(b, parsed, r)
        return frame(1, b.getvalue())

    raw = pa.array([enc(r) for r in rows], pa.binary())
    avro = FieldFormat(
        "value",
        "avro",
        _avro_spark(SCHEMA, {}, set())[0].json(),
        schema=json.dumps(SCHEMA),
        schema_id=1,
        registry_url="http://unused",
    )
    codec(avro)._writers[1] = parsed
    col, _ = timed("avro decode", n, lambda: decode_column(avro, raw, where))
    timed("avro encode", n, lambda: encode_column(avro, col, where))
    fj = resolve_format(
        {"valueFormat": "json", "valueSchema": json.dumps(JSON_SCHEMA)}, "value", "t", for_write=False
    )
    assert fj is not None
    rawj = pa.array(
        [json.dumps({k: v for k, v in r.items() if v is not None}).encode() for r in rows], pa.binary()
    )
    colj, _ = timed("json decode", n, lambda: decode_column(fj, rawj, where))
    timed("json encode (validated)", n, lambda: encode_column(fj, colj, where))
    fs = resolve_format({"valueFormat": "string"}, "value", "t", for_write=False)
    assert fs is not None
    rs = pa.array([r["name"].encode() for r in rows], pa.binary())
    timed("string decode (vectorised)", n, lambda: decode_column(fs, rs, where))


if __name__ == "__main__":
    main()
