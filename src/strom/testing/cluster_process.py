"""Start a real cluster of ``strom serve`` processes on loopback ports (for tests and benches).

Theory of operation. :class:`ClusterProcess` is :class:`~strom.testing.broker_process.BrokerProcess`
for N nodes. It does not plan the nodes itself: it drives a
:class:`~strom.cli.dev_cluster.DevCluster` (the code behind ``strom dev-cluster``), so the configs
under test are exactly what users get from that command — N combined nodes
(``process.roles=broker,controller``, ``node.id`` 1..N, ``controller.quorum.voters`` naming all
N, a PLAINTEXT and a CONTROLLER listener each on free loopback ports), formatted with one random
cluster id by ``python -m strom storage format -t <id> -c <file>``, each node's output in
``<root>/node-<id>/server.log``. Extra settings (``overrides``, e.g. a shorter
``controller.quorum.election.timeout.ms``) go into every node's ``server.properties``.

Lifecycle: :meth:`start` plans, formats and starts every node and waits until each one's
PLAINTEXT port accepts connections; :meth:`wait_ready` then waits until the quorum has a leader
and every running node's Metadata lists every running broker. A single node can be stopped
(SIGTERM, a graceful shutdown: :meth:`stop`), killed (SIGKILL, like ``kill -9``: no chance to flush
or say goodbye: :meth:`kill`), frozen and thawed (SIGSTOP/SIGCONT: :meth:`pause`,
:meth:`resume`) and started again on its own dirs (:meth:`restart`,
:meth:`start_node`). :meth:`close` (also ``__exit__``) stops every node, SIGKILLs what is still
running after the shutdown timeout and reaps everything, so no process outlives a test; the nodes
also get ``PR_SET_PDEATHSIG`` from DevCluster, so they die if the test process itself is killed.

Looking at the cluster: every query names the node it asks (``node_bootstrap(id)``) and opens a
fresh :class:`strom.client.Client` bootstrapped on that node alone, so an answer is that node's
own view (a client that routes itself would hide which node answered). :meth:`active_controller`
asks the running nodes for DescribeQuorum and returns the leader id the first one that knows a
leader reports (a node that does not know one answers with leader -1 or an error; the next node is
asked). The synchronous helpers run their own event loop (``asyncio.run``): they are for tests and
benches, never for code running on a loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from strom.cli.dev_cluster import DevCluster, NodeSpec
from strom.client.client import Client, ClusterMetadata
from strom.client.cluster_admin import ClusterDescription, QuorumInfo, describe_cluster, describe_quorum
from strom.client.errors import KafkaError
from strom.client.messages import ApiKey

__all__ = ["DEFAULT_OVERRIDES", "ClusterProcess"]

T = TypeVar("T")

HOST = "127.0.0.1"

DEFAULT_OVERRIDES: tuple[str, ...] = (
    # fewer internal-topic partitions: a node is up sooner (each partition is a log to make)
    "offsets.topic.num.partitions=1",
    "transaction.state.log.num.partitions=1",
    "share.coordinator.state.topic.num.partitions=1",
    "group.initial.rebalance.delay.ms=0",
    # each codec loaded on its first request, not all at start-up (1-2 s a node)
    "strom.protocol.preload.schemas=false",
)


class ClusterProcess:
    """N combined ``strom serve`` nodes (see the module docstring). ``overrides``: ``key=value``
    lines added to every node's config (after :data:`DEFAULT_OVERRIDES`; a later line wins);
    ``node_overrides``: more lines for one node (e.g. its ``broker.rack``), after those."""

    def __init__(
        self,
        root: Path,
        nodes: int = 3,
        *,
        overrides: Sequence[str] = (),
        node_overrides: Mapping[int, Sequence[str]] | None = None,
        shutdown_timeout: float = 20.0,
        request_timeout_ms: int = 10_000,
    ) -> None:
        self.root = Path(root)
        self.n = nodes
        self.request_timeout_ms = request_timeout_ms
        self.dev = DevCluster(
            self.root,
            nodes,
            overrides=[*DEFAULT_OVERRIDES, *overrides],
            shutdown_timeout=shutdown_timeout,
        )
        self.node_overrides = {int(k): list(v) for k, v in (node_overrides or {}).items()}
        self.shutdown_timeout = shutdown_timeout
        self.paused: set[int] = set()  # SIGSTOPped (see pause): alive, but not answering

    # ------------------------------------------------------------------ topology

    @property
    def node_ids(self) -> list[int]:
        return [s.node_id for s in self.dev.specs]

    @property
    def cluster_id(self) -> str:
        return self.dev.cluster_id

    @property
    def bootstrap(self) -> str:
        """Every node's PLAINTEXT endpoint, comma-separated."""
        return self.dev.bootstrap_servers

    @property
    def voters(self) -> str:
        return self.dev.voters

    def spec(self, node_id: int) -> NodeSpec:
        return self.dev.spec(node_id)

    def node_bootstrap(self, node_id: int) -> str:
        return f"{HOST}:{self.spec(node_id).port}"

    def controller_endpoint(self, node_id: int) -> str:
        return f"{HOST}:{self.spec(node_id).controller_port}"

    def proc(self, node_id: int) -> subprocess.Popen[bytes] | None:
        return self.dev.procs.get(node_id)

    def is_running(self, node_id: int) -> bool:
        p = self.proc(node_id)
        return p is not None and p.poll() is None

    @property
    def running(self) -> list[int]:
        """The nodes that run and answer (a paused node is alive, but not listed)."""
        return [i for i in self.node_ids if self.is_running(i) and i not in self.paused]

    def log(self, node_id: int, tail: int = 5000) -> str:
        try:
            return self.spec(node_id).log_path.read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def logs(self, tail: int = 3000) -> str:
        """Every node's log tail, for assertion messages."""
        return "\n".join(f"---- node {i} ----\n{self.log(i, tail)}" for i in self.node_ids)

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 60.0) -> ClusterProcess:
        """Plan, format and start every node; wait until every PLAINTEXT port accepts."""
        if self.dev.plan():
            for node_id, lines in self.node_overrides.items():
                with self.spec(node_id).config_path.open("a") as f:
                    f.write("".join(f"{line}\n" for line in lines))
            self.dev.format()
        for i in self.node_ids:
            self.dev.start_node(i)
        try:
            self.wait_listening(self.node_ids, timeout)
        except BaseException:
            self.close()
            raise
        return self

    def start_node(self, node_id: int, timeout: float = 60.0) -> None:
        self.dev.start_node(node_id)
        self.wait_listening([node_id], timeout)

    def wait_listening(self, node_ids: Sequence[int], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        waiting = list(node_ids)
        while waiting:
            for i in list(waiting):
                p = self.proc(i)
                if p is None or p.poll() is not None:
                    rc = None if p is None else p.returncode
                    raise RuntimeError(f"node {i} exited with {rc}:\n{self.log(i)}")
                if _listening(self.spec(i).port):
                    waiting.remove(i)
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"nodes {waiting} not listening within {timeout}s:\n{self.logs()}")
            time.sleep(0.05)

    def stop(self, node_id: int, timeout: float | None = None) -> int:
        """Graceful stop (SIGTERM; SIGKILL after ``timeout``); returns the exit code."""
        p = self.proc(node_id)
        if p is None:
            return 0
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
            try:
                p.wait(self.shutdown_timeout if timeout is None else timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return p.returncode

    def kill(self, node_id: int) -> None:
        """kill -9: no chance to flush, resign or deregister."""
        p = self.proc(node_id)
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()

    def pause(self, node_id: int) -> None:
        """SIGSTOP: the process freezes (a long GC pause, a hung VM) with its sockets open."""
        p = self.proc(node_id)
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGSTOP)
            self.paused.add(node_id)

    def resume(self, node_id: int) -> None:
        """SIGCONT after :meth:`pause`."""
        self.paused.discard(node_id)
        p = self.proc(node_id)
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGCONT)

    def restart(self, node_id: int, timeout: float = 60.0) -> None:
        """Start a stopped or killed node again on its own dirs (stops it first if running)."""
        if self.is_running(node_id):
            self.stop(node_id)
        self.start_node(node_id, timeout)

    def close(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL after the shutdown timeout) and reap them (a
        paused node is continued first, so it can shut down)."""
        for i in self.node_ids:
            self.resume(i)
        self.dev.stop()

    def __enter__(self) -> ClusterProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ queries (one node each)

    def run(self, node_id: int, call: Callable[[Client], Awaitable[T]]) -> T:
        """``call(client)`` with a fresh client bootstrapped on ``node_id`` alone."""

        async def go() -> T:
            async with Client(
                self.node_bootstrap(node_id),
                request_timeout_ms=self.request_timeout_ms,
                connect_timeout_ms=2000,
                retries=0,
            ) as client:
                return await call(client)

        return asyncio.run(go())

    def request(self, node_id: int, api_key: int, data: Mapping[str, Any], timeout: float = 30.0) -> Any:
        """One request to ``node_id`` itself (no routing by the client); the decoded response."""

        async def call(client: Client) -> Any:
            host, port = self.node_bootstrap(node_id).rsplit(":", 1)
            conn = await client.connection(host, int(port))
            return await conn.request(api_key, data, timeout=timeout)

        return self.run(node_id, call)

    def metadata(self, node_id: int, topics: Sequence[str] | None = None) -> ClusterMetadata:
        """``node_id``'s own Metadata answer (all topics when ``topics`` is None)."""
        return self.run(node_id, lambda c: c.metadata(topics))

    def add_sasl_listener(self, properties: str) -> dict[int, int]:
        """Plan the cluster and give every node a SASL_PLAINTEXT listener on a port of its own
        (in its server.properties, as an operator would), with ``properties`` appended (the
        mechanisms, JAAS, authorizer ...); format. The SASL port by node id. Call before
        :meth:`start`."""
        from strom.cli.dev_cluster import free_ports

        assert self.dev.plan()
        ports = dict(zip(self.node_ids, free_ports(len(self.node_ids)), strict=True))
        for i in self.node_ids:
            s = self.spec(i)
            text = s.config_path.read_text()
            sasl = f"SASL_PLAINTEXT://{HOST}:{ports[i]}"
            text = text.replace(
                f"listeners=PLAINTEXT://{HOST}:{s.port},", f"listeners=PLAINTEXT://{HOST}:{s.port},{sasl},"
            )
            text = text.replace(
                f"advertised.listeners=PLAINTEXT://{HOST}:{s.port}\n",
                f"advertised.listeners=PLAINTEXT://{HOST}:{s.port},{sasl}\n",
            )
            text = text.replace(
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,",
            )
            assert text.count("SASL_PLAINTEXT") == 4, text
            s.config_path.write_text(text + properties)
        self.dev.format()
        return ports

    def partition_info(self, node_id: int, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
        """``topic``'s partitions as ``node_id``'s Metadata shows them: partition -> (leader,
        replicas, ISR)."""
        t = self.metadata(node_id, [topic]).topics[topic]
        return {p.partition: (p.leader, list(p.replicas), list(p.isr)) for p in t.partitions.values()}

    def describe_cluster(self, node_id: int) -> ClusterDescription:
        return self.run(node_id, lambda c: describe_cluster(c, include_fenced_brokers=True))

    def describe_quorum(self, node_id: int) -> QuorumInfo:
        return self.run(node_id, describe_quorum)

    def create_topics(
        self,
        node_id: int,
        topics: Mapping[str, tuple[int, int]],
        *,
        timeout_ms: int = 30_000,
        configs: Mapping[str, str] | None = None,
        client_timeout: float | None = None,
    ) -> dict[str, tuple[int, str | None]]:
        """CreateTopics sent to ``node_id``: ``{name: (partitions, replication factor)}`` ->
        ``{name: (error code, error message)}``. ``client_timeout`` (seconds; default the
        request's ``timeout_ms`` plus 10 s): how long to wait for the answer."""
        specs = [
            {
                "name": name,
                "num_partitions": p,
                "replication_factor": rf,
                "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
            }
            for name, (p, rf) in topics.items()
        ]
        resp = self.request(
            node_id,
            ApiKey.CREATE_TOPICS,
            {"topics": specs, "timeout": timeout_ms, "validate_only": False},
            timeout=timeout_ms / 1000 + 10 if client_timeout is None else client_timeout,
        )
        return {str(t.name): (int(t.error_code), getattr(t, "error_message", None)) for t in resp.topics}

    def delete_topics(
        self, node_id: int, names: Sequence[str], *, timeout_ms: int = 30_000
    ) -> dict[str, tuple[int, str | None]]:
        """DeleteTopics sent to ``node_id``: ``{name: (error code, error message)}``."""
        resp = self.request(
            node_id,
            ApiKey.DELETE_TOPICS,
            {
                "topic_names": list(names),
                "topics": [{"name": n, "topic_id": None} for n in names],
                "timeout": timeout_ms,
            },
            timeout=timeout_ms / 1000 + 10,
        )
        return {str(r.name): (int(r.error_code), getattr(r, "error_message", None)) for r in resp.responses}

    # ------------------------------------------------------------------ waiting

    def active_controller(self, timeout: float = 30.0, among: Sequence[int] | None = None) -> int:
        """The quorum leader's node id, as the first running node (of ``among``) that knows one
        reports it in DescribeQuorum; waits up to ``timeout`` for a leader to be known."""
        deadline = time.monotonic() + timeout
        last: object = None
        while True:
            for i in among if among is not None else self.running:
                if not self.is_running(i):
                    continue
                try:
                    q = self.describe_quorum(i)
                except (KafkaError, OSError) as e:
                    last = e
                    continue
                if q.leader_id >= 0 and self.is_running(q.leader_id):
                    return q.leader_id
                last = q
            if time.monotonic() > deadline:
                raise TimeoutError(f"no active controller within {timeout}s (last: {last!r})\n{self.logs()}")
            time.sleep(0.1)

    def wait_ready(self, timeout: float = 60.0) -> int:
        """Wait until the quorum has a running leader and every running node's Metadata lists
        every running broker; returns the active controller."""
        deadline = time.monotonic() + timeout
        leader = self.active_controller(timeout)
        want = set(self.running)
        last: object = None
        while True:
            pending = []
            for i in self.running:
                try:
                    brokers = set(self.metadata(i, []).brokers)
                except (KafkaError, OSError) as e:
                    last = e
                    pending.append(i)
                    continue
                if not want <= brokers:
                    last = (i, sorted(brokers))
                    pending.append(i)
            if not pending:
                return leader
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"nodes {pending} do not list brokers {sorted(want)} within {timeout}s "
                    f"(last: {last!r})\n{self.logs()}"
                )
            time.sleep(0.1)

    def wait_topic(
        self, topic: str, nodes: Sequence[int] | None = None, timeout: float = 30.0, *, present: bool = True
    ) -> float:
        """Wait until every node of ``nodes`` (default: running) lists ``topic`` with all its
        partitions led (or, ``present=False``, no longer lists it); returns the seconds waited."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        waiting = list(nodes if nodes is not None else self.running)
        while waiting:
            for i in list(waiting):
                try:
                    md = self.metadata(i, [topic])
                except (KafkaError, OSError):
                    continue
                t = md.topics.get(topic)
                there = t is not None and t.error_code == 0 and bool(t.partitions)
                if there and t is not None and any(p.leader < 0 for p in t.partitions.values()):
                    continue
                if there == present:
                    waiting.remove(i)
            if not waiting:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"topic {topic!r} {'not shown' if present else 'still shown'} by nodes {waiting} "
                    f"within {timeout}s\n{self.logs()}"
                )
            time.sleep(0.02)
        return time.monotonic() - t0


def _listening(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.2):
            return True
    except OSError:
        return False
