"""A real three-node KRaft cluster (three ``strom serve`` processes, :class:`ClusterProcess`):
controller failover time, metadata propagation time and CreateTopics latency.

    PYTHONPATH=src python bench/kraft_cluster.py [--trials 10] [--topics 10] \
        [--election-timeouts 1000,300] [--create-runs 3] [--skip-create]

For each election timeout (``controller.quorum.election.timeout.ms``; ``fetch.timeout.ms`` is
twice it, Kafka's defaults being 1000/2000), on a fresh cluster:

* controller failover, ``--trials`` times: kill -9 of the active controller (DescribeQuorum's
  leader) -> the first CreateTopics sent to a surviving node that succeeds. The CreateTopics is
  sent at once after the kill; the node keeps it while no controller answers (its controller
  channel retries until the request's timeout, as a Kafka broker's forwarding does) and forwards
  it to the new controller, so one request usually measures the whole failover; an error answer
  is retried at the other survivor. The killed node is then restarted and the cluster waited for
  (all voters caught up, every node listing the three brokers) before the next trial.
* metadata propagation, ``--topics`` topics (CreateTopics sent to each node in turn): from the
  CreateTopics answer to the moment all three nodes' Metadata show the topic (each node polled
  over its own persistent connection, every ~2 ms).
* CreateTopics latency, one topic of 1, 100 and 1,000 partitions with replication factor 1 and 3
  (``--create-runs`` each; medians), sent to a node that is not the active controller (forwarded,
  the common case) and to the active controller.

Figures are medians with min and max, in milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from strom.client import Client
from strom.testing.cluster_process import ClusterProcess

NODES = (1, 2, 3)


def summary(xs: Sequence[float]) -> str:
    if not xs:
        return "-"
    return f"median {statistics.median(xs):8.1f}  min {min(xs):8.1f}  max {max(xs):8.1f}  (n={len(xs)})"


def wait_steady(c: ClusterProcess, timeout: float = 120.0) -> int:
    """All nodes running, every node listing all brokers, all voters at the leader's log end."""
    leader = c.wait_ready(timeout)
    deadline = time.monotonic() + timeout
    while True:
        q = c.describe_quorum(leader)
        ends = {v.replica_id: v.log_end_offset for v in q.voters}
        if q.leader_id == leader and len(set(ends.values())) == 1 and set(ends) == set(NODES):
            return leader
        if time.monotonic() > deadline:
            raise TimeoutError(f"voters not caught up: {q}")
        time.sleep(0.1)
        leader = c.active_controller(timeout)


def failover(c: ClusterProcess, trials: int) -> list[float]:
    out = []
    for trial in range(trials):
        old = wait_steady(c)
        survivors = [i for i in NODES if i != old]
        topic = f"failover-{trial}-{uuid.uuid4().hex[:6]}"
        c.kill(old)
        t0 = time.monotonic()
        attempt = 0
        while True:
            via = survivors[attempt % 2]
            attempt += 1
            try:
                code = c.create_topics(via, {topic: (1, 1)}, timeout_ms=30_000)[topic][0]
            except Exception:  # timed out or connection lost while the quorum elects
                code = -1
            if code in (0, 36):  # 36: an earlier attempt committed, its answer lost
                break
            if time.monotonic() - t0 > 120:
                raise TimeoutError(f"no CreateTopics succeeded within 120 s of the kill\n{c.logs()}")
            time.sleep(0.01)
        dt = (time.monotonic() - t0) * 1000
        out.append(dt)
        new = c.active_controller(among=survivors)
        print(f"  trial {trial + 1}: killed {old}, new controller {new}, {dt:.0f} ms ({attempt} attempts)")
        c.start_node(old)
    return out


