"""``strom dev-cluster --nodes N --dir D``: a local KRaft cluster in one command, for trying things.

Theory of operation. :class:`DevCluster` plans N combined nodes (``process.roles=broker,
controller``, ``node.id`` 1..N) on free loopback ports — one PLAINTEXT listener for clients and
one CONTROLLER listener each, every node with ``controller.quorum.voters`` naming all N — and
writes ``D/node-<id>/server.properties``. It then formats every node's directories with one
random cluster id (``strom storage format -t <id> -c <file>``, as kafka-storage.sh), starts one
``strom serve <file>`` per node with its output in ``D/node-<id>/server.log`` (nothing noisy on
the terminal), and prints the cluster id, the bootstrap servers and the controller ports, then
"all N node(s) are listening" once every broker port accepts connections.

Stopping: Ctrl-C (SIGINT) or SIGTERM stops every node — SIGTERM first (a broker's graceful
shutdown), SIGKILL for any still running after ``--shutdown-timeout-ms`` — and waits for each, so
no process is left behind. The nodes run in their own session, so a Ctrl-C in the terminal
reaches only this command, which stops them in order. On Linux each node also gets
``PR_SET_PDEATHSIG``: if this command itself is killed (even with SIGKILL) the kernel sends the
nodes SIGTERM. If a node exits on its own, the others are stopped too and the command exits 1,
naming the node and its log.

A directory that already holds a dev cluster (``D/node-1/server.properties``) is reused: the same
ports and cluster id, formatting skipped, so data survives a restart.

The commands run for format and serve are injectable (``python -m strom`` by default), which is
how the process management is tested without a quorum.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import signal
import socket
import subprocess
import sys
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from strom.cli.commands import CommandError
from strom.log.log_dirs import random_uuid

__all__ = ["DevCluster", "NodeSpec", "add_parser", "dev_cluster", "free_ports"]

HOST = "127.0.0.1"
CONFIG_NAME = "server.properties"
CLUSTER_ID_NAME = "cluster.id"


def add_parser(sub: Any) -> None:
    p = sub.add_parser("dev-cluster", help="run an N-node local KRaft cluster until Ctrl-C")
    p.add_argument(
        "--nodes", type=int, default=3, help="number of combined broker+controller nodes (default 3)"
    )
    p.add_argument(
        "--dir", required=True, metavar="D", help="directory for the nodes' configs, data and logs"
    )
    p.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="extra config for every node"
    )
    p.add_argument(
        "--shutdown-timeout-ms", type=int, default=30_000, help="SIGKILL nodes still running after this"
    )


def free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports (all held open until chosen, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((HOST, 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass(frozen=True)
class NodeSpec:
    node_id: int
    port: int
    controller_port: int
    dir: Path
    http_port: int = 0  # strom.http.listener (/metrics ...); 0: none (a config written before it)

    @property
    def config_path(self) -> Path:
        return self.dir / CONFIG_NAME

    @property
    def log_path(self) -> Path:
        return self.dir / "server.log"


def _default_format(config: Path, cluster_id: str) -> list[str]:
    # --cluster-id=ID: a random id may start with '-', which argparse takes for an option
    return [sys.executable, "-m", "strom", "storage", "format", f"--cluster-id={cluster_id}", "-c",
            str(config)]


def _default_serve(config: Path) -> list[str]:
    return [sys.executable, "-m", "strom", "serve", str(config)]


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class DevCluster:
    """Plans, formats, starts and stops the nodes. Not thread-safe; one per command."""

    def __init__(
        self,
        base_dir: Path,
        nodes: int,
        *,
        overrides: Sequence[str] = (),
        format_command: Callable[[Path, str], list[str]] | None = _default_format,
        serve_command: Callable[[Path], list[str]] = _default_serve,
        shutdown_timeout: float = 30.0,
    ) -> None:
        if nodes < 1:
            raise CommandError("--nodes must be at least 1", 2)
        self.base_dir = Path(base_dir)
        self.n = nodes
        self.overrides = list(overrides)
        for o in self.overrides:
            if "=" not in o:
                raise CommandError(f"--override {o!r} is not of the form key=value", 2)
        self.format_command = format_command
        self.serve_command = serve_command
        self.shutdown_timeout = shutdown_timeout
        self.specs: list[NodeSpec] = []
        self.cluster_id = ""
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    # -------------------------------------------------------------- plan

    def plan(self) -> bool:
        """Choose ports and write configs; reuse a previous dev cluster in the same directory.
        Returns whether the nodes still need formatting."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        id_file = self.base_dir / CLUSTER_ID_NAME
        existing = [self.base_dir / f"node-{i}" / CONFIG_NAME for i in range(1, self.n + 1)]
        if id_file.exists() and all(p.exists() for p in existing):
            self.cluster_id = id_file.read_text().strip()
            self.specs = [self._spec_from(p, i) for i, p in enumerate(existing, 1)]
            if self._voters_of(existing[0]) != self.n:
                raise CommandError(
                    f"--dir {self.base_dir} holds a dev cluster of another size; use --nodes "
                    f"{self._voters_of(existing[0])} or another --dir"
                )
            return False
        if any(self.base_dir.iterdir()):
            raise CommandError(f"--dir {self.base_dir} is not empty and holds no {self.n}-node dev cluster")
        ports = free_ports(3 * self.n)
        self.specs = [
            NodeSpec(i, ports[3 * (i - 1)], ports[3 * (i - 1) + 1], self.base_dir / f"node-{i}",
                     ports[3 * (i - 1) + 2])
            for i in range(1, self.n + 1)
        ]
        self.cluster_id = random_uuid()  # as kafka-storage: never starting with '-' (read as a flag)
        for s in self.specs:
            s.dir.mkdir(parents=True, exist_ok=True)
            s.config_path.write_text(self.config_text(s))
        id_file.write_text(self.cluster_id + "\n")
        return True

    @property
    def voters(self) -> str:
        return ",".join(f"{s.node_id}@{HOST}:{s.controller_port}" for s in self.specs)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{HOST}:{s.port}" for s in self.specs)

    def config_text(self, s: NodeSpec) -> str:
        lines = [
            "# written by strom dev-cluster",
            "process.roles=broker,controller",
            f"node.id={s.node_id}",
            f"controller.quorum.voters={self.voters}",
            f"listeners=PLAINTEXT://{HOST}:{s.port},CONTROLLER://{HOST}:{s.controller_port}",
            f"advertised.listeners=PLAINTEXT://{HOST}:{s.port}",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            f"log.dirs={s.dir / 'data'}",
            f"metadata.log.dir={s.dir / 'metadata'}",
            # every node's own HTTP port: they cannot all have strom.http.listener's default
            f"strom.http.listener=http://{HOST}:{s.http_port}" if s.http_port else "strom.http.listener=",
            *self.overrides,
        ]
        return "\n".join(lines) + "\n"

    @staticmethod
    def _props(path: Path) -> dict[str, str]:
        props = {}
        for line in path.read_text().splitlines():
            if "=" in line and not line.startswith("#"):
                k, v = line.split("=", 1)
                props[k.strip()] = v.strip()
        return props

    @classmethod
    def _voters_of(cls, path: Path) -> int:
        return len([v for v in cls._props(path).get("controller.quorum.voters", "").split(",") if v])

    @classmethod
    def _spec_from(cls, path: Path, node_id: int) -> NodeSpec:
        props = cls._props(path)
        try:
            listeners = dict(
                (name, int(addr.rsplit(":", 1)[1]))
                for name, addr in (item.split("://", 1) for item in props["listeners"].split(","))
            )
            http = props.get("strom.http.listener", "")
            http_port = int(http.rsplit(":", 1)[1]) if http.startswith("http://") else 0
            return NodeSpec(node_id, listeners["PLAINTEXT"], listeners["CONTROLLER"], path.parent, http_port)
        except (KeyError, ValueError, IndexError):
            raise CommandError(f"{path} is not a dev-cluster config (listeners)") from None

    # -------------------------------------------------------------- run

    def format(self) -> None:
        if self.format_command is None:
            return
        for s in self.specs:
            argv = self.format_command(s.config_path, self.cluster_id)
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                why = (done.stderr.strip() or done.stdout.strip()).splitlines()
                raise CommandError(
                    f"formatting node {s.node_id} failed: {why[-1] if why else done.returncode}"
                )

    def start(self) -> None:
        for s in self.specs:
            try:
                self.start_node(s.node_id)
            except CommandError:
                self.stop()
                raise

    def spec(self, node_id: int) -> NodeSpec:
        for s in self.specs:
            if s.node_id == node_id:
                return s
        raise KeyError(f"no node {node_id} in this cluster")

    def start_node(self, node_id: int) -> subprocess.Popen[bytes]:
        """Start one node (again: a node that exited may be started anew, on its own dirs)."""
        s = self.spec(node_id)
        running = self.procs.get(node_id)
        if running is not None and running.poll() is None:
            raise CommandError(f"node {node_id} is running already")
        log = s.log_path.open("ab")
        try:
            proc = subprocess.Popen(
                self.serve_command(s.config_path),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_set_pdeathsig if sys.platform.startswith("linux") else None,
            )
        except OSError as e:
            raise CommandError(f"cannot start node {node_id}: {e}") from None
        finally:
            log.close()
        self.procs[node_id] = proc
        return proc

    def exited(self) -> list[tuple[int, int]]:
        """``(node id, exit code)`` of nodes that are no longer running."""
        return [(i, rc) for i, p in self.procs.items() if (rc := p.poll()) is not None]

    def stop(self) -> None:
        """SIGTERM every node, SIGKILL those still running after the timeout, reap all."""
        for p in self.procs.values():
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.shutdown_timeout
        for p in self.procs.values():
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                p.wait()

    def summary(self) -> list[str]:
        lines = [
            f"strom dev-cluster: {self.n} node(s), cluster id {self.cluster_id}, in {self.base_dir}",
            f"bootstrap servers: {self.bootstrap_servers}",
            f"controller quorum voters: {self.voters}",
        ]
        for s in self.specs:
            lines.append(
                f"  node {s.node_id}: broker {HOST}:{s.port}  controller {HOST}:{s.controller_port}"
                + (f"  metrics http://{HOST}:{s.http_port}/metrics" if s.http_port else "")
                + f"  log {s.log_path}"
            )
        lines.append("Ctrl-C stops all nodes.")
        return lines


