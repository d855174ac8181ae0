"""Fetch from the closest replica (KIP-392): which replica a consumer should read a partition from.

The leader of a partition answers a consumer's Fetch (v11+, which carries the client's
``rack_id``, librdkafka's and Java's ``client.rack``) with ``preferred_read_replica`` when the
broker's ``replica.selector.class`` names a selector and that selector picks a replica other than
the leader; the consumer then fetches from that replica, which serves records up to its own high
watermark.

* No ``replica.selector.class`` (Kafka's default): the leader never names another replica.
* :data:`RACK_AWARE` (Kafka's ``org.apache.kafka.common.replica.RackAwareReplicaSelector``, or
  strom's name ``rack-aware``): a client without a rack reads from the leader; otherwise the
  candidates are the leader and the followers in the ISR whose log end offset (as the leader
  saw it at their last fetch) has reached the fetch offset (Kafka's ``findPreferredReadReplica``);
  among those in the client's rack the leader if it is there, else the most caught-up one (the
  highest log end offset, then the shortest time since it was last caught up, then the lowest id);
  none in the rack: the leader.

Pure: the caller passes what the leader knows of each replica.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

KAFKA_RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
RACK_AWARE = "rack-aware"
SELECTORS = ("", KAFKA_RACK_AWARE, RACK_AWARE)


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """Kafka's ``ReplicaView``: one replica as the leader sees it."""

    node_id: int
    rack: str | None
    log_end_offset: int
    time_since_caught_up_ms: int


def selector_name(config_value: str) -> str | None:
    """The selector a ``replica.selector.class`` value names (None: no selector)."""
    value = config_value.strip()
    if not value:
        return None
    if value in (KAFKA_RACK_AWARE, RACK_AWARE):
        return RACK_AWARE
    raise ValueError(f"Class {value} cannot be found")


def preferred_read_replica(
    selector: str | None, client_rack: str | None, leader: ReplicaView, followers: Iterable[ReplicaView],
) -> int:
    """The replica the client should read from, -1 for the leader (Kafka never answers the
    leader's own id as ``preferred_read_replica``). ``followers``: the candidates (in the ISR,
    caught up to the fetch offset, alive on the client's listener)."""
    if selector is None or not client_rack:
        return -1
    if leader.rack == client_rack:
        return -1
    same_rack = [f for f in followers if f.rack == client_rack]
    if not same_rack:
        return -1
    best = min(same_rack, key=lambda f: (-f.log_end_offset, f.time_since_caught_up_ms, f.node_id))
    return best.node_id


__all__ = [
    "KAFKA_RACK_AWARE", "RACK_AWARE", "SELECTORS", "ReplicaView", "preferred_read_replica", "selector_name",
]
