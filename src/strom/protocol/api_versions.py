"""Advertised API version ranges, shaped like an Apache Kafka 4.0.1 broker.

The table is what a Kafka 4.0.1 broker (KRaft, no ClientTelemetry plugin) puts in its
ApiVersions response, restricted to the APIs strom implements. 4.0.1 differs from 4.0.0 only in
JoinGroup, whose v0/v1 came back (KAFKA-19444: older librdkafka with Kerberos joins with v0).

Clients decide features from this table: librdkafka enables MsgVer2 (needed for compression and
idempotence) only with Produce>=3 and Fetch>=4, ZSTD only with Produce>=7/Fetch>=10, and its
group consumer only with FindCoordinator/JoinGroup/SyncGroup/Heartbeat/LeaveGroup/OffsetCommit/
OffsetFetch present; kafka-python guesses the broker version from which APIs and versions are
listed (ListOffsets v10 makes it 4.0); Java clients 4.x refuse brokers below the KIP-896
minimums (Produce>=3, Fetch>=4, ListOffsets>=1, Metadata>=0, OffsetCommit>=2, OffsetFetch>=1 ...).

Two Kafka quirks are kept:

- Produce is *advertised* from v0 although only v3+ is accepted (``ADVERTISED_MIN``):
  librdkafka releases of Kafka 4.0's time produce compressed batches only if Produce v0 is
  listed (KAFKA-18659), so Kafka 4.0 lists it yet refuses v0-v2 requests (strom answers those
  as any unsupported version, see ``server/network.py``).
- GetTelemetrySubscriptions/PushTelemetry (KIP-714, keys 71/72) are not advertised: Kafka lists
  them only when a ClientTelemetry plugin is configured, and clients then never ask.

The broker advertises an API only when a handler for it is registered, so clients never rely on
something strom cannot answer.
"""

from __future__ import annotations

from collections.abc import Collection

