"""Schema registry request rates: sequential HTTP calls from one client.

    strom serve &  strom schema-registry --bootstrap-server 127.0.0.1:9092 --port 8081 &
    python bench/schema_registry.py --url http://127.0.0.1:8081 [--schemas 200]

Registers N new Avro schemas (each an acks=all append to ``_schemas``, read back before the
answer), then reads schemas by id and runs compatibility checks. Point ``--url`` at a follower
instance to measure forwarded writes.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.request
from typing import Any


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8081")
    ap.add_argument("--schemas", type=int, default=200)
    ap.add_argument("--reads", type=int, default=1000)
    args = ap.parse_args()

    def call(method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(args.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
        with urllib.request.urlopen(req) as r:
            return json.loads(r.read())

    def schema(i: int, kind: str) -> str:
        return json.dumps({"type": "record", "name": f"R{i}", "fields": [{"name": "a", "type": kind}]})

    tag, n = time.time_ns(), args.schemas
    t = time.perf_counter()
    ids = [call("POST", f"/subjects/bench-{tag}-{i}/versions", {"schema": schema(i, "int")})["id"]
           for i in range(n)]
    reg = time.perf_counter() - t
    t = time.perf_counter()
    for i in range(args.reads):
        call("GET", f"/schemas/ids/{ids[i % n]}")
    get = time.perf_counter() - t
    checks = min(n, 100)
    t = time.perf_counter()
    for i in range(checks):
        path = f"/compatibility/subjects/bench-{tag}-{i}/versions/latest"
        call("POST", path, {"schema": schema(i, "long")})
    comp = time.perf_counter() - t
    print(f"register: {n / reg:.0f}/s ({reg / n * 1000:.1f} ms each); "
          f"GET /schemas/ids: {args.reads / get:.0f}/s; compatibility checks: {checks / comp:.0f}/s")


if __name__ == "__main__":
    main()
