"""The KRaft controller as a replayable state machine (see ``quorum_controller``)."""

from .cluster_control import BrokerRegistration, BrokerState, ClusterControlManager
from .partitions import Election, PartitionRegistration
from .placement import StripedReplicaPlacer, UsableBroker
from .quorum_controller import ControllerConfig, QuorumController
from .replication_control import ReplicationControlManager
from .result import ControllerResult

__all__ = [
    "BrokerRegistration",
    "BrokerState",
    "ClusterControlManager",
    "ControllerConfig",
    "ControllerResult",
    "Election",
    "PartitionRegistration",
    "QuorumController",
    "ReplicationControlManager",
    "StripedReplicaPlacer",
    "UsableBroker",
]