async def _propagation(c: ClusterProcess, topics: int) -> list[float]:
    clients = {i: Client(c.node_bootstrap(i), request_timeout_ms=10_000) for i in NODES}
    try:
        for cl in clients.values():
            await cl.metadata([])  # connect and negotiate before measuring
        out = []
        for k in range(topics):
            via = NODES[k % 3]
            topic = f"prop-{k}-{uuid.uuid4().hex[:6]}"
            conn = await clients[via].any_connection()
            resp = await conn.request(
                19,
                {
                    "topics": [
                        {
                            "name": topic,
                            "num_partitions": 1,
                            "replication_factor": 3,
                            "assignments": [],
                            "configs": [],
                        }
                    ],
                    "timeout": 30000,
                    "validate_only": False,
                },
            )
            acked = time.monotonic()
            assert int(resp.topics[0].error_code) == 0, resp

            async def seen(cl: Client, topic: str = topic) -> float:
                deadline = time.monotonic() + 30
                while True:
                    md = await cl.metadata([topic])
                    t = md.topics.get(topic)
                    if t is not None and t.error_code == 0 and t.partitions:
                        return time.monotonic()
                    if time.monotonic() > deadline:
                        raise TimeoutError(topic)
                    await asyncio.sleep(0.002)

            times = await asyncio.gather(*(seen(cl) for cl in clients.values()))
            out.append(max(0.0, max(times) - acked) * 1000)
        return out
    finally:
        for cl in clients.values():
            await cl.close()


def create_latency(c: ClusterProcess, runs: int) -> dict[str, list[float]]:
    leader = wait_steady(c)
    follower = next(i for i in NODES if i != leader)
    out: dict[str, list[float]] = {}
    for partitions in (1, 100, 1000):
        for rf in (1, 3):
            for via, role in ((follower, "non-controller"), (leader, "controller")):
                key = f"{partitions:>4} partitions, RF {rf}, via {role}"
                for _ in range(runs):
                    topic = f"lat-{partitions}-{rf}-{uuid.uuid4().hex[:6]}"
                    t0 = time.monotonic()
                    result = c.create_topics(via, {topic: (partitions, rf)}, timeout_ms=60_000)
                    dt = (time.monotonic() - t0) * 1000
                    assert result[topic][0] == 0, result
                    out.setdefault(key, []).append(dt)
                    c.wait_topic(topic, NODES, timeout=120)
                    assert c.delete_topics(via, [topic])[topic][0] == 0
                    c.wait_topic(topic, NODES, timeout=120, present=False)
                print(f"  {key}: {summary(out[key])}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--topics", type=int, default=10)
    ap.add_argument("--election-timeouts", default="1000", help="comma-separated ms values (fetch = 2x)")
    ap.add_argument("--create-runs", type=int, default=3)
    ap.add_argument("--skip-create", action="store_true")
    ap.add_argument("--dir", help="keep the clusters here (default: a temporary dir)")
    args = ap.parse_args()
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="strom-kraft-cluster-"))
    for et in (int(x) for x in args.election_timeouts.split(",")):
        overrides = [
            f"controller.quorum.election.timeout.ms={et}",
            f"controller.quorum.fetch.timeout.ms={2 * et}",
        ]
        print(f"== 3 nodes, election timeout {et} ms, fetch timeout {2 * et} ms ({root / f'et{et}'})")
        c = ClusterProcess(root / f"et{et}", 3, overrides=overrides)
        c.start()
        try:
            wait_steady(c)
            results = {}
            print("controller failover (kill -9 -> first successful CreateTopics via a survivor):")
            results["failover"] = failover(c, args.trials)
            wait_steady(c)
            results["propagation"] = asyncio.run(_propagation(c, args.topics))
            if not args.skip_create and et == int(args.election_timeouts.split(",")[0]):
                print("CreateTopics latency:")
                create_latency(c, args.create_runs)
            print(f"controller failover (ms):  {summary(results['failover'])}")
            print(f"metadata propagation (ms): {summary(results['propagation'])}")
        except BaseException:
            print(c.logs(), file=sys.stderr)
            raise
        finally:
            c.close()


if __name__ == "__main__":
    main()
