"""kio reads ``*_ms`` fields as ``timedelta``; :func:`strom.protocol.codec.duration_ms` turns them
back into the exact int of milliseconds (a float round trip loses one on ~0.6% of values)."""

from __future__ import annotations

import datetime

from hypothesis import given
from hypothesis import strategies as st

from strom.protocol.codec import duration_ms, optional_duration_ms


@given(st.integers(-(2**63) // 1000, 2**63 // 1000))
def test_every_int64_millisecond_count_comes_back_exactly(ms: int) -> None:
    assert duration_ms(datetime.timedelta(milliseconds=ms)) == ms


def test_the_values_a_float_round_trip_got_wrong() -> None:
    for ms in (1001, 1003, 2002, 1048561, -1, 0, 2**31 - 1):
        assert duration_ms(datetime.timedelta(milliseconds=ms)) == ms
    assert int(datetime.timedelta(milliseconds=1001).total_seconds() * 1000) == 1000  # the old way


def test_an_absent_or_plain_int_field() -> None:
    assert optional_duration_ms(None, -1) == -1
    assert optional_duration_ms(45_001, -1) == 45_001
    assert optional_duration_ms(datetime.timedelta(milliseconds=1003), 0) == 1003
