"""The KRaft controller as a replayable state machine (see ``quorum_controller``)."""

from ..metadata.image import BrokerRegistration, PartitionRegistration
from .cluster_control import BrokerState, ClusterControlManager, broker_state
from .partitions import Election
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
    "broker_state",
]
