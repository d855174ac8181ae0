"""Replica placement for new partitions, after Kafka's ``StripedReplicaPlacer``.

Theory of operation. The brokers that can take a replica (registered, not in controlled shutdown)
are grouped by ``broker.rack``; brokers without a rack form one rack of their own. The racks are
visited round-robin and each rack hands out its brokers round-robin, so the replicas of one
partition land on as many racks as possible and successive partitions stripe across all brokers.
Each new partition starts one rack further on; within a rack, leaders and followers are handed
out by separate round-robin cursors, so every broker takes its turn at leading. Where the walk
starts (which rack, and which broker within each rack) is random, so that topics
created one after another do not all put their first leader on the same broker.

Rules:

* the first replica of a partition becomes its preferred leader, so it is always an unfenced
  broker; fenced brokers are only used for the other replicas, after every unfenced broker of a
  rack has been used (Kafka places on fenced brokers too: they come back);
* a partition never holds the same broker twice, so the replication factor cannot exceed the
  number of usable brokers (:class:`InvalidReplicationFactorError`, Kafka's message);
* with no unfenced broker at all nothing can be placed ("All brokers are currently fenced.").

The randomness is an injected ``random.Random``: the same seed and the same brokers give the same
placement.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass

from ..protocol.errors import ErrorCode, KafkaError


class InvalidReplicationFactorError(KafkaError):
    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_REPLICATION_FACTOR, message)


@dataclass(frozen=True, slots=True)
class UsableBroker:
    """A broker a replica may be placed on (Kafka's ``UsableBroker``)."""

    id: int
    rack: str | None
    fenced: bool


@dataclass(frozen=True, slots=True)
class PlacementSpec:
    start_partition: int
    num_partitions: int
    replication_factor: int


class _Rack:
    """One rack's brokers, handed out round-robin from a random offset: its leaders, its unfenced
    followers and its fenced followers each by their own cursor, so that every broker of the rack
    takes its turn at leading however often the rack is visited."""

    __slots__ = ("fenced", "next_fenced", "next_follower", "next_leader", "unfenced")

    def __init__(self, unfenced: list[int], fenced: list[int], rnd: random.Random) -> None:
        self.unfenced = unfenced
        self.fenced = fenced
        start = rnd.randrange(max(len(unfenced), len(fenced), 1))
        self.next_leader = start
        self.next_follower = start + 1
        self.next_fenced = start

    def take_leader(self) -> int | None:
        if not self.unfenced:
            return None
        broker = self.unfenced[self.next_leader % len(self.unfenced)]
        self.next_leader += 1
        return broker

    def take_follower(self, exclude: set[int], fenced: bool) -> int | None:
        brokers = self.fenced if fenced else self.unfenced
        for _ in range(len(brokers)):
            if fenced:
                broker = brokers[self.next_fenced % len(brokers)]
                self.next_fenced += 1
            else:
                broker = brokers[self.next_follower % len(brokers)]
                self.next_follower += 1
            if broker not in exclude:
                return broker
        return None


class StripedReplicaPlacer:
    """Places partitions' replicas across racks and brokers (see the module docstring)."""

    def __init__(self, rnd: random.Random) -> None:
        self._random = rnd

    def place(self, spec: PlacementSpec, brokers: Iterable[UsableBroker]) -> list[list[int]]:
        """Replica lists for ``spec.num_partitions`` partitions, the preferred leader first.

        Raises :class:`InvalidReplicationFactorError` when the factor is not positive, exceeds the
        usable brokers, or every broker is fenced.
        """
        usable = sorted(brokers, key=lambda b: b.id)
        rf = spec.replication_factor
        if rf <= 0:
            raise InvalidReplicationFactorError(
                "Invalid replication factor " + str(rf) + ": the replication factor must be positive."
            )
        if not any(not b.fenced for b in usable):
            raise InvalidReplicationFactorError("All brokers are currently fenced.")
        if rf > len(usable):
            raise InvalidReplicationFactorError(
                f"The target replication factor of {rf} cannot be reached because only "
                f"{len(usable)} broker(s) are registered."
            )
        by_rack: dict[str | None, tuple[list[int], list[int]]] = {}
        for b in usable:
            unfenced, fenced = by_rack.setdefault(b.rack, ([], []))
            (fenced if b.fenced else unfenced).append(b.id)
        rack_names = sorted(by_rack, key=lambda r: "" if r is None else "\x00" + r)
        self._random.shuffle(rack_names)
        racks: list[_Rack] = []
        for name in rack_names:
            unfenced, fenced = by_rack[name]
            self._random.shuffle(unfenced)
            self._random.shuffle(fenced)
            racks.append(_Rack(unfenced, fenced, self._random))
        offset = self._random.randrange(len(racks))
        return [self._place_one(racks, offset + p, rf) for p in range(spec.num_partitions)]

    @staticmethod
    def _place_one(racks: list[_Rack], start: int, rf: int) -> list[int]:
        n = len(racks)
        chosen: list[int] = []
        # the leader: from the first rack, walking from ``start``, that has an unfenced broker
        for i in range(n):
            leader = racks[(start + i) % n].take_leader()
            if leader is not None:
                chosen.append(leader)
                start += i
                break
        taken = set(chosen)
        # the followers: one rack after another, unfenced brokers before fenced ones
        for fenced in (False, True):
            misses = 0
            i = 1
            while len(chosen) < rf and misses < n:
                broker = racks[(start + i) % n].take_follower(taken, fenced)
                i += 1
                if broker is None:
                    misses += 1
                    continue
                misses = 0
                chosen.append(broker)
                taken.add(broker)
        return chosen
