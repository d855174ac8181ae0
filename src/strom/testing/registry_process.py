"""A real ``strom schema-registry`` subprocess on a free loopback port, for tests and benches
(the registry beside :class:`strom.testing.broker_process.BrokerProcess`)."""

from __future__ import annotations

import contextlib
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

from .broker_process import free_port

__all__ = ["RegistryProcess"]

_SRC = str(Path(__file__).resolve().parents[2])


class RegistryProcess:
    """``strom schema-registry --bootstrap-server B --port P *extra``, its output in ``log_path``.
    ``scheme``: ``https`` when ``extra`` gives it a certificate. :meth:`start` returns once it
    answers HTTP (any status: one behind basic auth answers 401)."""

    def __init__(self, bootstrap: str, log_path: Path, *extra: str, scheme: str = "http") -> None:
        self.bootstrap = bootstrap
        self.extra = list(extra)
        self.scheme = scheme
        self.port = free_port()
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def _answers(self) -> bool:
        probe = ssl._create_unverified_context() if self.scheme == "https" else None
        try:
            urllib.request.urlopen(self.url + "/", timeout=1, context=probe).read()
        except urllib.error.HTTPError:
            return True  # it answered (e.g. 401 behind basic auth)
        except OSError:
            return False
        return True

    def start(self, timeout: float = 30.0) -> RegistryProcess:
        env = dict(os.environ, PYTHONPATH=_SRC)
        self.log = open(self.log_path, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "strom", "schema-registry", "--bootstrap-server", self.bootstrap,
             "--port", str(self.port), *self.extra], stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"registry exited: {self.log_path.read_text()}")
            if self._answers():
                return self
            time.sleep(0.2)
        self.stop()  # never leave it running
        raise RuntimeError(f"registry did not start: {self.log_path.read_text()}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log is not None:
            with contextlib.suppress(OSError):
                self.log.close()

    def __enter__(self) -> RegistryProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
