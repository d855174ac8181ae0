"""codec.preload: after it, decoding a request of any preloaded version and encoding its
response loads and compiles nothing more (what a broker's first request of a version would
otherwise do on the event loop). Run in a fresh interpreter, so the caches start empty."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r"""
from kio.index import load_response_schema
from strom.protocol import codec, request_bounds
from strom.protocol.api_versions import KAFKA_API_RANGES
from strom.testing.request_samples import encode_body, sample_entity

caches = [codec.request_type, codec.response_type, codec._reader, codec._writer, request_bounds._compile,
          request_bounds._plan_walker]
assert all(c.cache_info().currsize == 0 for c in caches), [c.cache_info() for c in caches]
ranges = [(k, lo, hi) for k, (_n, lo, hi) in sorted(KAFKA_API_RANGES.items())]
n = codec.preload(ranges)
assert n == sum(hi - lo + 1 for _k, lo, hi in ranges) > 200, n
assert codec.request_type.cache_info().currsize == n
bodies = {(k, v): encode_body(sample_entity(codec.request_type(k, v))) for k, lo, hi in ranges
          for v in range(lo, hi + 1)}
resp = {(k, v): sample_entity(load_response_schema(k, v)) for k, v in bodies}
misses = [c.cache_info().misses for c in caches]
for (k, v), body in bodies.items():
    frame = memoryview(body)
    codec.decode_request(k, v, frame, 0)
    codec.encode_response(resp[k, v])
after = [c.cache_info().misses for c in caches]
assert after == misses, (misses, after)
print("ok", n)
"""


def test_preload_leaves_nothing_to_load_on_first_requests() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("ok ")
