"""Broker registrations, heartbeats and fencing: Kafka's ``ClusterControlManager`` and
``BrokerHeartbeatManager``.

Theory of operation.

*Replicated state* (changed only by :meth:`ClusterControlManager.replay`): the metadata image's
``BrokerRegistration`` per broker id: incarnation id, broker epoch, listeners, features, rack,
``fenced`` and ``in_controlled_shutdown``. A ``RegisterBrokerRecord`` replaces the registration (a
new broker epoch, fenced); ``BrokerRegistrationChangeRecord`` (and the older
``FenceBrokerRecord``/``UnfenceBrokerRecord``) flips the flags; ``UnregisterBrokerRecord`` removes it.

*Soft state* (active controller only, never in the log): when each broker last heartbeated. A
controller that becomes active (:meth:`activate`) starts every broker's session afresh, as Kafka's
new heartbeat manager does, so a failover does not fence the whole cluster.

A broker's epoch is the offset of its ``RegisterBrokerRecord`` in the metadata log: the runtime
passes the offset that record will get (its next write offset). A registration from a new
incarnation (a restarted broker) is refused with DUPLICATE_BROKER_REGISTRATION while the old
incarnation's session is still valid (unfenced and heard from within the session timeout), and
otherwise gets a new epoch and starts fenced; the same incarnation registering again (a retried
request) amends its registration: same epoch, same fenced / shutting-down state, new listeners,
rack and features (Kafka's "amending registration").

Heartbeat state machine (Kafka's ``BrokerHeartbeatManager.calculateNextBrokerState``):

============================  ==============================================================
current                       next
============================  ==============================================================
FENCED                        want_shut_down: SHUTDOWN_NOW; want_fence: FENCED; caught up
                              (current_metadata_offset >= the offset of its latest
                              RegisterBrokerRecord): UNFENCED; else FENCED
UNFENCED                      want_fence: SHUTDOWN_NOW if want_shut_down too, else FENCED;
                              want_shut_down: CONTROLLED_SHUTDOWN if it still leads a
                              partition, else SHUTDOWN_NOW; else UNFENCED
CONTROLLED_SHUTDOWN           SHUTDOWN_NOW once it leads nothing and every active broker has
                              replayed the log past the record that started the shutdown (so
                              they know the new leaders); else CONTROLLED_SHUTDOWN
SHUTDOWN_NOW                  SHUTDOWN_NOW
============================  ==============================================================

The records a transition needs (fencing removes the broker from every ISR and moves its
leaderships) are built by the replication manager; this module decides the transition.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from enum import Enum
from typing import Any

from ..metadata.image import BrokerRegistration
from ..metadata.records import (
    BROKER_FENCE_FENCED,
    BROKER_FENCE_UNFENCED,
    BrokerEndpoint,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from ..protocol.errors import ErrorCode, KafkaError
from .placement import UsableBroker

FENCE = BROKER_FENCE_FENCED
UNFENCE = BROKER_FENCE_UNFENCED
IN_CONTROLLED_SHUTDOWN = 1  # BrokerRegistrationChangeRecord.in_controlled_shutdown

DEFAULT_SESSION_TIMEOUT_MS = 9000
DEFAULT_HEARTBEAT_INTERVAL_MS = 2000  # broker.heartbeat.interval.ms: how often brokers call in


class BrokerState(Enum):
    FENCED = "FENCED"
    UNFENCED = "UNFENCED"
    CONTROLLED_SHUTDOWN = "CONTROLLED_SHUTDOWN"
    SHUTDOWN_NOW = "SHUTDOWN_NOW"


def broker_state(reg: BrokerRegistration) -> BrokerState:
    """Where a registration stands in the heartbeat state machine."""
    if reg.in_controlled_shutdown:
        return BrokerState.SHUTDOWN_NOW if reg.fenced else BrokerState.CONTROLLED_SHUTDOWN
    return BrokerState.FENCED if reg.fenced else BrokerState.UNFENCED


def is_active(reg: BrokerRegistration) -> bool:
    """Unfenced and not shutting down: may lead and join ISRs (Kafka's ``isActive``)."""
    return not reg.fenced and not reg.in_controlled_shutdown


class ClusterControlManager:
    def __init__(
        self,
        cluster_id: str | None = None,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
    ) -> None:
        self.cluster_id = cluster_id
        self.session_timeout_ms = session_timeout_ms
        self.registrations: dict[int, BrokerRegistration] = {}
        self._register_offsets: dict[int, int] = {}
        self._controlled_shutdown_offsets: dict[int, int] = {}
        # soft state: heartbeats (time, and how far each broker has replayed the log)
        self._last_contact_ms: dict[int, int] = {}
        self._metadata_offsets: dict[int, int] = {}

    # ---- queries -------------------------------------------------------------------------
    def registration(self, broker_id: int) -> BrokerRegistration | None:
        return self.registrations.get(broker_id)

    def is_active(self, broker_id: int) -> bool:
        reg = self.registrations.get(broker_id)
        return reg is not None and is_active(reg)

    def usable_brokers(self) -> Iterator[UsableBroker]:
        """Brokers new replicas may go to: registered and not shutting down."""
        for reg in self.registrations.values():
            if not reg.in_controlled_shutdown:
                yield UsableBroker(reg.id, reg.rack, reg.fenced)

    def check_broker_epoch(self, broker_id: int, broker_epoch: int) -> None:
        """Raises STALE_BROKER_EPOCH unless ``broker_id`` is registered with ``broker_epoch``."""
        reg = self.registrations.get(broker_id)
        if reg is None:
            raise KafkaError(
                ErrorCode.STALE_BROKER_EPOCH, f"No broker registration found for broker {broker_id}"
            )
        if reg.epoch != broker_epoch:
            raise KafkaError(
                ErrorCode.STALE_BROKER_EPOCH,
                f"Expected broker epoch {reg.epoch}, but got broker epoch {broker_epoch}",
            )

    def has_valid_session(self, broker_id: int, now_ms: int) -> bool:
        """Unfenced and heard from within ``broker.session.timeout.ms`` (a fenced broker has none)."""
        reg = self.registrations.get(broker_id)
        last = self._last_contact_ms.get(broker_id)
        if reg is None or reg.fenced or last is None:
            return False
        return now_ms - last <= self.session_timeout_ms

    # ---- soft state ----------------------------------------------------------------------
    def activate(self, now_ms: int) -> None:
        """This controller became active: every registered broker's session starts now."""
        self._last_contact_ms = dict.fromkeys(self.registrations, now_ms)

    def end_session(self, broker_id: int) -> None:
        """The broker is known to be gone (soft state only): its old incarnation may be replaced
        at once. A combined node's controller knows this of its own broker after a restart."""
        self._last_contact_ms.pop(broker_id, None)

    def touch(self, broker_id: int, now_ms: int, metadata_offset: int | None = None) -> None:
        self._last_contact_ms[broker_id] = now_ms
        if metadata_offset is not None:
            self._metadata_offsets[broker_id] = metadata_offset

    def session_deadline_ms(self, broker_id: int) -> int | None:
        last = self._last_contact_ms.get(broker_id)
        return None if last is None else last + self.session_timeout_ms

    def stale_brokers(self, now_ms: int) -> list[int]:
        """Unfenced brokers silent for ``broker.session.timeout.ms``, longest-silent first."""
        stale = [
            (last, b)
            for b, reg in self.registrations.items()
            if not reg.fenced
            and (last := self._last_contact_ms.get(b)) is not None
            and now_ms - last > self.session_timeout_ms
        ]
        return [b for _, b in sorted(stale)]

    # ---- operations ----------------------------------------------------------------------
    def register_broker(
        self,
        request: Any,
        broker_epoch: int,
        now_ms: int,
        finalized_features: dict[str, int],
    ) -> RegisterBrokerRecord:
        """The record registering the broker; raises KafkaError with Kafka's code and message."""
        broker_id = int(request.broker_id)
        cluster_id = getattr(request, "cluster_id", None)
        if self.cluster_id is not None and cluster_id is not None and str(cluster_id) != self.cluster_id:
            raise KafkaError(
                ErrorCode.INCONSISTENT_CLUSTER_ID,
                f"Expected cluster ID {self.cluster_id}, but got cluster ID {cluster_id}",
            )
        incarnation = uuid.UUID(str(request.incarnation_id))
        existing = self.registrations.get(broker_id)
        if (
            existing is not None
            and existing.incarnation_id != incarnation
            and self.has_valid_session(broker_id, now_ms)
        ):
            raise KafkaError(
                ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                "Another broker is registered with that broker id.",
            )
        features = tuple(
            BrokerFeature(
                name=str(f.name),
                min_supported_version=int(f.min_supported_version),
                max_supported_version=int(f.max_supported_version),
            )
            for f in request.features
        )
        offered = {f.name: f for f in features}
        for name, level in sorted(finalized_features.items()):
            f = offered.get(name)
            lo, hi = (f.min_supported_version, f.max_supported_version) if f else (0, 0)
            if not lo <= level <= hi:
                raise KafkaError(
                    ErrorCode.UNSUPPORTED_VERSION,
                    f"Unable to register because the broker does not support finalized version {level} of "
                    f"{name}. The broker wants a version between {lo} and {hi}, inclusive.",
                )
        listeners = tuple(
            BrokerEndpoint(
                name=str(listener.name),
                host=str(listener.host),
                port=int(listener.port),
                security_protocol=int(listener.security_protocol),
            )
            for listener in request.listeners
        )
        rack = request.rack if request.rack else None
        amend = existing is not None and existing.incarnation_id == incarnation
        return RegisterBrokerRecord(
            broker_id=broker_id,
            incarnation_id=incarnation,
            broker_epoch=existing.epoch if existing is not None and amend else broker_epoch,
            end_points=listeners,
            features=features,
            rack=rack,
            fenced=existing.fenced if existing is not None and amend else True,
            in_controlled_shutdown=existing.in_controlled_shutdown
            if existing is not None and amend
            else False,
            log_dirs=tuple(getattr(request, "log_dirs", None) or ()),  # KIP-858: its online dirs
        )

    def next_state(
        self, reg: BrokerRegistration, request: Any, leads_partitions: Callable[[], bool]
    ) -> BrokerState:
        """The heartbeat transition (table in the module docstring)."""
        state = broker_state(reg)
        if state is BrokerState.FENCED:
            if request.want_shut_down:
                return BrokerState.SHUTDOWN_NOW
            if request.want_fence:
                return BrokerState.FENCED
            caught_up = request.current_metadata_offset >= self.register_offset(reg.id)
            return BrokerState.UNFENCED if caught_up else BrokerState.FENCED
        if state is BrokerState.UNFENCED:
            if request.want_fence:
                return BrokerState.SHUTDOWN_NOW if request.want_shut_down else BrokerState.FENCED
            if request.want_shut_down:
                return BrokerState.CONTROLLED_SHUTDOWN if leads_partitions() else BrokerState.SHUTDOWN_NOW
            return BrokerState.UNFENCED
        if state is BrokerState.CONTROLLED_SHUTDOWN:
            if leads_partitions():
                return BrokerState.CONTROLLED_SHUTDOWN
            started = self._controlled_shutdown_offsets.get(reg.id, -1)
            if started <= self.lowest_active_offset():
                return BrokerState.SHUTDOWN_NOW
            return BrokerState.CONTROLLED_SHUTDOWN
        return BrokerState.SHUTDOWN_NOW

    def lowest_active_offset(self) -> int:
        """The lowest metadata offset an active broker reported (no active broker: no bound)."""
        offsets = [
            self._metadata_offsets.get(b, -1) for b, reg in self.registrations.items() if is_active(reg)
        ]
        return min(offsets, default=2**63 - 1)

    @staticmethod
    def fence_record(reg: BrokerRegistration) -> BrokerRegistrationChangeRecord:
        return BrokerRegistrationChangeRecord(broker_id=reg.id, broker_epoch=reg.epoch, fenced=FENCE)

    @staticmethod
    def unfence_record(reg: BrokerRegistration) -> BrokerRegistrationChangeRecord:
        return BrokerRegistrationChangeRecord(broker_id=reg.id, broker_epoch=reg.epoch, fenced=UNFENCE)

    @staticmethod
    def shutdown_now_record(reg: BrokerRegistration) -> BrokerRegistrationChangeRecord:
        return BrokerRegistrationChangeRecord(
            broker_id=reg.id,
            broker_epoch=reg.epoch,
            fenced=FENCE,
            in_controlled_shutdown=IN_CONTROLLED_SHUTDOWN,
        )

    @staticmethod
    def controlled_shutdown_record(reg: BrokerRegistration) -> BrokerRegistrationChangeRecord:
        return BrokerRegistrationChangeRecord(
            broker_id=reg.id, broker_epoch=reg.epoch, in_controlled_shutdown=IN_CONTROLLED_SHUTDOWN
        )

    @staticmethod
    def unregister_record(reg: BrokerRegistration) -> UnregisterBrokerRecord:
        return UnregisterBrokerRecord(broker_id=reg.id, broker_epoch=reg.epoch)

    # ---- replay --------------------------------------------------------------------------
    def register_offset(self, broker_id: int) -> int:
        """The offset of the broker's latest RegisterBrokerRecord: it is caught up once it has
        replayed the log that far (its epoch when the record came from a snapshot)."""
        reg = self.registrations[broker_id]
        return self._register_offsets.get(broker_id, reg.epoch)

    def replay(self, record: Any, offset: int | None = None) -> None:
        if isinstance(record, RegisterBrokerRecord):
            self.registrations[record.broker_id] = BrokerRegistration.from_record(record)
            self._controlled_shutdown_offsets.pop(record.broker_id, None)
            self._register_offsets[record.broker_id] = record.broker_epoch if offset is None else offset
        elif isinstance(record, UnregisterBrokerRecord):
            reg = self.registrations.get(record.broker_id)
            if reg is not None and reg.epoch == record.broker_epoch:
                del self.registrations[record.broker_id]
                self._register_offsets.pop(record.broker_id, None)
                self._controlled_shutdown_offsets.pop(record.broker_id, None)
                self._last_contact_ms.pop(record.broker_id, None)
        elif isinstance(record, BrokerRegistrationChangeRecord):
            reg = self._current(record.broker_id, record.broker_epoch)
            if reg is None:
                return
            fenced = {FENCE: True, UNFENCE: False}.get(record.fenced, reg.fenced)
            shutting = reg.in_controlled_shutdown or record.in_controlled_shutdown == IN_CONTROLLED_SHUTDOWN
            if shutting and not reg.in_controlled_shutdown and offset is not None:
                self._controlled_shutdown_offsets[reg.id] = offset
            self.registrations[reg.id] = replace(reg, fenced=fenced, in_controlled_shutdown=shutting,
                                                 directories=record.log_dirs or reg.directories)
        elif isinstance(record, FenceBrokerRecord | UnfenceBrokerRecord):
            reg = self._current(record.id, record.epoch)
            if reg is not None:
                self.registrations[reg.id] = replace(reg, fenced=isinstance(record, FenceBrokerRecord))

    def _current(self, broker_id: int, epoch: int) -> BrokerRegistration | None:
        reg = self.registrations.get(broker_id)
        return reg if reg is not None and reg.epoch == epoch else None

    def to_records(self) -> Iterable[RegisterBrokerRecord]:
        return [self.registrations[b].to_record() for b in sorted(self.registrations)]
