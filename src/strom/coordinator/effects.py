"""What one step of a coordinator state machine produced: records and deferred answers.

State machines never do I/O. A step (a JoinGroup, a timer tick ...) mutates the group in memory
and collects into an :class:`Effects`:

* ``records`` to append to the group's ``__consumer_offsets`` partition, and
* ``completions``: answers for pending requests (JoinGroup/SyncGroup responses are
  :class:`Pending` values completed when a rebalance round ends, possibly by another request).

The runtime appends the records first and only then delivers the completions, so nothing is
acknowledged before it is durable (Kafka's ``CoordinatorResult(records, response)``): ``apply``
once the records are appended and replayed, ``answer`` once they are durable (the HW reached
them). If the append fails, ``on_failure`` callbacks undo what must be undone and every
completion becomes an error; if only the flush fails, the completions fail (:meth:`Effects.fail`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Pending(Generic[T]):
    """A response that will exist later. ``on_error`` builds the response for an error code."""

    __slots__ = ("_callbacks", "done", "on_error", "value")

    def __init__(self, on_error: Callable[[int], T]) -> None:
        self.on_error = on_error
        self.done = False
        self.value: T | None = None
        self._callbacks: list[Callable[[T], None]] = []

    def set(self, value: T) -> None:
        if self.done:
            return
        self.done = True
        self.value = value
        for cb in self._callbacks:
            cb(value)
        self._callbacks.clear()

    def fail(self, code: int) -> None:
        self.set(self.on_error(code))

    def add_callback(self, cb: Callable[[T], None]) -> None:
        if self.done:
            assert self.value is not None
            cb(self.value)
        else:
            self._callbacks.append(cb)

    def result(self) -> T:
        if not self.done or self.value is None:
            raise RuntimeError("pending response not completed")
        return self.value


@dataclass
class Effects:
    records: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    completions: list[tuple[Pending[Any], Any]] = field(default_factory=list)
    on_failure: list[Callable[[], None]] = field(default_factory=list)
    on_success: list[Callable[[], None]] = field(default_factory=list)

    def complete(self, pending: Pending[T], value: T) -> None:
        self.completions.append((pending, value))

    def deliver(self) -> None:
        """The records are durable: apply what waited for them and answer."""
        self.apply()
        self.answer()

    def apply(self) -> None:
        """The records were appended and replayed: run what completes the state change (under
        the runtime's lock, before the next step)."""
        callbacks, self.on_success = self.on_success, []
        for cb in callbacks:
            cb()

    def answer(self) -> None:
        """The records are durable (the HW reached them): answer the pending requests."""
        completions, self.completions = self.completions, []
        for pending, value in completions:
            pending.set(value)

    def fail(self, code: int) -> None:
        """The records were appended but could not be made durable: answer ``code``, undo
        nothing (the state is what the log holds)."""
        completions, self.completions = self.completions, []
        for pending, _value in completions:
            pending.fail(code)

    def abort(self, code: int) -> None:
        """The append failed: undo and answer every pending request with ``code``."""
        completions, self.completions = self.completions, []
        for cb in self.on_failure:
            cb()
        for pending, _value in completions:
            pending.fail(code)
        later, self.completions = self.completions, []
        for pending, value in later:  # answers the undo produced (e.g. REBALANCE_IN_PROGRESS)
            pending.set(value)
