"""The metadata quorum: Kafka's KRaft (KIP-595) as a sans-IO state machine.

``log`` defines what the state machine needs from its replicated log (Kafka's ``ReplicatedLog``)
and from the file that remembers the election state (Kafka's ``quorum-state``). Implementations:
an in-memory one for tests and the deterministic simulation (``strom.testing.raft``) and the
on-disk ``__cluster_metadata`` log on strom's own segment code (``strom.raft.metadata_log``).

``messages`` holds the KRaft RPCs (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch, FetchSnapshot)
flattened to their single partition, ``quorum`` the node (:class:`~strom.raft.quorum.RaftNode`):
``handle(now, sender, correlation_id, message)`` / ``poll(now)`` return the messages to send,
``next_deadline()`` says when to poll, ``append`` on the leader, committed batches go to a
:class:`~strom.raft.quorum.RaftListener`. The simulation that checks it is ``tests/simulation``.
"""
