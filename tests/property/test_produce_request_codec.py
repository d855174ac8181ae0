"""The hand-written Produce request decoder (strom.protocol.produce_request) against kio, the
reference generated from Kafka's JSON schemas, for every version strom accepts (3..12):

* a request kio writes, with random transactional ids, acks, timeouts, topics, partitions and
  records (null, empty or bytes), reads back by hand as kio reads it, the records a view of the
  frame;
* a truncated or corrupted request gives ProtocolError or a clean result, never another
  exception; whatever the kio path (bounds check, then kio) accepts, the hand decoder accepts
  with the same result.
"""

from __future__ import annotations

import contextlib
import datetime
import io
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.serial import entity_writer
from kio.static.primitive import i16, i32

from strom.protocol.codec import decode_request
from strom.protocol.errors import ProtocolError
from strom.protocol.framing import parse_request_header
from strom.protocol.produce_request import decode_produce_request

VERSIONS = range(3, 13)
i32s = st.integers(-(2**31), 2**31 - 1)


def _request(version: int) -> st.SearchStrategy[Any]:
    cls = load_request_schema(0, version)
    mod = __import__(cls.__module__, fromlist=["x"])
    partition = st.builds(mod.PartitionProduceData, index=st.builds(i32, i32s),
                          records=st.one_of(st.none(), st.binary(max_size=200)))
    topic = st.builds(mod.TopicProduceData, name=st.text(max_size=20),
                      partition_data=st.lists(partition, max_size=4).map(tuple))
    return st.builds(
        cls, transactional_id=st.one_of(st.none(), st.text(max_size=20)),
        acks=st.sampled_from([-1, 0, 1]).map(i16),
        timeout=st.integers(0, 2**31 - 1).map(lambda ms: datetime.timedelta(milliseconds=ms)),
        topic_data=st.lists(topic, max_size=4).map(tuple),
    )


@st.composite
def requests(draw: st.DrawFn) -> tuple[int, bytes]:
    version = draw(st.sampled_from(VERSIONS))
    req = draw(_request(version))
    cls = type(req)
    header_cls = cls.__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header_cls(request_api_key=i16(0), request_api_version=i16(version),
                                               correlation_id=i32(7), client_id=draw(st.text(max_size=8))))
    entity_writer(cls)(buf, req)
    return version, buf.getvalue()


def _same(mine: Any, kio: Any) -> None:
    assert mine.transactional_id == kio.transactional_id
    assert (mine.acks, mine.timeout) == (kio.acks, kio.timeout)
    assert len(mine.topic_data) == len(kio.topic_data)
    for mt, kt in zip(mine.topic_data, kio.topic_data, strict=True):
        assert mt.name == kt.name
        assert [(p.index, None if p.records is None else bytes(p.records)) for p in mt.partition_data] == [
            (p.index, p.records) for p in kt.partition_data]


@settings(max_examples=300, deadline=None)
@given(req=requests())
def test_a_request_written_by_kio_reads_back_by_hand(req: tuple[int, bytes]) -> None:
    version, raw = req
    frame = memoryview(bytearray(raw))
    _h, pos = parse_request_header(frame)
    mine = decode_produce_request(frame, pos, version)
    _same(mine, decode_request(0, version, frame, pos))
    for t in mine.topic_data:
        for p in t.partition_data:
            assert p.records is None or p.records.obj is frame.obj  # a view of the frame


@settings(max_examples=300, deadline=None)
@given(req=requests(), data=st.data())
def test_a_damaged_request_is_refused_cleanly_or_read_as_kio_reads_it(req: tuple[int, bytes],
                                                                       data: st.DataObject) -> None:
    version, raw = req
    _h, pos = parse_request_header(memoryview(raw))
    damaged = bytearray(raw)
    if data.draw(st.booleans()):
        del damaged[data.draw(st.integers(pos, len(raw))):]
    else:
        at = data.draw(st.integers(pos, len(raw) - 1))
        damaged[at] = data.draw(st.integers(0, 255))
    frame = memoryview(damaged)
    kio: Any = None
    with contextlib.suppress(ProtocolError):
        kio = decode_request(0, version, frame, pos)
    try:
        mine = decode_produce_request(frame, pos, version)
    except ProtocolError:
        assert kio is None, "refused by hand, read by kio"
        return
    if kio is not None:
        _same(mine, kio)
