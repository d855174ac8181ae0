"""Listening sockets with strom's own accept loop, which survives running out of descriptors.

Why not ``loop.create_server``: when ``accept()`` fails with EMFILE/ENFILE, asyncio's selector
loop reports every failure with a traceback through the loop's exception handler (measured: 1,260
tracebacks in 4.5 s under ``ulimit -n 64``), and uvloop leaves the condition to libuv, with no
say over back-off or logging. Here, on both loops:

* the listening socket is non-blocking and watched with ``loop.add_reader`` (both loops); each
  readiness accepts up to :data:`ACCEPT_BATCH` connections, each handed to
  ``loop.connect_accepted_socket`` with the listener's protocol factory (and, on uvloop, its TLS
  context, as ``create_server(ssl=...)`` did);
* EMFILE, ENFILE, ENOBUFS, ENOMEM: accepting pauses (the reader is removed; pending connections
  wait in the kernel's backlog) for a back-off that doubles from :data:`MIN_BACKOFF_S` to
  :data:`MAX_BACKOFF_S` and resets after the next successful accept; one line is logged per
  minute at most, no traceback;
* a connection that was aborted before it was accepted (ECONNABORTED, EPROTO) is skipped.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
from collections.abc import Callable

from ..rate_limited_log import RateLimitedLine

log = logging.getLogger("strom.network")

ACCEPT_BATCH = 64
MIN_BACKOFF_S = 0.1
MAX_BACKOFF_S = 5.0
OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_SKIP = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EPERM, errno.ENETDOWN, errno.EHOSTUNREACH})
accept_failure_log = RateLimitedLine(log)


def bind_sockets(host: str, port: int, backlog: int) -> list[socket.socket]:
    """Listening sockets for ``host:port`` (every address it resolves to; all interfaces for an
    empty host), as ``loop.create_server`` binds them: SO_REUSEADDR, IPv6 sockets v6-only."""
    infos = socket.getaddrinfo(host or None, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    seen: set[tuple[int, object]] = set()
    socks: list[socket.socket] = []
    try:
        for family, type_, proto, _name, addr in infos:
            if (family, addr) in seen:
                continue
            seen.add((family, addr))
            sock = socket.socket(family, type_, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(addr)
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks


class Listener:
    """The sockets of one listener and their accept loops. ``close()`` stops accepting (the
    connections already made stay, as with ``Server.close``)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        name: str,
        socks: list[socket.socket],
        factory: Callable[[], asyncio.Protocol],
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.loop = loop
        self.name = name
        self.sockets = socks
        self.factory = factory
        self.ssl_context = ssl_context
        self.closed = False
        self.paused = False
        self.backoff_s = MIN_BACKOFF_S
        self._resume: dict[int, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        for sock in socks:
            loop.add_reader(sock.fileno(), self._on_readable, sock)

    def _on_readable(self, sock: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _addr = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in _SKIP:
                    continue
                self._pause(sock, e)
                return
            self.backoff_s = MIN_BACKOFF_S
            try:
                conn.setblocking(False)
                if conn.family in (socket.AF_INET, socket.AF_INET6):
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                conn.close()
                continue
            task = self.loop.create_task(self._connect(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _connect(self, conn: socket.socket) -> None:
        try:
            await self.loop.connect_accepted_socket(self.factory, conn, ssl=self.ssl_context)
        except (OSError, asyncio.CancelledError, TimeoutError) as e:  # ssl.SSLError is an OSError
            log.debug("connection on listener %s failed before it started: %s", self.name, e)
            conn.close()

    def _pause(self, sock: socket.socket, e: OSError) -> None:
        fd = sock.fileno()
        self.loop.remove_reader(fd)
        self.paused = True
        delay = self.backoff_s
        self.backoff_s = min(MAX_BACKOFF_S, self.backoff_s * 2)
        hint = ""
        if e.errno in (errno.EMFILE, errno.ENFILE):
            hint = " (raise ulimit -n, or lower strom.log.max.open.files)"
        accept_failure_log.log(
            logging.ERROR,
            "listener %s cannot accept connections: %s%s; accepting paused, retried with back-off "
            "(up to %.0f s)",
            self.name, e.strerror or e, hint, MAX_BACKOFF_S,
        )
        self._resume[fd] = self.loop.call_later(delay, self._resume_accepting, sock)

    def _resume_accepting(self, sock: socket.socket) -> None:
        self._resume.pop(sock.fileno(), None)
        if self.closed:
            return
        self.paused = bool(self._resume)
        self.loop.add_reader(sock.fileno(), self._on_readable, sock)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for handle in self._resume.values():
            handle.cancel()
        self._resume.clear()
        for sock in self.sockets:
            self.loop.remove_reader(sock.fileno())
            sock.close()


async def start_listener(
    name: str,
    host: str,
    port: int,
    factory: Callable[[], asyncio.Protocol],
    *,
    ssl_context: ssl.SSLContext | None = None,
    backlog: int = 1024,
) -> Listener:
    loop = asyncio.get_running_loop()
    return Listener(loop, name, bind_sockets(host, port, backlog), factory, ssl_context)
