"""ISR changes proposed by partition leaders, sent to the controller (Kafka's
``AlterPartitionManager``).

Theory of operation: the replica manager decides that a follower caught up or fell behind and
calls :meth:`AlterPartitionManager.submit` with the ISR it wants. The partition is marked
``pending`` at once (no second change starts, and an expansion already counts for the HW, see
:mod:`strom.server.partition`); an AlterPartition v3 (topic ids, ``new_isr_with_epochs``) goes to
the active controller through the broker's controller channel. The answer carries the partition's
new state, applied at once (Kafka's leader does the same: it need not wait for the metadata
image); an error (a newer leader epoch, an outdated partition epoch, an ineligible replica, no
controller) only clears ``pending``: the image brings the truth, and the next fetch or ISR check
proposes again. A leader elected uncleanly (leader recovery state RECOVERING, KIP-704) proposes
its ISR at once, as RECOVERED. Changes are not batched per request (Kafka batches them); each is one request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..metadata.image import PartitionRegistration
from ..protocol import codec
from ..protocol.errors import ErrorCode
from .partition import Partition, PendingIsr

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("strom.replication")

ALTER_PARTITION = 56
ALTER_PARTITION_VERSION = 3
RETRY_BACKOFF_S = 0.5
RECOVERED = 0  # LeaderRecoveryState (KIP-704)  # a failed change is proposed again at the earliest after this


class AlterPartitionManager:
    def __init__(self, broker: Broker, broker_epoch: Callable[[], int]) -> None:
        self.broker = broker
        self.broker_epoch = broker_epoch
        self._tasks: set[asyncio.Task[None]] = set()

    def submit(self, p: Partition, isr: tuple[int, ...]) -> None:
        if p.pending is not None:
            return
        p.pending = PendingIsr(isr, p.partition_epoch, self.broker.clock.time_ms())
        task = asyncio.get_running_loop().create_task(self._send(p, p.pending), name="alter-partition")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, p: Partition, pending: PendingIsr) -> None:
        broker = self.broker
        info = broker.metadata_cache.topic(p.topic)
        try:
            if info is None:
                return
            request = {
                "broker_id": broker.node_id,
                "broker_epoch": self.broker_epoch(),
                "topics": [{
                    "topic_id": info.topic_id,
                    "partitions": [{
                        "partition_index": p.partition,
                        "leader_epoch": p.leader_epoch,
                        "new_isr_with_epochs": [
                            {"broker_id": b, "broker_epoch": -1} for b in pending.isr
                        ],
                        # Kafka's leader always asks for RECOVERED: after an unclean election
                        # (RECOVERING) it is the whole ISR, so its log is the partition's
                        "leader_recovery_state": RECOVERED,
                        "partition_epoch": pending.partition_epoch,
                    }],
                }],
            }
            channel = broker.quorum.channel if broker.quorum is not None else None
            if channel is None:
                return
            kio_request = codec.build(codec.request_type(ALTER_PARTITION, ALTER_PARTITION_VERSION), request)
            resp = await channel.call(ALTER_PARTITION, kio_request, ALTER_PARTITION_VERSION)
            if not self._answer(p, pending, resp):
                await asyncio.sleep(RETRY_BACKOFF_S)  # pending meanwhile: no new proposal
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning("AlterPartition of %s-%d to ISR %s failed: %s", p.topic, p.partition,
                        list(pending.isr), e)
            await asyncio.sleep(RETRY_BACKOFF_S)
        finally:
            if p.pending is pending:
                p.pending = None

    def _answer(self, p: Partition, pending: PendingIsr, resp: dict[str, Any]) -> bool:
        """Apply the answer; False when the change was refused."""
        top = int(resp.get("error_code", 0))
        if top != ErrorCode.NONE:
            log.warning("AlterPartition of %s-%d refused: %s", p.topic, p.partition, ErrorCode(top).name)
            return False
        ok = False
        for t in resp.get("topics", ()):
            for pd in t.get("partitions", ()):
                if int(pd["partition_index"]) != p.partition:
                    continue
                code = int(pd.get("error_code", 0))
                if code != ErrorCode.NONE:
                    log.info("AlterPartition of %s-%d to ISR %s: %s", p.topic, p.partition,
                             list(pending.isr), ErrorCode(code).name)
                    continue
                ok = True
                if p.pending is pending:
                    p.pending = None
                rm = self.broker.replica_manager
                rm.apply_partition(p.topic, p.partition, PartitionRegistration(
                    replicas=p.replicas, isr=tuple(int(b) for b in pd["isr"]), leader=int(pd["leader_id"]),
                    leader_epoch=int(pd["leader_epoch"]), partition_epoch=int(pd["partition_epoch"]),
                    leader_recovery_state=int(pd.get("leader_recovery_state", 0)),
                ))
        return ok

    async def close(self) -> None:
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


__all__ = ["AlterPartitionManager"]
