"""Replica placement for new partitions, after Kafka's ``StripedReplicaPlacer``.

Theory of operation. The brokers that can take a replica (registered, not in controlled shutdown)
are grouped by ``broker.rack``; brokers without a rack form one rack of their own. The racks are
visited round-robin and each rack hands out its brokers round-robin, so the replicas of one
partition land on as many racks as possible and successive partitions stripe across all brokers.
Each new partition starts one rack further on, and one broker further on within every rack.
Where the walk starts (which rack, and which broker within each rack) is random, so that topics
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
    """One rack's brokers, unfenced first, handed out round-robin from a random offset."""

    __slots__ = ("fenced", "next_fenced", "next_unfenced", "offset", "unfenced")

    def __init__(self, unfenced: list[int], fenced: list[int], rnd: random.Random) -> None:
        self.unfenced = unfenced
        self.fenced = fenced
        self.offset = rnd.randrange(max(len(unfenced), len(fenced), 1))
        self.next_unfenced = self.next_fenced = 0

    def begin_partition(self) -> None:
        """Each partition starts one broker further on, so leaders and followers rotate."""
        self.next_unfenced = self.next_fenced = self.offset
        self.offset += 1

    def take_unfenced(self, exclude: set[int]) -> int | None:
        for _ in range(len(self.unfenced)):
            broker = self.unfenced[self.next_unfenced % len(self.unfenced)]
            self.next_unfenced += 1
            if broker not in exclude:
                return broker
        return None

    def take_fenced(self, exclude: set[int]) -> int | None:
        for _ in range(len(self.fenced)):
            broker = self.fenced[self.next_fenced % len(self.fenced)]
            self.next_fenced += 1
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
        for rack in racks:
            rack.begin_partition()
        chosen: list[int] = []
        taken: set[int] = set()
        # the leader: the first unfenced broker found walking the racks from ``start``
        for i in range(n):
            broker = racks[(start + i) % n].take_unfenced(taken)
            if broker is not None:
                chosen.append(broker)
                taken.add(broker)
                start += i
                break
        # the followers: one rack after another, unfenced brokers before fenced ones
        for take in ("unfenced", "fenced"):
            misses = 0
            i = 1
            while len(chosen) < rf and misses < n:
                rack = racks[(start + i) % n]
                broker = rack.take_unfenced(taken) if take == "unfenced" else rack.take_fenced(taken)
                i += 1
                if broker is None:
                    misses += 1
                    continue
                misses = 0
                chosen.append(broker)
                taken.add(broker)
        return chosen
