"""``strom storage`` (kafka-storage.sh) and the start-up checks of ``strom serve``, as processes.

A node configured as one of a multi-node quorum (``controller.quorum.voters`` set) starts only
on dirs ``strom storage format`` formatted. Every bad set-up refuses to start with one line
naming the setting and no traceback: bad KRaft settings exit 2 (strom's exit code for a
configuration error), dirs that do not fit the config exit 1 (Kafka's). Records produced before
are all there after the refused starts. Plain ``strom serve`` still formats its own dirs.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

N = 50


def strom(*args: str, stdin: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strom", *args],
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def snapshot(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))
    }


class Node:
    """One combined node of a quorum (controller.quorum.voters set): its server.properties and its
    broker."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.data = tmp / "data"
        self.broker = BrokerProcess(
            self.data, listeners={"PLAINTEXT": "PLAINTEXT", "CONTROLLER": "PLAINTEXT"}
        )
        self.controller_port = self.broker.ports["CONTROLLER"]
        self.settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.listener.names": "CONTROLLER",
            # one voter: a node of a three-voter quorum would wait for a majority (the other
            # voters) before serving; the format checks are the same for any voters
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.broker.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data),
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.num.partitions": "1",
        }
        self.broker.overrides = [
            f"{k}={v}" for k, v in self.settings.items() if k not in ("listeners", "log.dirs")
        ]
        self.properties = tmp / "server.properties"
        self.properties.write_text("".join(f"{k}={v}\n" for k, v in self.settings.items()))

    def serve(self, *overrides: str) -> subprocess.CompletedProcess[str]:
        """A start expected to fail at once."""
        args = ["serve", str(self.properties)]
        for o in overrides:
            args += ["--override", o]
        return strom(*args, timeout=60)


def refused(r: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    out = r.stdout + r.stderr
    assert r.returncode == code, out
    assert "Traceback" not in out, out
    errors = [line for line in out.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, out
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])


def produce_and_check(node: Node, topic: str) -> None:
    b = node.broker.bootstrap
    r = strom("topics", "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", "2")
    assert r.returncode == 0, r.stderr
    lines = "".join(f"value-{i}\n" for i in range(N)).encode()
    r = strom("produce", "--bootstrap-server", b, "--topic", topic, stdin=lines)
    assert r.returncode == 0, r.stderr
    consume_all(node, topic)


def consume_all(node: Node, topic: str) -> None:
    r = strom(
        "consume",
        "--bootstrap-server",
        node.broker.bootstrap,
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        str(N),
        "--timeout-ms",
        "20000",
    )
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == sorted(f"value-{i}" for i in range(N))


def test_storage_tool(tmp_path: Path) -> None:
    ids = {strom("storage", "random-uuid").stdout.strip() for _ in range(3)}
    assert len(ids) == 3 and all(re.fullmatch(r"[A-Za-z0-9_-]{22}", i) for i in ids)
    node = Node(tmp_path)
    cfg = str(node.properties)
    r = strom("storage", "info", "-c", cfg)
    assert r.returncode == 1 and f"{node.data} does not exist" in r.stdout, r.stdout
    cluster_id = ids.pop()
    r = strom("storage", "format", "-t", cluster_id, "-c", cfg)
    assert r.returncode == 0, r.stderr
    # the first log dir is metadata.log.dir too (Kafka calls it the metadata directory)
    assert (
        r.stdout == f"Formatting metadata directory {node.data} with cluster.id {cluster_id} and node.id 1.\n"
    )
    text = (node.data / "meta.properties").read_text()
    assert re.fullmatch(
        rf"#\n#\w{{3}} \w{{3}} \d\d \d\d:\d\d:\d\d UTC \d{{4}}\ncluster\.id={cluster_id}\n"
        r"directory\.id=[A-Za-z0-9_-]{22}\nnode\.id=1\nversion=1\n",
        text,
    ), text
    r = strom("storage", "info", "-c", cfg)
    assert r.returncode == 0 and f"Found metadata: {{cluster.id={cluster_id}, directory.id=" in r.stdout
    # formatted already: refused, unless --ignore-formatted; another cluster: refused either way
    r = strom("storage", "format", "-t", cluster_id, "-c", cfg)
    assert r.returncode == 1 and "is already formatted. Use --ignore-formatted" in r.stderr
    r = strom("storage", "format", "-t", cluster_id, "-c", cfg, "--ignore-formatted")
    assert r.returncode == 0 and "All of the log directories are already formatted." in r.stdout
    r = strom("storage", "format", "-t", "another", "-c", cfg, "-g")
    assert r.returncode == 1 and "cluster.id another does not match" in r.stderr
    # --override; metadata.log.dir gets its own meta.properties
    meta_dir = tmp_path / "meta"
    r = strom(
        "storage", "format", "-t", cluster_id, "-c", cfg, "-g", "--override", f"metadata.log.dir={meta_dir}"
    )
    assert r.returncode == 0 and f"Formatting metadata directory {meta_dir}" in r.stdout, r.stderr
    r = strom(
        "storage",
        "info",
        "-c",
        cfg,
        "--override",
        "node.id=2",
        "--override",
        f"controller.quorum.voters=2@127.0.0.1:{node.controller_port}",
    )
    assert r.returncode == 1 and "has node.id 1, but the config's node.id is 2" in r.stdout
    # a bad config or flag: exit 2, one line
    for args, needle in [
        (("--override", "controller.quorum.voters=1@nohost"), "controller.quorum.voters"),
        (("--standalone",), "--standalone makes this controller a quorum of itself"),
        (
            (
                "--standalone",
                "--override",
                "process.roles=broker",
                "--override",
                "node.id=9",
                "--override",
                f"listeners=PLAINTEXT://127.0.0.1:{node.broker.port}",
            ),
            "You can only use --standalone on a controller.",
        ),
    ]:
        r = strom("storage", "format", "-t", cluster_id, "-c", cfg, "-g", *args)
        assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = strom("storage", "format", "-c", cfg)
    assert r.returncode == 2 and "--cluster-id" in r.stderr


