"""A :class:`~strom.testing.cluster_process.ClusterProcess` whose nodes each run in a Linux
network namespace of their own, so that a test can cut one off the network (a network partition).

Theory of operation
-------------------
* **Topology.** :class:`NetnsNetwork` makes a bridge in the root namespace with the subnet's
  first address (``10.77.0.1/24`` by default) and, per node ``i``, a namespace and a veth pair:
  one end on the bridge, the other inside the namespace with address ``10.77.0.<10+i>`` (and
  the namespace's loopback up). The test process (root namespace) reaches every node through
  the bridge; nodes reach each other through it too. Names carry the test process's pid, so
  two runs do not collide on names; the subnet is a parameter.
* **Nodes.** :class:`NetnsCluster` plans the same combined nodes as ``strom dev-cluster`` (its
  configs, formatting and overrides) but every node listens on its own address (PLAINTEXT on
  9092, CONTROLLER on 9093: each namespace has its own ports), the quorum voters and the
  bootstrap list name those addresses, and each ``strom serve`` is started under
  ``ip netns exec <ns>`` (which execs: the process the test signals is the node itself).
* **Faults.** :meth:`NetnsCluster.isolate` takes the node's bridge-side veth down: nothing
  reaches the node and nothing leaves it, in either direction, while the process runs on
  (sockets open, timers firing): a network partition with the node alone on one side.
  :meth:`NetnsCluster.heal` brings the link up again.
* **Cleanup.** :meth:`NetnsCluster.close` stops the nodes, then deletes the namespaces (their
  veth pairs go with them) and the bridge; it also runs at interpreter exit, so an aborted test
  leaves nothing behind. :func:`netns_unavailable` says why this cannot run here (not root, no
  ``ip``, namespaces refused), for a clear skip.
"""

from __future__ import annotations

import atexit
import ipaddress
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from strom.cli.dev_cluster import DevCluster, NodeSpec

from .cluster_process import ClusterProcess

__all__ = ["NetnsCluster", "NetnsNetwork", "netns_unavailable"]

BROKER_PORT = 9092
CONTROLLER_PORT = 9093


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")
    return done


def netns_unavailable() -> str | None:
    """Why network namespaces cannot be used here, or None when they can."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN, CAP_SYS_ADMIN)"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    probe = f"stromprobe{os.getpid()}"
    done = _ip("netns", "add", probe, check=False)
    if done.returncode != 0:
        return f"`ip netns add` refused: {done.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    veth = f"sp{os.getpid() % 100_000}"
    done = _ip("link", "add", veth + "a", "type", "veth", "peer", "name", veth + "b", check=False)
    if done.returncode != 0:
        return f"`ip link add ... type veth` refused: {done.stderr.strip()}"
    _ip("link", "del", veth + "a", check=False)
    return None


class NetnsNetwork:
    """The bridge, namespaces and veth pairs of ``nodes`` nodes (see the module docstring)."""

    def __init__(self, nodes: Sequence[int], subnet: str = "10.77.0.0/24") -> None:
        self.nodes = list(nodes)
        self.net = ipaddress.ip_network(subnet)
        tag = os.getpid() % 100_000
        self.bridge = f"sbr{tag}"
        self._ns = {i: f"strom{tag}-n{i}" for i in self.nodes}
        self._host_veth = {i: f"sv{tag}h{i}" for i in self.nodes}
        self.up = False

    def namespace(self, node: int) -> str:
        return self._ns[node]

    def address(self, node: int) -> str:
        return str(self.net.network_address + 10 + node)

    def host_veth(self, node: int) -> str:
        return self._host_veth[node]

    def create(self) -> None:
        atexit.register(self.destroy)
        self.up = True
        gateway = f"{self.net.network_address + 1}/{self.net.prefixlen}"
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", gateway, "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i in self.nodes:
            ns, host = self._ns[i], self._host_veth[i]
            inner = f"sv{os.getpid() % 100_000}n{i}"
            _ip("netns", "add", ns)
            _ip("link", "add", host, "type", "veth", "peer", "name", inner)
            _ip("link", "set", host, "master", self.bridge)
            _ip("link", "set", host, "up")
            _ip("link", "set", inner, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{self.address(i)}/{self.net.prefixlen}", "dev", inner)
            _ip("-n", ns, "link", "set", inner, "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def set_link(self, node: int, up: bool) -> None:
        _ip("link", "set", self._host_veth[node], "up" if up else "down")

    def destroy(self) -> None:
        """Delete the namespaces (with their veth pairs) and the bridge; idempotent."""
        if not self.up:
            return
        self.up = False
        for i in self.nodes:
            _ip("netns", "del", self._ns[i], check=False)
            _ip("link", "del", self._host_veth[i], check=False)
        _ip("link", "del", self.bridge, check=False)
        atexit.unregister(self.destroy)


class _NetnsDevCluster(DevCluster):
    """DevCluster's nodes, each on its own address (fixed ports) and started in its namespace."""

    def __init__(self, network: NetnsNetwork, base_dir: Path, nodes: int, **kw: object) -> None:
        self.network = network

        def serve(config: Path) -> list[str]:
            node = int(config.parent.name.rsplit("-", 1)[1])  # <root>/node-<id>/server.properties
            return ["ip", "netns", "exec", network.namespace(node),
                    sys.executable, "-m", "strom", "serve", str(config)]

        super().__init__(base_dir, nodes, serve_command=serve, **kw)  # type: ignore[arg-type]

    def plan(self) -> bool:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if any(self.base_dir.iterdir()):
            raise RuntimeError(f"{self.base_dir} is not empty")
        self.specs = [NodeSpec(i, BROKER_PORT, CONTROLLER_PORT, self.base_dir / f"node-{i}")
                      for i in range(1, self.n + 1)]
        from strom.log.log_dirs import random_uuid

        self.cluster_id = random_uuid()
        for s in self.specs:
            s.dir.mkdir(parents=True, exist_ok=True)
            s.config_path.write_text(self.config_text(s))
        return True

    @property
    def voters(self) -> str:
        net = self.network
        return ",".join(f"{s.node_id}@{net.address(s.node_id)}:{s.controller_port}" for s in self.specs)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{self.network.address(s.node_id)}:{s.port}" for s in self.specs)

    def config_text(self, s: NodeSpec) -> str:
        host = self.network.address(s.node_id)
        text = super().config_text(s)
        return text.replace(f"127.0.0.1:{s.port}", f"{host}:{s.port}").replace(
            f"127.0.0.1:{s.controller_port}", f"{host}:{s.controller_port}")


