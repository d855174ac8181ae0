"""The metadata quorum: Kafka's KRaft (KIP-595) as a sans-IO state machine.

``log`` defines what the state machine needs from its replicated log (Kafka's ``ReplicatedLog``)
and from the file that remembers the election state (Kafka's ``quorum-state``). Implementations:
an in-memory one for the deterministic simulation (``strom.testing``) and the on-disk
``__cluster_metadata`` log on strom's own segment code (``strom.raft.metadata_log``).
"""