def test_bad_setups_refuse_to_start_and_lose_nothing(tmp_path: Path) -> None:
    node = Node(tmp_path)
    # voters set, dir not formatted: refused, and nothing is created
    refused(node.serve(), 1, "No meta.properties found in", "strom storage format")
    assert not node.data.exists()
    cluster_id = strom("storage", "random-uuid").stdout.strip()
    assert strom("storage", "format", "-t", cluster_id, "-c", str(node.properties)).returncode == 0
    # a second node's dir, formatted for node 2
    other = tmp_path / "other"
    r = strom(
        "storage",
        "format",
        "-t",
        cluster_id,
        "-c",
        str(node.properties),
        "--override",
        f"log.dirs={other}",
        "--override",
        "node.id=2",
        "--override",
        f"controller.quorum.voters=2@127.0.0.1:{node.controller_port}",
    )
    assert r.returncode == 0, r.stderr
    node.broker.start()
    try:
        produce_and_check(node, "kept")
    finally:
        assert node.broker.stop() == 0
    before = snapshot(node.data)
    port = node.controller_port
    bad_configs = [
        # (overrides, exit code, words the one error line holds)
        (
            ["controller.quorum.voters=2@127.0.0.1:9993,3@127.0.0.1:9994"],
            2,
            ["controller.quorum.voters", "the node id 1 must be included"],
        ),
        (
            [f"controller.quorum.voters=1@127.0.0.1:{port},1@127.0.0.1:9994"],
            2,
            ["controller.quorum.voters lists node id 1 more than once"],
        ),
        (
            ["controller.quorum.voters=1@127.0.0.1"],
            2,
            ["controller.quorum.voters", "Failed to parse host name"],
        ),
        (
            [f"controller.quorum.voters=1@127.0.0.1:{port + 1 if port < 65535 else port - 1}"],
            2,
            ["controller.quorum.voters gives this node (1)"],
        ),
        (["controller.listener.names=NOPE"], 2, ["controller.listener.names"]),
        (["process.roles=broker"], 2, ["the node id 1 must not be included", "controller.quorum.voters"]),
        (["process.roles=broker,zookeeper"], 2, ["process.roles"]),
        (["cluster.id=not-this-cluster"], 1, ["cluster.id not-this-cluster does not match cluster.id"]),
        (
            ["node.id=2", f"controller.quorum.voters=2@127.0.0.1:{port}"],
            1,
            ["node.id 2 does not match node.id 1", "formatted for another node"],
        ),
        ([f"log.dirs={node.data},{tmp_path / 'new'}"], 1, ["No meta.properties found in", "new"]),
        ([f"log.dirs={node.data},{other}"], 1, ["node.id 1 does not match node.id 2", "other"]),
        ([f"metadata.log.dir={tmp_path / 'meta'}"], 1, ["No meta.properties found in", "meta"]),
    ]
    for overrides, code, needles in bad_configs:
        refused(node.serve(*overrides), code, *needles)
        assert snapshot(node.data) == before, overrides
    assert not (tmp_path / "new").exists() and not (tmp_path / "meta").exists()
    node.broker.start()
    try:
        consume_all(node, "kept")
    finally:
        node.broker.stop()


def test_plain_serve_formats_its_dirs_and_reads_older_files(tmp_path: Path) -> None:
    data = tmp_path / "data"
    b = BrokerProcess(data).start()
    b.stop()
    text = (data / "meta.properties").read_text()
    assert text.startswith("#\n#") and "version=1\n" in text and "node.id=1\n" in text
    assert "cluster.id=strom-cluster-0000000001\n" in text and "directory.id=" in text
    # a file of an earlier strom (no directory.id): the broker starts and completes it
    (data / "meta.properties").write_text(
        "#strom\nversion=1\nnode.id=1\ncluster.id=strom-cluster-0000000001\n"
    )
    b.start()
    b.stop()
    text = (data / "meta.properties").read_text()
    assert "cluster.id=strom-cluster-0000000001\n" in text and re.search(
        r"directory\.id=[A-Za-z0-9_-]{22}\n", text
    )
