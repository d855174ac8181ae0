"""Client-side errors: one exception type carrying Kafka's error code and name.

Error contract: every failure the client reports is a :class:`KafkaError`. Errors returned by a
broker carry the broker's code (``.code``) and Kafka's upper-case name (``.name``, e.g.
``UNKNOWN_TOPIC_OR_PARTITION``); transport failures are :class:`KafkaConnectionError`
(code 13, ``NETWORK_EXCEPTION``); a response the client cannot parse is
:class:`KafkaProtocolError` (code 2 is not used for it: it is ``-1`` / ``UNKNOWN_SERVER_ERROR``).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = [
    "KafkaConnectionError",
    "KafkaError",
    "KafkaProtocolError",
    "KafkaTimeoutError",
    "error_name",
    "raise_for_code",
]


def error_name(code: int) -> str:
    """Kafka's name for an error code (``3`` -> ``UNKNOWN_TOPIC_OR_PARTITION``)."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_ERROR_CODE_{code}"


def _retriable(code: int) -> bool:
    try:
        return bool(ErrorCode(code).retriable)
    except ValueError:
        return False


class KafkaError(Exception):
    """An error with a Kafka error code. ``str()`` gives ``NAME: message`` (message optional)."""

    def __init__(self, code: int, message: str | None = None) -> None:
        self.code = int(code)
        self.name = error_name(self.code)
        self.message = message
        self.retriable = _retriable(self.code)
        super().__init__(f"{self.name}: {message}" if message else self.name)


class KafkaConnectionError(KafkaError):
    """The broker could not be reached or closed the connection (NETWORK_EXCEPTION)."""

    def __init__(self, message: str) -> None:
        super().__init__(int(ErrorCode.network_exception), message)


class KafkaTimeoutError(KafkaError):
    """No response arrived in time (REQUEST_TIMED_OUT)."""

    def __init__(self, message: str) -> None:
        super().__init__(int(ErrorCode.request_timed_out), message)


class KafkaProtocolError(KafkaError):
    """A response could not be parsed or did not match the request."""

    def __init__(self, message: str) -> None:
        super().__init__(int(ErrorCode.unknown_server_error), message)


def raise_for_code(code: int, message: str | None = None) -> None:
    """Raise :class:`KafkaError` unless ``code`` is 0 (NONE)."""
    if code:
        raise KafkaError(code, message)
