"""A throwaway PostgreSQL server for tests and benches: ``initdb`` + ``postgres`` on a free
loopback port, ``wal_level=logical`` (for change data capture), trust authentication for the
superuser ``strom`` and a database ``strom``; :meth:`PostgresProcess.stop` stops it and deletes
its data directory.

PostgreSQL refuses to run as root: under uid 0 the server runs as the ``postgres`` system user
(Debian's ``postgresql`` package creates it) from a data directory in the system temp dir that
user can reach.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PG_BIN_DIRS = [f"/usr/lib/postgresql/{v}/bin" for v in (17, 16, 15, 14, 13)]


def pg_bin_dir() -> str | None:
    env = os.environ.get("STROM_PG_BIN")
    if env and os.path.exists(os.path.join(env, "initdb")):
        return env
    for d in PG_BIN_DIRS:
        if os.path.exists(os.path.join(d, "initdb")) and os.path.exists(os.path.join(d, "postgres")):
            return d
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PostgresProcess:
    def __init__(self, user: str = "strom", dbname: str = "strom") -> None:
        bindir = pg_bin_dir()
        if bindir is None:
            raise RuntimeError("PostgreSQL server binaries (initdb, postgres) not found")
        self.bindir = bindir
        self.user, self.dbname = user, dbname
        self.port = _free_port()
        self.host = "127.0.0.1"
        self.proc: subprocess.Popen[bytes] | None = None
        self._run_as: int | None = None
        if os.geteuid() == 0:
            self._run_as = pwd.getpwnam("postgres").pw_uid
        self.dir = Path(tempfile.mkdtemp(prefix="strom-pg-"))
        if self._run_as is not None:
            os.chown(self.dir, self._run_as, -1)
        self.data = self.dir / "data"
        self.log_path = self.dir / "postgres.log"

    @property
    def dsn(self) -> str:
        return f"host={self.host} port={self.port} user={self.user} dbname={self.dbname}"

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:postgresql://{self.host}:{self.port}/{self.dbname}"

    def _preexec(self) -> None:
        if self._run_as is not None:
            pw = pwd.getpwuid(self._run_as)
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)

    def _run(self, *args: str) -> None:
        r = subprocess.run(
            [os.path.join(self.bindir, args[0]), *args[1:]],
            capture_output=True,
            preexec_fn=self._preexec,
            cwd=self.dir,
        )
        if r.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {r.stderr.decode(errors='replace')[-2000:]}")

    def start(self, timeout: float = 30.0) -> PostgresProcess:
        self._run("initdb", "-D", str(self.data), "-U", self.user, "-A", "trust", "-E", "UTF8", "--no-sync")
        with open(self.data / "postgresql.conf", "a") as f:
            f.write(
                "\nwal_level = logical\nmax_replication_slots = 10\nmax_wal_senders = 10\n"
                "fsync = off\nfull_page_writes = off\n"
                "unix_socket_directories = ''\nlisten_addresses = '127.0.0.1'\n"
                f"port = {self.port}\ntimezone = 'UTC'\nshared_buffers = 64MB\n"
            )
        with open(self.data / "pg_hba.conf", "a") as f:
            f.write("host replication all 127.0.0.1/32 trust\n")
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            [os.path.join(self.bindir, "postgres"), "-D", str(self.data)],
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=self._preexec,
            cwd=self.dir,
        )
        log.close()
        import psycopg

        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited: {self.log_path.read_text()[-2000:]}")
            try:
                with psycopg.connect(f"{self.dsn} dbname=postgres", connect_timeout=2) as c:
                    c.autocommit = True
                    c.execute(f'CREATE DATABASE "{self.dbname}"')
                return self
            except psycopg.OperationalError as e:
                last = e
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"postgres did not start within {timeout}s: {last}")

    def connect(self) -> object:
        import psycopg

        conn = psycopg.connect(self.dsn, autocommit=True)
        return conn

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown: clients are disconnected
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PostgresProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