def _listening(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.05):
            return True
    except OSError:
        return False


class _Stop(Exception):
    pass


def _on_signal(signum: int, frame: types.FrameType | None) -> None:
    raise _Stop(signum)


def run_cluster(cluster: DevCluster, out: TextIO = sys.stdout, poll_interval: float = 0.2) -> int:
    """Plan, format, start, print; then wait for SIGINT/SIGTERM or a node's exit; stop all."""
    old = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            if cluster.plan():
                cluster.format()
            cluster.start()
            for line in cluster.summary():
                print(line, file=out, flush=True)
            waiting = [s.port for s in cluster.specs]
            while True:
                if waiting:
                    waiting = [port for port in waiting if not _listening(port)]
                    if not waiting:
                        print(f"all {cluster.n} node(s) are listening", file=out, flush=True)
                dead = cluster.exited()
                if dead:
                    node, rc = dead[0]
                    spec = next(s for s in cluster.specs if s.node_id == node)
                    raise CommandError(
                        f"node {node} exited with code {rc} (see {spec.log_path}); stopping all"
                    )
                time.sleep(poll_interval)
        except (_Stop, KeyboardInterrupt):
            print("stopping all nodes ...", file=out, flush=True)
            return 0
        finally:
            # no second signal may interrupt the shutdown half-way
            for sig in old:
                signal.signal(sig, signal.SIG_IGN)
            cluster.stop()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def dev_cluster(args: argparse.Namespace) -> int:
    cluster = DevCluster(
        Path(args.dir),
        args.nodes,
        overrides=args.override,
        shutdown_timeout=args.shutdown_timeout_ms / 1000,
    )
    return run_cluster(cluster)
