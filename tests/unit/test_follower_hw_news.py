"""A follower's fetch owed only a new high watermark: answered after a short linger, not at
once (which cost every acks=all batch an empty round trip to one follower) and not after the
whole long poll (a follower serves consumers up to its HW, KIP-392); data arriving meanwhile
carries the HW with it."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema

from strom.client.messages import decode_response
from strom.protocol.codec import build
from strom.protocol.framing import response_header
from strom.server.context import RawResponse, RequestContext
from strom.server.handlers import fetch as fetch_handlers
from strom.testing.inprocess import lead_with_a_made_up_follower, started_broker

FETCH_V = 12
LONG_POLL_MS = 2000


def _fetch_request(replica: int, topic: str, partition: int, offset: int, epoch: int) -> Any:
    return build(load_request_schema(1, FETCH_V), {
        "replica_id": replica, "max_wait": LONG_POLL_MS, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
        "topics": [{"topic": topic, "partitions": [{
            "partition": partition, "current_leader_epoch": epoch, "fetch_offset": offset,
            "last_fetched_epoch": -1, "log_start_offset": 0, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [],
    })


def _decoded(result: Any) -> Any:
    assert isinstance(result, RawResponse)
    body = b"".join(os.pread(p[0], p[2], p[1]) if isinstance(p, tuple) else bytes(p) for p in result.parts)
    return decode_response(load_response_schema(1, FETCH_V), response_header(1, True) + body)


def test_hw_news_waits_briefly_for_data_and_is_answered_before_the_long_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a long linger so that the test does not race the machine's scheduling
    monkeypatch.setattr(fetch_handlers, "HW_NEWS_LINGER_MS", 300)

    async def go() -> None:
        async with started_broker(tmp_path / "data") as broker:
            rm = broker.replica_manager
            if not rm.partitions:
                pytest.skip("the registry path has no replication state")
            tp = ("__consumer_offsets", 0)
            other = lead_with_a_made_up_follower(broker, tp)
            plog = broker.logs[tp]
            epoch = rm.partitions[tp].leader_epoch
            ctx = RequestContext(1, FETCH_V, 1, "follower", "127.0.0.1", "c1", broker)

            async def follower_fetch(offset: int) -> tuple[Any, float]:
                t0 = time.monotonic()
                result = await fetch_handlers.handle_fetch(ctx, _fetch_request(other, *tp, offset, epoch))
                return _decoded(result).responses[0].partitions[0], time.monotonic() - t0

            # the follower is told the HW at the log end so far
            first, _ = await follower_fetch(plog.log_end_offset)
            told = first.high_watermark
            # a commit: the leader's log grows; its HW waits for the follower
            gc = broker.group_coordinator
            commit = asyncio.ensure_future(gc.commit_offsets("g", member_id="", generation_id=-1,
                                                            offsets={("t", 0): (5, -1, None)}))
            await asyncio.sleep(0.05)
            end = plog.log_end_offset
            assert end > told and not commit.done()
            # the follower's fetch at the log end moves the HW: it is owed that HW, and no data
            # comes: answered after the linger, not at once and not after the long poll
            part, took = await follower_fetch(end)
            assert part.high_watermark == end and part.records in (None, b"")
            assert 0.25 <= took < LONG_POLL_MS / 1000 / 2, took
            await asyncio.wait_for(commit, 5)
            # owed a HW again, and data arrives during the linger: one answer carries both
            commit = asyncio.ensure_future(gc.commit_offsets("g", member_id="", generation_id=-1,
                                                            offsets={("t", 0): (6, -1, None)}))
            await asyncio.sleep(0.05)
            end = plog.log_end_offset
            fetch = asyncio.ensure_future(follower_fetch(end))  # moves the HW to ``end``
            await asyncio.sleep(0.05)
            assert not fetch.done()  # lingering for data
            more = asyncio.ensure_future(gc.commit_offsets("g", member_id="", generation_id=-1,
                                                          offsets={("t", 0): (7, -1, None)}))
            part, took = await asyncio.wait_for(fetch, 5)
            assert part.high_watermark == end
            assert part.records, "the data that arrived during the linger is in the answer"
            assert took < 0.3
            await asyncio.wait_for(commit, 5)
            more.cancel()

    asyncio.run(go())