# api_key -> (name, min_version, max_version): the versions accepted, as Kafka 4.0.1 has them.
KAFKA_API_RANGES: dict[int, tuple[str, int, int]] = {
    0: ("Produce", 3, 12),
    1: ("Fetch", 4, 17),
    2: ("ListOffsets", 1, 10),  # v10: TimeoutMs (KIP-1075)
    3: ("Metadata", 0, 13),  # v13: top-level ErrorCode (KIP-1102)
    8: ("OffsetCommit", 2, 9),
    9: ("OffsetFetch", 1, 9),
    10: ("FindCoordinator", 0, 6),
    11: ("JoinGroup", 0, 9),
    12: ("Heartbeat", 0, 4),
    13: ("LeaveGroup", 0, 5),
    14: ("SyncGroup", 0, 5),
    15: ("DescribeGroups", 0, 6),  # v6: GROUP_ID_NOT_FOUND + ErrorMessage (KIP-1043)
    16: ("ListGroups", 0, 5),
    17: ("SaslHandshake", 0, 1),
    18: ("ApiVersions", 0, 4),
    19: ("CreateTopics", 2, 7),
    20: ("DeleteTopics", 1, 6),
    21: ("DeleteRecords", 0, 2),
    22: ("InitProducerId", 0, 5),
    23: ("OffsetForLeaderEpoch", 2, 4),
    24: ("AddPartitionsToTxn", 0, 5),
    25: ("AddOffsetsToTxn", 0, 4),
    26: ("EndTxn", 0, 5),
    27: ("WriteTxnMarkers", 1, 1),  # between brokers: a transaction's markers (server/txn_marker_sender.py)
    28: ("TxnOffsetCommit", 0, 5),
    29: ("DescribeAcls", 1, 3),  # server/handlers/acls.py
    30: ("CreateAcls", 1, 3),
    31: ("DeleteAcls", 1, 3),
    32: ("DescribeConfigs", 1, 4),
    33: ("AlterConfigs", 0, 2),
    34: ("AlterReplicaLogDirs", 1, 2),
    35: ("DescribeLogDirs", 1, 4),
    36: ("SaslAuthenticate", 0, 2),
    37: ("CreatePartitions", 0, 3),
    43: ("ElectLeaders", 0, 2),  # forwarded to the controller (server/handlers/forwarding.py)
    42: ("DeleteGroups", 0, 2),
    44: ("IncrementalAlterConfigs", 0, 1),
    45: ("AlterPartitionReassignments", 0, 0),
    46: ("ListPartitionReassignments", 0, 0),
    47: ("OffsetDelete", 0, 0),
    48: ("DescribeClientQuotas", 0, 1),  # server/handlers/quotas.py
    49: ("AlterClientQuotas", 0, 1),
    50: ("DescribeUserScramCredentials", 0, 0),
    51: ("AlterUserScramCredentials", 0, 0),
    52: ("Vote", 0, 1),  # the KRaft RPCs (strom.server.handlers.raft); v2 is KIP-996 pre-vote
    53: ("BeginQuorumEpoch", 0, 1),
    54: ("EndQuorumEpoch", 0, 1),
    55: ("DescribeQuorum", 0, 2),  # v2: KIP-853 nodes
    56: ("AlterPartition", 2, 3),  # partition leaders' ISR changes (KIP-896 removed v0-1)
    58: ("Envelope", 0, 0),  # the controller's APIs (strom.server.handlers.controller)
    59: ("FetchSnapshot", 0, 1),
    60: ("DescribeCluster", 0, 2),  # v2: IncludeFencedBrokers/IsFenced (KIP-1073)
    61: ("DescribeProducers", 0, 0),
    62: ("BrokerRegistration", 0, 4),
    63: ("BrokerHeartbeat", 0, 1),
    65: ("DescribeTransactions", 0, 0),
    66: ("ListTransactions", 0, 1),
    67: ("AllocateProducerIds", 0, 0),
    68: ("ConsumerGroupHeartbeat", 0, 1),
    69: ("ConsumerGroupDescribe", 0, 1),
    73: ("AssignReplicasToDirs", 0, 0),  # KIP-858: a JBOD broker's replica dirs (controller only)
    75: ("DescribeTopicPartitions", 0, 0),
    # KIP-932 share groups, as a Kafka 4.2+ broker with share.version=1 advertises them
    76: ("ShareGroupHeartbeat", 1, 1),
    77: ("ShareGroupDescribe", 1, 1),
    78: ("ShareFetch", 1, 2),
    79: ("ShareAcknowledge", 1, 2),
    90: ("DescribeShareGroupOffsets", 0, 1),
    91: ("AlterShareGroupOffsets", 0, 0),
    92: ("DeleteShareGroupOffsets", 0, 0),
}

# where the advertised minimum differs from the accepted one (see the module doc)
ADVERTISED_MIN: dict[int, int] = {0: 0}  # Produce: KAFKA-18659

API_VERSIONS_KEY = 18

# The quorum's own RPCs (Vote, BeginQuorumEpoch, EndQuorumEpoch, FetchSnapshot) and the
# controller's APIs for brokers (Envelope, AlterPartition, BrokerRegistration, BrokerHeartbeat,
# AllocateProducerIds): accepted on every listener (strom has no separate controller network
# stack yet) but, as a Kafka 4.0 broker listener, not listed in ApiVersions: Kafka lists them on
# controller listeners only, and so does strom (``advertised(..., controller=True)``).
CONTROLLER_ONLY_APIS = frozenset({52, 53, 54, 56, 58, 59, 62, 63, 67, 73})


def api_name(api_key: int) -> str:
    entry = KAFKA_API_RANGES.get(api_key)
    return entry[0] if entry else f"api-{api_key}"


def advertised(
    registered: set[int] | frozenset[int], *, controller: bool = False
) -> list[tuple[int, int, int]]:
    """(api_key, min, max) for every registered API, in key order, as ApiVersions lists them
    (``controller``: on a controller listener, the controller-only APIs too)."""
    return [
        (k, ADVERTISED_MIN.get(k, lo), hi)
        for k, (_n, lo, hi) in sorted(KAFKA_API_RANGES.items())
        if k in registered and (controller or k not in CONTROLLER_ONLY_APIS)
    ]


def supports(api_key: int, version: int, registered: Collection[int]) -> bool:
    entry = KAFKA_API_RANGES.get(api_key)
    return entry is not None and api_key in registered and entry[1] <= version <= entry[2]
