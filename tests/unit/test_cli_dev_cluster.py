"""``strom dev-cluster``: the node plan (configs, ports, voters) and the process management —
start, print, stop everything on SIGINT/SIGTERM, stop the rest when one node dies, no orphans even
when the command itself is SIGKILLed. The nodes here are stand-in processes (``sleep`` in
Python) that record their pid; real ``strom serve`` nodes are exercised in
``tests/integration/test_cli_cluster_tools_broker.py`` and ``test_kraft_cluster.py``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from strom.cli.commands import CommandError
from strom.cli.dev_cluster import DevCluster

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")

SRC = str(Path(__file__).resolve().parents[2] / "src")
# a stand-in node: writes its pid next to its config, then sleeps (optionally ignoring SIGTERM)
NODE = (
    "import os, signal, sys, time, pathlib\n"
    "if sys.argv[2] == 'stubborn': signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "pathlib.Path(sys.argv[1]).with_name('pid').write_text(str(os.getpid()))\n"
    "if sys.argv[2] == 'die': sys.exit(3)\n"
    "if sys.argv[2] == 'listen':\n"
    "    import re, socket\n"
    "    cfg = pathlib.Path(sys.argv[1]).read_text()\n"
    "    port = int(re.search(r'PLAINTEXT://127.0.0.1:(\\d+)', cfg).group(1))\n"
    "    srv = socket.socket(); srv.bind(('127.0.0.1', port)); srv.listen()\n"
    "time.sleep(600)\n"
)
DRIVER = (
    "import sys\n"
    "from pathlib import Path\n"
    "from strom.cli.commands import CommandError\n"
    "from strom.cli.dev_cluster import DevCluster, run_cluster\n"
    "node, mode = sys.argv[3], sys.argv[4]\n"
    "def serve(p):\n"
    "    mine = mode == 'listen' or p.parent.name == 'node-2'\n"
    "    return [sys.executable, '-c', node, str(p), mode if mine else 'sleep']\n"
    "c = DevCluster(Path(sys.argv[1]), int(sys.argv[2]), format_command=None, serve_command=serve,\n"
    "               shutdown_timeout=5)\n"
    "try:\n"
    "    sys.exit(run_cluster(c, poll_interval=0.05))\n"
    "except CommandError as e:\n"
    "    print('error:', e, file=sys.stderr)\n"
    "    sys.exit(1)\n"
)


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for a reaper)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def wait_for(cond: object, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def running_with(text: str) -> list[int]:
    """Live processes whose command line mentions ``text``."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmdline = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and alive(int(d.name)):
            out.append(int(d.name))
    return out


def pids(base: Path, n: int) -> list[int]:
    files = [base / f"node-{i}" / "pid" for i in range(1, n + 1)]
    wait_for(lambda: all(f.exists() and f.read_text() for f in files))
    return [int(f.read_text()) for f in files]


def serve(mode: str = "sleep") -> object:
    return lambda p: [sys.executable, "-c", NODE, str(p), mode]


# ---------------------------------------------------------------------------- plan


def test_plan_writes_one_config_per_node_with_all_voters(tmp_path: Path) -> None:
    c = DevCluster(tmp_path / "d", 3, overrides=["num.partitions=3"], format_command=None)
    assert c.plan() is True
    ports = [p for s in c.specs for p in (s.port, s.controller_port)]
    assert len(set(ports)) == 6
    voters = ",".join(f"{s.node_id}@127.0.0.1:{s.controller_port}" for s in c.specs)
    for s in c.specs:
        props = dict(
            line.split("=", 1) for line in s.config_path.read_text().splitlines() if not line.startswith("#")
        )
        assert props["process.roles"] == "broker,controller"
        assert props["node.id"] == str(s.node_id)
        assert props["controller.quorum.voters"] == voters
        assert (
            props["listeners"] == f"PLAINTEXT://127.0.0.1:{s.port},CONTROLLER://127.0.0.1:{s.controller_port}"
        )
        assert props["controller.listener.names"] == "CONTROLLER"
        assert props["num.partitions"] == "3"
    assert c.bootstrap_servers == ",".join(f"127.0.0.1:{s.port}" for s in c.specs)
    assert len(c.cluster_id) == 22
    # a second run in the same directory reuses ports and cluster id and skips formatting
    again = DevCluster(tmp_path / "d", 3, format_command=None)
    assert again.plan() is False
    assert (again.cluster_id, again.specs) == (c.cluster_id, c.specs)


def test_plan_refuses_reusing_a_directory_with_another_cluster_size(tmp_path: Path) -> None:
    DevCluster(tmp_path, 3, format_command=None).plan()
    with pytest.raises(CommandError, match="another size; use --nodes 3"):
        DevCluster(tmp_path, 2, format_command=None).plan()
    with pytest.raises(CommandError, match="not empty"):
        DevCluster(tmp_path, 4, format_command=None).plan()


def test_plan_refuses_a_foreign_directory_and_bad_arguments(tmp_path: Path) -> None:
    (tmp_path / "junk").write_text("x")
    with pytest.raises(CommandError, match="not empty"):
        DevCluster(tmp_path, 3).plan()
    with pytest.raises(CommandError, match="--nodes must be at least 1"):
        DevCluster(tmp_path, 0)
    with pytest.raises(CommandError, match="key=value"):
        DevCluster(tmp_path, 1, overrides=["novalue"])


