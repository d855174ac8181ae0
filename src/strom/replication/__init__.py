"""The decisions of ISR data replication, without I/O (no network, no asyncio).

* :mod:`strom.replication.leader` — the leader's handling of one follower's fetch of one
  partition (Kafka's ``Partition.fetchRecords`` for a replica with ``updateFollowerFetchState``):
  epoch checks (KIP-320), the divergence answer, the follower's state, the HW advance and the ISR
  expansion proposal. :meth:`strom.server.replica_manager.ReplicaManager.read_for_follower` calls it.
* :mod:`strom.replication.follower` — what a follower fetches for one partition and how it
  handles the leader's answer (Kafka's ``AbstractFetcherThread.processFetchRequest`` for one
  partition): append, truncation on a diverging epoch, HW update, out of range.
  :class:`strom.server.replica_fetcher.ReplicaFetcher` calls it.

The functions act on the objects the broker holds — :class:`strom.server.partition.Partition`
and :class:`strom.log.partition_log.PartitionLog` — and return what the caller must do over the
network (wake waiters, send an AlterPartition). The deterministic simulation
(``tests/simulation/replsim.py``) runs them as the broker does.
"""

from .follower import FetchAnswer, FollowerOutcome, fetch_partition, handle_fetch_answer, truncation_target
from .leader import FollowerFetch, handle_follower_fetch, leader_epoch_error

__all__ = [
    "FetchAnswer", "FollowerFetch", "FollowerOutcome", "fetch_partition", "handle_fetch_answer",
    "handle_follower_fetch", "leader_epoch_error", "truncation_target",
]
