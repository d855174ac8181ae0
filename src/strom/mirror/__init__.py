"""``strom mirror``: MirrorMaker 2's replication, offset syncs, checkpoints and heartbeats on Spark."""

from strom.mirror.config import MirrorConfigError, MirrorMakerConfig, load_mm2, parse_mm2
from strom.mirror.policy import ReplicationPolicy, TopicFilter
from strom.mirror.records import Checkpoint, Heartbeat, OffsetSync, OffsetSyncStore

__all__ = [
    "Checkpoint",
    "Heartbeat",
    "MirrorConfigError",
    "MirrorMakerConfig",
    "OffsetSync",
    "OffsetSyncStore",
    "ReplicationPolicy",
    "TopicFilter",
    "load_mm2",
    "parse_mm2",
]