def test_format_runs_once_per_node_with_one_cluster_id(tmp_path: Path) -> None:
    record = "import sys, pathlib; pathlib.Path(sys.argv[2]).with_name('formatted').write_text(sys.argv[1])"
    c = DevCluster(tmp_path, 2, format_command=lambda cfg, cid: [sys.executable, "-c", record, cid, str(cfg)])
    c.plan()
    c.format()
    assert {(s.dir / "formatted").read_text() for s in c.specs} == {c.cluster_id}
    failing = DevCluster(
        tmp_path / "f",
        1,
        format_command=lambda cfg, cid: [sys.executable, "-c", "raise SystemExit('bad dir')"],
    )
    failing.plan()
    with pytest.raises(CommandError, match="formatting node 1 failed: bad dir"):
        failing.format()


# ---------------------------------------------------------------------------- processes


def test_start_then_stop_reaps_every_node(tmp_path: Path) -> None:
    c = DevCluster(tmp_path, 3, format_command=None, serve_command=serve())  # type: ignore[arg-type]
    c.plan()
    c.start()
    try:
        ps = pids(tmp_path, 3)
        assert all(alive(p) for p in ps)
        assert c.exited() == []
    finally:
        c.stop()
    assert not any(alive(p) for p in ps)
    assert sorted(rc for _, rc in c.exited()) == [-signal.SIGTERM] * 3


def test_one_node_started_again_alone(tmp_path: Path) -> None:
    """start_node (ClusterProcess's restart): a node that exited starts anew on its own config;
    a running one is not started twice; the cluster id never begins with '-' (a flag to argparse)."""
    c = DevCluster(tmp_path, 3, format_command=None, serve_command=serve())  # type: ignore[arg-type]
    c.plan()
    assert not c.cluster_id.startswith("-")
    c.start()
    try:
        first = pids(tmp_path, 3)
        with pytest.raises(CommandError, match="node 2 is running already"):
            c.start_node(2)
        c.procs[2].kill()
        c.procs[2].wait()
        (tmp_path / "node-2" / "pid").unlink()
        c.start_node(2)
        again = pids(tmp_path, 3)
        assert again[0] == first[0] and again[2] == first[2] and again[1] != first[1]
        assert alive(again[1])
        with pytest.raises(KeyError):
            c.start_node(4)
    finally:
        c.stop()
    assert not any(alive(p) for p in again)


def test_a_node_ignoring_sigterm_is_killed_after_the_timeout(tmp_path: Path) -> None:
    c = DevCluster(tmp_path, 1, format_command=None, serve_command=serve("stubborn"), shutdown_timeout=0.5)  # type: ignore[arg-type]
    c.plan()
    c.start()
    (pid,) = pids(tmp_path, 1)
    started = time.monotonic()
    c.stop()
    assert time.monotonic() - started < 10
    assert not alive(pid)
    assert c.exited() == [(1, -signal.SIGKILL)]


def _driver(tmp_path: Path, n: int, mode: str = "sleep") -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=SRC)
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(tmp_path / "d"), str(n), NODE, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_command_prints_the_cluster_and_stops_all_on_a_signal(tmp_path: Path, sig: int) -> None:
    drv = _driver(tmp_path, 3)
    try:
        assert drv.stdout is not None
        lines = [drv.stdout.readline() for _ in range(7)]
        assert lines[1].startswith("bootstrap servers: 127.0.0.1:")
        assert lines[2].startswith("controller quorum voters: 1@127.0.0.1:")
        assert lines[-1].strip() == "Ctrl-C stops all nodes."
        ps = pids(tmp_path / "d", 3)
        drv.send_signal(sig)
        assert drv.wait(20) == 0
    finally:
        if drv.poll() is None:
            drv.kill()
            drv.wait()
    assert not any(alive(p) for p in ps)


def test_a_dying_node_stops_the_others_and_fails_the_command(tmp_path: Path) -> None:
    drv = _driver(tmp_path, 3, mode="die")
    try:
        rc = drv.wait(30)
    finally:
        if drv.poll() is None:
            drv.kill()
            drv.wait()
    assert rc == 1
    assert drv.stderr is not None
    assert "node 2 exited with code 3" in drv.stderr.read()
    # nodes 1 and 3 may have been stopped before they wrote their pid (a loaded machine starts
    # Python slowly): no process may remain that runs a config of this cluster, pid file or not
    base = tmp_path / "d"
    started = [int(t) for f in base.glob("node-*/pid") if (t := f.read_text())]
    assert not any(alive(p) for p in started)
    assert not running_with(str(base))


def test_no_orphans_when_the_command_is_sigkilled(tmp_path: Path) -> None:
    drv = _driver(tmp_path, 2)
    try:
        ps = pids(tmp_path / "d", 2)
        assert all(alive(p) for p in ps)
    finally:
        drv.kill()
        drv.wait()
    try:
        wait_for(lambda: not any(alive(p) for p in ps))
    finally:  # a failing run must not leave its stand-in nodes behind
        for p in ps:
            if alive(p):
                os.kill(p, signal.SIGKILL)


def test_the_command_says_when_every_node_listens(tmp_path: Path) -> None:
    drv = _driver(tmp_path, 2, mode="listen")
    try:
        assert drv.stdout is not None
        lines = [drv.stdout.readline() for _ in range(7)]
        assert lines[-1].strip() == "all 2 node(s) are listening", lines
        ps = pids(tmp_path / "d", 2)
        drv.send_signal(signal.SIGTERM)
        assert drv.wait(20) == 0
    finally:
        if drv.poll() is None:
            drv.kill()
            drv.wait()
    assert not any(alive(p) for p in ps)
