"""ServerConnection: the sans-IO state of one client connection.

Bytes go in through :meth:`receive_data`, complete requests come out (header parsed, body still
bytes); responses go in through :meth:`send` and bytes come out of :meth:`data_to_send`. Kafka
answers a connection's requests strictly in the order they arrived (clients match responses by
position as well as by correlation id), so :meth:`send` refuses any response that is not for
the oldest unanswered request.

Error contract: :class:`ProtocolError` for malformed framing or headers; the driver closes the
connection, other connections are unaffected.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .errors import ProtocolError
from .framing import FrameDecoder, RequestHeader, parse_request_header


@dataclass(frozen=True, slots=True)
class IncomingRequest:
    header: RequestHeader
    frame: memoryview
    body_pos: int  # position after the v1 header part (tagged fields, if any, follow)
    size: int


class ServerConnection:
    def __init__(self, max_frame_size: int, max_in_flight: int = 1000) -> None:
        self._decoder = FrameDecoder(max_frame_size)
        self._in_flight: deque[int] = deque()
        self._out: list[bytes | bytearray | memoryview] = []
        self.max_in_flight = max_in_flight

    @property
    def max_frame_size(self) -> int:
        return self._decoder.max_frame_size

    @max_frame_size.setter
    def max_frame_size(self, size: int) -> None:
        """Change the frame size limit (a SASL listener's is lower until authentication); set
        :attr:`limit_name` alongside so the error names the right config key."""
        self._decoder.max_frame_size = size

    @property
    def limit_name(self) -> str:
        """The config key the frame size limit comes from (named in the error)."""
        return self._decoder.limit_name

    @limit_name.setter
    def limit_name(self, name: str) -> None:
        self._decoder.limit_name = name

    @property
    def pending_frame_size(self) -> int:
        """Declared size of the request frame being received (0 between frames)."""
        return self._decoder.pending_frame_size

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[IncomingRequest]:
        out = []
        for fr in self._decoder.feed(data):
            header, pos = parse_request_header(fr)
            if len(self._in_flight) >= self.max_in_flight:
                raise ProtocolError(f"more than {self.max_in_flight} requests in flight")
            self._in_flight.append(header.correlation_id)
            out.append(IncomingRequest(header, fr, pos, len(fr)))
        return out

    def send(self, correlation_id: int, parts: list[bytes | bytearray | memoryview]) -> None:
        """Queue a response (already framed parts). Must answer the oldest request first."""
        if not self._in_flight or self._in_flight[0] != correlation_id:
            raise ProtocolError(f"response for correlation id {correlation_id} is out of order")
        self._in_flight.popleft()
        self._out.extend(parts)

    def complete_without_response(self, correlation_id: int) -> None:
        """Produce with acks=0 gets no response; it still leaves the in-flight queue in order."""
        if not self._in_flight or self._in_flight[0] != correlation_id:
            raise ProtocolError(f"request {correlation_id} completed out of order")
        self._in_flight.popleft()

    def data_to_send(self) -> list[bytes | bytearray | memoryview]:
        out, self._out = self._out, []
        return out
