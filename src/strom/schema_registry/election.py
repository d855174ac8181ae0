"""Leader election among registry instances through a Kafka consumer group.

Every instance joins the group ``schema-registry`` subscribed to the one-partition ``_schemas``
topic, with its own URL as ``client.id``: the group gives that partition to exactly one member,
the leader, which does the writes. The others find the leader's URL by describing the group (the
member holding the partition) and forward writes to it. When the leader goes away the group
rebalances and another instance takes over (after the session timeout if it died).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger("strom.schema_registry")

GROUP = "schema-registry"


class LeaderElector:
    def __init__(self, client_config: dict[str, str], topic: str, my_url: str,
                 group: str = GROUP) -> None:
        from confluent_kafka import Consumer
        from confluent_kafka.admin import AdminClient

        self.topic, self.my_url, self.group = topic, my_url, group
        self.is_leader = False
        self._cached: tuple[float, str | None] = (0.0, None)
        self._stop = threading.Event()
        self.consumer = Consumer({**client_config, "group.id": group, "client.id": my_url,
                                  "enable.auto.commit": False, "session.timeout.ms": 10000,
                                  "heartbeat.interval.ms": 1000, "auto.offset.reset": "latest",
                                  "fetch.wait.max.ms": 500})
        self.admin = AdminClient(dict(client_config))  # type: ignore[arg-type]
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked,
                                on_lost=self._revoked)
        self._thread = threading.Thread(target=self._run, name="schemas-election", daemon=True)
        self._thread.start()

    def _assigned(self, consumer: Any, partitions: list[Any]) -> None:
        self.is_leader = any(p.partition == 0 for p in partitions)
        self._cached = (0.0, None)
        log.info("schema registry election: %s", "leader" if self.is_leader else "follower")

    def _revoked(self, consumer: Any, partitions: list[Any]) -> None:
        self.is_leader = False
        self._cached = (0.0, None)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.consumer.poll(0.5)  # records are read elsewhere; this keeps the membership alive

    def leader_url(self) -> str | None:
        """The leader's URL (this instance's own when it leads), or None while none is known."""
        if self.is_leader:
            return self.my_url
        at, url = self._cached
        if url is not None and time.monotonic() - at < 2.0:
            return url
        url = None
        try:
            desc = self.admin.describe_consumer_groups([self.group])[self.group].result(timeout=10)
            for m in desc.members:
                tps = m.assignment.topic_partitions if m.assignment else []
                if any(tp.topic == self.topic and tp.partition == 0 for tp in tps):
                    url = m.client_id
        except Exception as e:  # the group may be rebalancing
            log.info("cannot find the registry leader yet: %s", e)
        self._cached = (time.monotonic(), url)
        return url

    def forget_leader(self) -> None:
        self._cached = (0.0, None)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.consumer.close()
