"""The state server's sans-IO half: table specs, URL keys, rendering, partition stores."""

from __future__ import annotations

import pytest

from strom.streams.iq_store import (
    PartitionStore,
    SpecError,
    decode_url_key,
    parse_table_spec,
    render,
    windowed_key,
)


def test_parse_table_spec() -> None:
    s = parse_table_spec("orders=orders-topic:json:bytes")
    assert (s.name, s.topic, s.value_format, s.key_format, s.windowed) == (
        "orders", "orders-topic", "json", "bytes", False)
    assert parse_table_spec("t=x").value_format == "string"
    w = parse_table_spec("c=counts:json@30000", windowed=True)
    assert w.windowed and w.window_size_ms == 30000 and w.topic == "counts"
    for bad in ("t", "=x", "t=", "t=x:yaml", "t=x:json:avro", "t=x:a:b:c"):
        with pytest.raises(SpecError):
            parse_table_spec(bad)
    with pytest.raises(SpecError, match="window size"):
        parse_table_spec("c=counts@-5", windowed=True)


def test_url_keys_and_rendering() -> None:
    assert decode_url_key("héllo", "string") == "héllo".encode()
    assert decode_url_key("AAEC_w", "bytes") == b"\x00\x01\x02\xff"
    assert decode_url_key('{"id":1}', "json") == b'{"id":1}'
    with pytest.raises(SpecError):
        decode_url_key("not json", "json")
    with pytest.raises(SpecError):
        decode_url_key("a", "bytes")
    assert render(b'{"a": [1]}', "json") == {"a": [1]}
    assert render(b"\x00\xff", "bytes") == "AP8="
    assert render(b"\xff", "string") == {"undecodable": True, "base64": "/w=="}


def test_store_updates_tombstones_position_and_readiness() -> None:
    s = PartitionStore("t", 0, windowed=False, target=5)
    s.apply(b"a", b"1", 0)
    s.apply(b"b", b"2", 1)
    s.apply(b"a", b"3", 2)
    s.apply(b"b", None, 3)
    assert not s.ready and s.position == 4
    assert s.get(b"a") == (b"3", 2) and s.get(b"b") is None
    s.reached(5)  # e.g. a transaction marker at 4
    assert s.ready and s.position == 5
    s.apply(b"c", b"4", 5)
    assert s.range(b"a", b"b") == [(b"a", b"3", 2)]
    assert sorted(k for k, _, _ in s.range(None, None)) == [b"a", b"c"]


def test_windowed_store_uses_kafka_streams_key_layout() -> None:
    assert windowed_key(b"k", 1) == b"k" + b"\x00" * 7 + b"\x01"
    s = PartitionStore("w", 0, windowed=True)
    s.apply(windowed_key(b"k", 1000), b"x", 0)
    s.apply(windowed_key(b"k", 2000), b"y", 1)
    s.apply(windowed_key(b"k", 3000), b"z", 2)
    s.apply(windowed_key(b"k", 2000), None, 3)
    s.apply(b"short", b"?", 4)  # not a windowed key: skipped, counted
    assert s.fetch(b"k", 1000, 3000) == [(1000, b"x", 0), (3000, b"z", 2)]
    assert s.fetch(b"k", 1500, None) == [(3000, b"z", 2)]
    assert s.skipped == 1 and s.position == 5
