"""The replication metrics on a real three-node cluster: one active controller among the nodes, a
follower killed shows as under-replicated partitions and ISR shrinks on the leaders (records
written after the kill make the dead follower lag), its return as ISR expands; each node serves
/metrics on its own HTTP port (dev-cluster's plan). Then /readyz: a node restarted alone of three
voters answers /healthz but is not ready (no quorum to finish its start) until a second voter is
back."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from strom.testing.cluster_process import ClusterProcess

pytestmark = pytest.mark.integration

confluent_kafka = pytest.importorskip("confluent_kafka")

OVERRIDES = (
    "broker.heartbeat.interval.ms=300",
    # the leaders' own ISR shrink (after replica.lag.time.max.ms) comes well before the controller
    # fences the dead broker (broker.session.timeout.ms), which would take it out of the ISRs itself
    # (not an ISR shrink of the leader's, in Kafka's count either)
    "broker.session.timeout.ms=8000",
    "replica.lag.time.max.ms=1500",
    "controller.quorum.election.timeout.ms=500",
    "controller.quorum.fetch.timeout.ms=1000",
    # the internal topics replicated too: with strom's default of 1, those on the killed node would
    # rightly count as offline partitions
    "offsets.topic.replication.factor=3",
    "transaction.state.log.replication.factor=3",
    "share.coordinator.state.topic.replication.factor=3",
)


def scrape(c: ClusterProcess, node: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{c.spec(node).http_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {s.name + "".join(f",{k}={v}" for k, v in sorted(s.labels.items())): float(s.value)
            for f in text_string_to_metric_families(text) for s in f.samples}


def total(c: ClusterProcess, nodes: list[int], name: str) -> float:
    return sum(scrape(c, n).get(name, 0.0) for n in nodes)


def wait_for(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.2)


def test_replication_metrics_on_three_nodes(tmp_path: Path) -> None:
    with ClusterProcess(tmp_path / "dc", 3, overrides=OVERRIDES) as c:
        c.wait_ready(90)
        nodes = [1, 2, 3]
        assert all(c.spec(n).http_port for n in nodes)
        assert len({c.spec(n).http_port for n in nodes}) == 3
        controller = c.active_controller()
        wait_for(lambda: total(c, nodes, "strom_active_controller") == 1, "one active controller")
        assert scrape(c, controller)["strom_active_controller"] == 1
        assert c.create_topics(controller, {"rep": (6, 3)})["rep"][0] == 0
        c.wait_topic("rep")
        wait_for(lambda: total(c, nodes, "strom_under_replicated_partitions") == 0, "all in sync")
        assert all(scrape(c, n)["strom_cluster_brokers"] == 3 for n in nodes)
        shrinks = total(c, nodes, "strom_isr_shrinks_total")
        victim = next(n for n in nodes if n != controller)
        c.kill(victim)
        alive = [n for n in nodes if n != victim]
        # writes after the kill: the dead follower falls behind the leaders' log end (a follower
        # at the log end is never shrunk away, as in Kafka: the controller's fencing removes it)
        producer = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap, "acks": 1})
        for p in range(6):
            producer.produce("rep", b"after the kill", partition=p)
        assert producer.flush(60) == 0
        # the leaders among the survivors drop the dead follower from their ISRs
        wait_for(lambda: total(c, alive, "strom_under_replicated_partitions") > 0, "under-replicated")
        wait_for(lambda: total(c, alive, "strom_isr_shrinks_total") > shrinks, "an ISR shrink")
        # rf 3 everywhere: the dead broker's partitions get new leaders (none offline for long)
        wait_for(lambda: total(c, alive, "strom_offline_partitions") == 0, "no offline partition")
        expands = total(c, alive, "strom_isr_expands_total")
        c.restart(victim)
        wait_for(lambda: total(c, nodes, "strom_isr_expands_total") > expands, "an ISR expand", 60)
        wait_for(lambda: total(c, nodes, "strom_under_replicated_partitions") == 0, "back in sync", 60)
        # /readyz while a node cannot finish its start: alone of three voters it has no quorum
        for n in nodes:
            c.kill(n)
        c.dev.start_node(1)  # (not ClusterProcess.start_node: that waits for the Kafka listener)
        url = f"http://127.0.0.1:{c.spec(1).http_port}"

        def get(path: str) -> tuple[int, str]:
            try:
                with urllib.request.urlopen(url + path, timeout=5) as r:
                    return r.status, r.read().decode()
            except urllib.error.HTTPError as e:
                return e.code, e.read().decode()
            except OSError:
                return 0, ""

        wait_for(lambda: get("/healthz")[0] == 200, "node 1's /healthz while it starts")
        status, body = get("/readyz")
        assert status == 503 and "starting" in body, body
        time.sleep(2)
        assert get("/readyz")[0] == 503  # still: no majority
        c.start_node(2)  # a majority again: node 1 finishes its start
        wait_for(lambda: get("/readyz") == (200, "ready\n"), "node 1 ready once it has a quorum", 60)
