"""QuorumControllerChannel against real socket servers standing in for controllers: direct and
enveloped requests, NOT_CONTROLLER and broken connections retried at the (new) leader,
pipelined requests matched by correlation id, the timeout."""

from __future__ import annotations

import asyncio
import datetime
import struct
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kio.schema.broker_heartbeat.v1 import request as heartbeat
from kio.schema.create_topics.v7 import request as create_topics
from kio.static.primitive import i16, i32, i32Timedelta, i64

from strom.controller.server import NotControllerError
from strom.protocol import codec, envelope
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import RequestHeader
from strom.server.controller_channel import QuorumControllerChannel

Answer = Callable[[RequestHeader, Any], Awaitable[Any]]


class FakeController:
    """A framed server: each request is decoded and ``answer(header, request)`` gives the kio
    response entity (None: close the connection unanswered). Requests are answered
    concurrently, so answers may leave out of order."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.connections = 0
        self.received: list[tuple[RequestHeader, Any]] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> FakeController:
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        tasks = []

        async def one(frame: bytes) -> None:
            header, request = envelope.decode_request(frame)
            self.received.append((header, request))
            response = await self.answer(header, request)
            if response is None:
                writer.close()
                return
            payload = envelope.encode_response(response, header.correlation_id)
            writer.write(struct.pack(">i", len(payload)) + payload)

        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                tasks.append(asyncio.ensure_future(one(await reader.readexactly(size))))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            for t in tasks:
                t.cancel()
            writer.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()


def heartbeat_request() -> Any:
    return heartbeat.BrokerHeartbeatRequest(
        broker_id=i32(2),  # type: ignore[arg-type]
        broker_epoch=i64(7),
        current_metadata_offset=i64(42),
        want_fence=False,
        want_shut_down=False,
        offline_log_dirs=(),
    )


def heartbeat_response(error: int = 0) -> Any:
    data = {"throttle_time": 0, "error_code": error, "is_caught_up": True, "is_fenced": False}
    return codec.build(codec.response_type(63, 1), {**data, "should_shut_down": False})


def create_request(name: str) -> Any:
    topic = create_topics.CreatableTopic(
        name=name,  # type: ignore[arg-type]
        num_partitions=i32(3),
        replication_factor=i16(-1),
        assignments=(),
        configs=(),
    )
    return create_topics.CreateTopicsRequest(
        topics=(topic,),
        timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=30000)),
        validate_only=False,
    )


TOPIC_ID = uuid.UUID(int=99)


def envelope_answer(inner_header: RequestHeader, inner: Any, error: int = 0) -> Any:
    """The EnvelopeResponse a controller gives for a forwarded CreateTopics."""
    if error:
        return codec.build(codec.response_type(58, 0), {"error_code": error, "response_data": None})
    body = {
        "throttle_time": 0,
        "topics": [
            {"name": str(t.name), "topic_id": TOPIC_ID, "error_code": 0, "num_partitions": 3}
            for t in inner.topics
        ],
    }
    resp = codec.build(codec.response_type(19, inner_header.api_version), body)
    data = envelope.encode_response(resp, inner_header.correlation_id)
    return codec.build(codec.response_type(58, 0), {"error_code": 0, "response_data": data})


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))  # type: ignore[arg-type]


def test_direct_api_goes_as_itself_and_answers_the_controller_dict_shape() -> None:
    async def main() -> None:
        async def answer(h: RequestHeader, req: Any) -> Any:
            assert h.api_key == 63 and h.api_version == 1 and h.client_id == "broker-2"
            assert int(req.current_metadata_offset) == 42
            return heartbeat_response()

        ctl = await FakeController(answer).start()
        channel = QuorumControllerChannel(None, lambda: 1, {1: ("127.0.0.1", ctl.port)}, client_id="broker-2")
        try:
            got = await channel.call(63, heartbeat_request())
            assert got["error_code"] == 0 and type(got["error_code"]) is int
            assert got["is_fenced"] is False and got["is_caught_up"] is True and got["throttle_time"] == 0
        finally:
            await channel.close()
            await ctl.close()

    run(main())


def test_admin_request_is_forwarded_in_an_envelope_with_principal_and_address() -> None:
    async def main() -> None:
        seen: list[tuple[RequestHeader, Any, str, str]] = []

        async def answer(h: RequestHeader, req: Any) -> Any:
            assert h.api_key == 58 and h.api_version == 0
            inner_header, inner = envelope.decode_request(req.request_data)
            principal = envelope.decode_principal(req.request_principal)
            seen.append((inner_header, inner, principal, envelope.decode_address(req.client_host_address)))
            return envelope_answer(inner_header, inner)

        ctl = await FakeController(answer).start()
        channel = QuorumControllerChannel(None, lambda: 3, {3: ("127.0.0.1", ctl.port)})
        try:
            got = await channel.call(
                19, create_request("orders"), principal="User:alice", client_host="10.1.2.3"
            )
        finally:
            await channel.close()
            await ctl.close()
        assert got["topics"][0]["name"] == "orders" and got["topics"][0]["topic_id"] == TOPIC_ID
        assert got["topics"][0]["error_code"] == 0
        inner_header, inner, principal, host = seen[0]
        assert (inner_header.api_key, inner_header.api_version) == (19, 7)
        assert [str(t.name) for t in inner.topics] == ["orders"] and int(inner.topics[0].num_partitions) == 3
        assert principal == "User:alice" and host == "10.1.2.3"

    run(main())


def test_not_controller_is_retried_at_the_new_leader() -> None:
    async def main() -> None:
        leader = {"id": 1}

        async def old(h: RequestHeader, req: Any) -> Any:
            leader["id"] = 2  # the quorum elected node 2 meanwhile
            inner_header, inner = envelope.decode_request(req.request_data)
            return envelope_answer(inner_header, inner, ErrorCode.NOT_CONTROLLER)

        async def new(h: RequestHeader, req: Any) -> Any:
            inner_header, inner = envelope.decode_request(req.request_data)
            return envelope_answer(inner_header, inner)

        one, two = await FakeController(old).start(), await FakeController(new).start()
        channel = QuorumControllerChannel(
            None,
            lambda: leader["id"],
            {1: ("127.0.0.1", one.port), 2: ("127.0.0.1", two.port)},
            retry_backoff_ms=10,
        )
        try:
            got = await channel.call(19, create_request("t"))
            assert got["topics"][0]["error_code"] == 0
            assert len(one.received) == 1 and len(two.received) == 1
            # a direct API's own NOT_CONTROLLER is retried too
            leader["id"] = 1
            answers = iter([heartbeat_response(ErrorCode.NOT_CONTROLLER), heartbeat_response()])

            async def flaky(h: RequestHeader, req: Any) -> Any:
                return next(answers)

            one.answer = flaky
            assert (await channel.call(63, heartbeat_request()))["error_code"] == 0
            assert len(one.received) == 3
        finally:
            await channel.close()
            await one.close()
            await two.close()

    run(main())


def test_a_broken_connection_is_reconnected_and_the_request_sent_again() -> None:
    async def main() -> None:
        calls = {"n": 0}

        async def answer(h: RequestHeader, req: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == 1:
                return None  # the controller's connection dies with the request unanswered
            return heartbeat_response()

        ctl = await FakeController(answer).start()
        channel = QuorumControllerChannel(None, lambda: 1, {1: ("127.0.0.1", ctl.port)}, retry_backoff_ms=10)
        try:
            assert (await channel.call(63, heartbeat_request()))["error_code"] == 0
            assert ctl.connections == 2 and calls["n"] == 2
            # the new connection persists: the next call needs none
            assert (await channel.call(63, heartbeat_request()))["error_code"] == 0
            assert ctl.connections == 2
        finally:
            await channel.close()
            await ctl.close()

    run(main())


def test_unknown_leader_and_unreachable_controller_time_out_as_not_controller() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        channel = QuorumControllerChannel(None, lambda: None, {}, request_timeout_ms=300, retry_backoff_ms=20)
        start = loop.time()
        with pytest.raises(NotControllerError, match="no controller is known"):
            await channel.call(63, heartbeat_request())
        assert 0.2 <= loop.time() - start < 2
        # a leader whose port refuses connections
        probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = probe.sockets[0].getsockname()[1]
        probe.close()
        await probe.wait_closed()
        channel = QuorumControllerChannel(
            None, lambda: 1, {1: ("127.0.0.1", port)}, request_timeout_ms=300, retry_backoff_ms=20
        )
        with pytest.raises(NotControllerError):
            await channel.call(19, create_request("t"))

    run(main())


def test_a_controller_that_never_answers_times_out() -> None:
    async def main() -> None:
        async def silent(h: RequestHeader, req: Any) -> Any:
            await asyncio.sleep(60)

        ctl = await FakeController(silent).start()
        channel = QuorumControllerChannel(
            None, lambda: 1, {1: ("127.0.0.1", ctl.port)}, request_timeout_ms=300
        )
        try:
            with pytest.raises(NotControllerError, match=r"request\.timeout\.ms"):
                await channel.call(63, heartbeat_request())
        finally:
            await channel.close()
            await ctl.close()

    run(main())


def test_a_request_to_a_controller_that_stopped_answering_moves_to_the_new_leader() -> None:
    """A paused controller (SIGSTOP) never answers; the quorum elects another: the heartbeat in
    flight goes to the new leader at once, not after request.timeout.ms (it used to wait the
    whole 30 s, and the new controller fenced the broker meanwhile)."""

    async def main() -> None:
        leader = {"id": 1}

        async def frozen(h: RequestHeader, req: Any) -> Any:
            leader["id"] = 2  # elected while node 1 is frozen
            await asyncio.sleep(60)

        async def new(h: RequestHeader, req: Any) -> Any:
            return heartbeat_response()

        one, two = await FakeController(frozen).start(), await FakeController(new).start()
        channel = QuorumControllerChannel(
            None,
            lambda: leader["id"],
            {1: ("127.0.0.1", one.port), 2: ("127.0.0.1", two.port)},
            request_timeout_ms=20_000,
            retry_backoff_ms=10,
        )
        loop = asyncio.get_running_loop()
        start = loop.time()
        try:
            assert (await channel.call(63, heartbeat_request()))["error_code"] == 0
            assert loop.time() - start < 2
            assert len(one.received) == 1 and len(two.received) == 1
        finally:
            await channel.close()
            await one.close()
            await two.close()

    run(main())


def test_concurrent_requests_share_one_connection_and_match_by_correlation_id() -> None:
    async def main() -> None:
        release = asyncio.Event()

        async def answer(h: RequestHeader, req: Any) -> Any:
            inner_header, inner = envelope.decode_request(req.request_data)
            if str(inner.topics[0].name) == "slow":
                await release.wait()  # answered after the fast one
            else:
                release.set()
            return envelope_answer(inner_header, inner)

        ctl = await FakeController(answer).start()
        channel = QuorumControllerChannel(None, lambda: 1, {1: ("127.0.0.1", ctl.port)})
        try:
            slow, fast = await asyncio.gather(
                channel.call(19, create_request("slow")), channel.call(19, create_request("fast"))
            )
            assert slow["topics"][0]["name"] == "slow" and fast["topics"][0]["name"] == "fast"
            assert ctl.connections == 1
        finally:
            await channel.close()
            await ctl.close()

    run(main())


class _LocalController:
    def __init__(self, active: bool) -> None:
        self.is_active = active
        self.node_id = 1
        self.calls: list[int] = []

    async def call(self, api_key: int, request: Any, api_version: int = -1) -> dict[str, Any]:
        self.calls.append(api_key)
        if not self.is_active:
            raise NotControllerError("not active")
        return {"error_code": 0, "is_fenced": False}


def test_the_active_local_controller_is_called_directly() -> None:
    async def main() -> None:
        local = _LocalController(active=True)
        # no voter endpoint at all: a socket would fail
        channel = QuorumControllerChannel(local, lambda: 1, {})  # type: ignore[arg-type]
        assert (await channel.call(63, heartbeat_request()))["is_fenced"] is False
        assert local.calls == [63]
        # this node leads but its controller is not active yet: wait, then time out
        local.is_active = False
        channel = QuorumControllerChannel(local, lambda: 1, {}, request_timeout_ms=200)  # type: ignore[arg-type]
        with pytest.raises(NotControllerError, match="not active yet"):
            await channel.call(63, heartbeat_request())

    run(main())
