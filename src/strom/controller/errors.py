"""Kafka error codes the controller answers with that ``protocol.errors.ErrorCode`` lacks.

Values are Kafka's (``org.apache.kafka.common.protocol.Errors``). Kept here so this branch does
not edit the shared enum; fold them into ``ErrorCode`` when branches merge.
"""

from __future__ import annotations

from enum import IntEnum


class ControllerErrorCode(IntEnum):
    STALE_BROKER_EPOCH = 77
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_CLUSTER_ID = 104
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
