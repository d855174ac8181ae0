"""Start a real ``strom serve`` process on a free loopback port (for tests and benches)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class BrokerProcess:
    """A broker subprocess. ``overrides`` are ``key=value`` strings passed as ``--override``.

    ``listeners`` maps listener names to security protocols, e.g.
    ``{"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}`` (default: one PLAINTEXT listener). Each gets a
    loopback port (the first one ``port``, the others free ones): ``ports[name]`` and
    ``bootstrap_for(name)``. ``port``/``bootstrap`` are the first listener's. A name that differs
    from its protocol is added to ``listener.security.protocol.map``. The ``ssl.*`` settings
    (keystore ...) go in ``overrides``. ``nofile`` runs the broker under that RLIMIT_NOFILE
    (soft and hard, like ``ulimit -n``).
    """

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        overrides: list[str] | None = None,
        env: dict[str, str] | None = None,
        listeners: Mapping[str, str] | None = None,
        nofile: int | None = None,
        preload_schemas: bool = False,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.listener_protocols = dict(listeners or {"PLAINTEXT": "PLAINTEXT"})
        if not self.listener_protocols:
            raise ValueError("listeners is empty")
        names = list(self.listener_protocols)
        self.ports = {names[0]: self.port} | {n: free_port() for n in names[1:]}
        # the HTTP listener (/metrics ...) on a free port too: brokers started side by side must
        # not all want strom.http.listener's default 9644 (an override naming it wins)
        self.http_port = free_port()
        self.overrides = list(overrides or [])
        self.env = env
        self.nofile = nofile
        # strom serve loads every API version's codec before it serves (1-2 s); the suite
        # starts hundreds of brokers, so by default they load each on its first request instead
        self.preload_schemas = preload_schemas
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.data_dir.parent / f"broker-{self.port}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def http_url(self) -> str:
        """The broker's HTTP listener (``/metrics``, ``/healthz``, ``/readyz``)."""
        return f"http://127.0.0.1:{self.http_port}"

    def bootstrap_for(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def _listener_overrides(self) -> list[str]:
        spec = ",".join(f"{n}://127.0.0.1:{p}" for n, p in self.ports.items())
        out = ["--override", f"listeners={spec}"]
        if any(n != proto for n, proto in self.listener_protocols.items()):
            default = {p: p for p in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")}
            pmap = ",".join(f"{n}:{p}" for n, p in (default | self.listener_protocols).items())
            out += ["--override", f"listener.security.protocol.map={pmap}"]
        return out

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        args = [
            sys.executable,
            "-m",
            "strom",
            "serve",
            *self._listener_overrides(),
            "--override",
            f"strom.http.listener=http://127.0.0.1:{self.http_port}",
            "--override",
            f"log.dirs={self.data_dir}",
        ]
        test_quorum = os.environ.get("STROM_TEST_QUORUM", "")  # (tests/conftest.py): 1 forces the
        if test_quorum in ("0", "1"):  # quorum path, 0 the registry path; before the test's own
            enable = "true" if test_quorum == "1" else "false"  # overrides, which win
            args += ["--override", f"strom.metadata.quorum.enable={enable}"]
        if not self.preload_schemas:  # (before the test's own overrides, which win)
            args += ["--override", "strom.protocol.preload.schemas=false"]
        for o in self.overrides:
            args += ["--override", o]
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update(self.env or {})
        logf = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        preexec = None
        if self.nofile is not None:
            limit = self.nofile

            def preexec() -> None:
                import resource

                resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

        self.proc = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT, env=env, preexec_fn=preexec)
        logf.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log()}")
            try:
                # every listener is open once the last one is (they open in order)
                with socket.create_connection(("127.0.0.1", list(self.ports.values())[-1]), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker did not start listening within {timeout}s:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    def stop(self, timeout: float = 20.0) -> int:
        """Graceful stop (SIGTERM); returns the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill(self) -> None:
        """kill -9: no chance to flush or close anything."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