class NetnsCluster(ClusterProcess):
    """Three (``nodes``) combined nodes, each in its own network namespace (module docstring)."""

    def __init__(self, root: Path, nodes: int = 3, *, subnet: str = "10.77.0.0/24",
                 overrides: Sequence[str] = (), shutdown_timeout: float = 20.0,
                 request_timeout_ms: int = 10_000) -> None:
        super().__init__(root, nodes, overrides=overrides, shutdown_timeout=shutdown_timeout,
                         request_timeout_ms=request_timeout_ms)
        self.network = NetnsNetwork(range(1, nodes + 1), subnet)
        self.dev = _NetnsDevCluster(self.network, self.root, nodes, overrides=self.dev.overrides,
                                    shutdown_timeout=shutdown_timeout)
        self.isolated: set[int] = set()

    def start(self, timeout: float = 60.0) -> NetnsCluster:
        try:
            self.network.create()
            super().start(timeout)
        except BaseException:
            self.close()
            raise
        return self

    def node_bootstrap(self, node_id: int) -> str:
        return f"{self.network.address(node_id)}:{self.spec(node_id).port}"

    def controller_endpoint(self, node_id: int) -> str:
        return f"{self.network.address(node_id)}:{self.spec(node_id).controller_port}"

    @property
    def running(self) -> list[int]:
        return [i for i in super().running if i not in self.isolated]

    def wait_listening(self, node_ids: Sequence[int], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        waiting = list(node_ids)
        while waiting:
            for i in list(waiting):
                p = self.proc(i)
                if p is None or p.poll() is not None:
                    rc = None if p is None else p.returncode
                    raise RuntimeError(f"node {i} exited with {rc}:\n{self.log(i)}")
                try:
                    with socket.create_connection((self.network.address(i), self.spec(i).port), timeout=0.2):
                        waiting.remove(i)
                except OSError:
                    pass
            if waiting and time.monotonic() > deadline:
                raise RuntimeError(f"nodes {waiting} not listening within {timeout}s:\n{self.logs()}")
            time.sleep(0.05)

    def isolate(self, node_id: int) -> None:
        """Cut ``node_id`` off: its veth goes down (both directions, every peer and client)."""
        self.network.set_link(node_id, False)
        self.isolated.add(node_id)

    def heal(self, node_id: int) -> None:
        self.network.set_link(node_id, True)
        self.isolated.discard(node_id)

    def close(self) -> None:
        try:
            for i in list(self.isolated):
                self.heal(i)  # so that a graceful stop can reach the quorum
        except RuntimeError:
            pass
        try:
            super().close()
        finally:
            self.network.destroy()
