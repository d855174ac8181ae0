"""Connect's error handling (``errors.*``): tolerance, logging and the dead letter queue.

A failure in a converter, a transform or the sink's write is reported with its stage
(``KEY_CONVERTER``, ``VALUE_CONVERTER``, ``TRANSFORMATION``, ``TASK_PUT``, ``TASK_POLL``,
``KAFKA_PRODUCE``) and the class that failed:

- ``errors.tolerance=none`` (the default): the task fails with :class:`ToleranceExceeded`
  ("Tolerance exceeded in error handler"), which stops the connector's query;
- ``errors.tolerance=all``: the record is skipped, and it is never lost silently: a sink sends
  it to ``errors.deadletterqueue.topic.name`` when set (its original key, value, headers and
  timestamp; with ``errors.deadletterqueue.context.headers.enable=true`` the
  ``__connect.errors.*`` headers Kafka writes: topic, partition, offset, connector.name,
  task.id, stage, class.name, exception.class.name, exception.message, exception.stacktrace),
  and it is logged when ``errors.log.enable=true`` or when there is no dead letter queue (where
  Kafka would drop it without a word). ``errors.log.include.messages=true`` adds the record.
"""

from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass, field

from strom.connect.config import ConnectorConfig

log = logging.getLogger("strom.connect")

PREFIX = "__connect.errors."


class ToleranceExceeded(RuntimeError):
    """Connect's ``ConnectException("Tolerance exceeded in error handler")``."""


@dataclass
class RawRecord:
    """A record as read from Kafka (sinks) or from the source system (sources)."""

    topic: str | None
    partition: int | None
    offset: int | None
    timestamp: int | None
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    source_ref: str = ""  # sources: where the record came from (file and position)


@dataclass
class DeadLetter:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp: int | None


def java_exception_name(e: BaseException) -> str:
    name = getattr(e, "java_class", None)
    if isinstance(name, str):
        return name
    return f"{type(e).__module__}.{type(e).__qualname__}"


class ErrorHandler:
    def __init__(self, cfg: ConnectorConfig, task_id: int = 0) -> None:
        self.cfg = cfg
        self.task_id = task_id
        self.errors = cfg.errors
        self.dead_letters: list[DeadLetter] = []
        self.failed = 0
        self.logged = 0

    def drain(self) -> list[DeadLetter]:
        out, self.dead_letters = self.dead_letters, []
        return out

    def report(self, stage: str, executing_class: str, error: BaseException, raw: RawRecord) -> None:
        """Handles one failed record: raises :class:`ToleranceExceeded` (tolerance none), else
        logs it and/or queues it for the dead letter queue."""
        self.failed += 1
        where = (
            f"topic={raw.topic!r}, partition={raw.partition}, offset={raw.offset}"
            if raw.offset is not None
            else raw.source_ref or f"topic={raw.topic!r}"
        )
        msg = (
            f"Error encountered in task {self.cfg.name}-{self.task_id}. Executing stage '{stage}' with class "
            f"'{executing_class}', where consumed record is {{{where}}}: "
            f"{java_exception_name(error)}: {error}"
        )
        if self.errors.tolerance != "all":
            raise ToleranceExceeded(f"Tolerance exceeded in error handler: {msg}") from error
        use_dlq = bool(self.errors.dlq_topic) and self.cfg.kind == "sink" and raw.offset is not None
        if self.errors.log_enable or not use_dlq:
            detail = ""
            if self.errors.log_include_messages:
                detail = f" record key={raw.key!r} value={raw.value!r}"
            log.error("%s%s", msg, detail)
            self.logged += 1
        if use_dlq:
            headers = list(raw.headers)
            if self.errors.dlq_context_headers:
                headers += self._context_headers(stage, executing_class, error, raw)
            self.dead_letters.append(DeadLetter(raw.key, raw.value, headers, raw.timestamp))

    def _context_headers(
        self, stage: str, executing_class: str, error: BaseException, raw: RawRecord
    ) -> list[tuple[str, bytes | None]]:
        h: list[tuple[str, bytes | None]] = []
        if raw.topic is not None:
            h.append((PREFIX + "topic", raw.topic.encode()))
            h.append((PREFIX + "partition", str(raw.partition).encode()))
            h.append((PREFIX + "offset", str(raw.offset).encode()))
        h.append((PREFIX + "connector.name", self.cfg.name.encode()))
        h.append((PREFIX + "task.id", str(self.task_id).encode()))
        h.append((PREFIX + "stage", stage.encode()))
        h.append((PREFIX + "class.name", executing_class.encode()))
        h.append((PREFIX + "exception.class.name", java_exception_name(error).encode()))
        h.append((PREFIX + "exception.message", str(error).encode()))
        trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        h.append((PREFIX + "exception.stacktrace", trace.encode()))
        return h
