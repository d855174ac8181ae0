"""The broker's HTTP listener (``strom.http.listener``): ``/metrics``, ``/healthz``, ``/readyz``.

A small HTTP/1.1 server on the broker's own event loop (``asyncio.start_server``): one request per
connection (``Connection: close``), GET and HEAD only, the request head read with a size cap and a
timeout, so a slow or hostile scraper cannot hold the loop. ``/metrics`` renders the
:class:`~strom.observability.collector.StromCollector` in the Prometheus text format (and
``prometheus_client``'s process collector: CPU, memory, descriptors); ``/healthz`` answers 200
while the process serves; ``/readyz`` answers 200
once the broker is ready (logs recovered, coordinators loaded, listeners up, metadata caught up)
and 503 with the reasons otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.process_collector import ProcessCollector

from ..config_schema import ConfigError
from .collector import StromCollector, render
from .console_mount import PREFIX, ConsoleMount, serve_asgi
from .registry_mount import REGISTRY_PREFIX, RegistryMount

if TYPE_CHECKING:
    from ..server.broker import Broker

__all__ = ["HttpListener", "parse_http_listener"]

log = logging.getLogger("strom.http")

_MAX_HEAD = 8192
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus' text format
_HEAD_TIMEOUT_S = 10.0


def parse_http_listener(value: str) -> tuple[str, str, int] | None:
    """``http://host:port`` or ``https://host:port`` -> (scheme, host, port); empty -> None
    (disabled). Raises ConfigError."""
    value = value.strip()
    if not value:
        return None
    parts = urlsplit(value)
    why = None
    port = None
    if parts.scheme not in ("http", "https"):
        why = "expected http://host:port or https://host:port"
    elif parts.path not in ("", "/") or parts.query:
        why = "expected http://host:port"
    else:
        try:
            port = parts.port
        except ValueError:
            port = None
        if port is None:
            why = "a port is required (http://host:port)"
    if why is not None or port is None:
        raise ConfigError(f"Invalid value {value} for configuration strom.http.listener: {why}")
    return parts.scheme, parts.hostname or "0.0.0.0", port


def https_context(broker: Broker) -> ssl.SSLContext:
    """The TLS context of an https:// listener: the broker's ``ssl.*`` settings, overridable as
    ``listener.name.http.ssl.*`` (Kafka's per-listener form). Raises ConfigError."""
    from ..security.tls import build_server_context, tls_settings

    return build_server_context(tls_settings(broker.config.values, "HTTP"))


Handler = Callable[[], tuple[int, str, bytes]]


class HttpListener:
    def __init__(self, broker: Broker, host: str, port: int, tls: ssl.SSLContext | None = None) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self.tls = tls
        self.collector = StromCollector(broker)
        self.process = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.process)  # process_cpu_seconds_total, resident memory ...
        self.server: asyncio.Server | None = None
        self.console: ConsoleMount | None = None
        self.registry: RegistryMount | None = None
        self.routes: dict[str, Handler] = {
            "/metrics": self._metrics,
            "/healthz": self._healthz,
            "/readyz": self._readyz,
        }

    async def start(self) -> None:
        if self.broker.config["strom.http.console.enable"]:
            # (bad settings: a ConfigError before binding)
            self.console = ConsoleMount(self.broker, lambda: self._metrics()[2])
        if self.broker.config["strom.http.schema.registry.enable"]:
            self.registry = RegistryMount(self.broker)  # bad settings: a ConfigError before binding
        self.server = await asyncio.start_server(
            self._serve, self.host, self.port, reuse_address=True, limit=_MAX_HEAD, ssl=self.tls
        )
        for s in self.server.sockets:
            addr = s.getsockname()
            self.port = addr[1]
            log.info("HTTP listener on %s://%s:%d (/metrics /healthz /readyz%s%s)",
                     "https" if self.tls else "http", addr[0], addr[1], " /console/" if self.console else "",
                     f" {REGISTRY_PREFIX}/" if self.registry else "")
        if self.registry is not None:
            await self.registry.start(self.url)
        if self.console is not None:
            self.console.http_url = self.url
            await self.console.start()

    @property
    def _not_found(self) -> bytes:
        more = (b", /console/" if self.console else b"") + (b", /schema-registry/" if self.registry else b"")
        return b"not found: try /metrics, /healthz, /readyz" + more + b"\n"

    @property
    def url(self) -> str:
        host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        host = f"[{host}]" if ":" in host else host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    def close(self) -> None:
        if self.server is not None:
            self.server.close()

    async def stop(self) -> None:
        self.close()
        if self.console is not None:
            await self.console.stop()
        if self.registry is not None:
            await self.registry.stop()

    # ------------------------------------------------------------------ routes
    def _metrics(self) -> tuple[int, str, bytes]:
        body = render(self.collector.collect()).encode() + generate_latest(self.process)
        return 200, CONTENT_TYPE, body

    def _healthz(self) -> tuple[int, str, bytes]:
        return 200, "text/plain; charset=utf-8", b"ok\n"

    def _readyz(self) -> tuple[int, str, bytes]:
        reasons = self.broker.not_ready_reasons()
        if reasons:
            body = "not ready:\n" + "".join(f"- {r}\n" for r in reasons)
            return 503, "text/plain; charset=utf-8", body.encode()
        return 200, "text/plain; charset=utf-8", b"ready\n"

    # ------------------------------------------------------------------ connection
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HEAD_TIMEOUT_S)
            except asyncio.LimitOverrunError:
                await self._answer(writer, 431, "text/plain", b"request head too large\n", False)
                return
            except (asyncio.IncompleteReadError, TimeoutError, ConnectionError, ssl.SSLError):
                return
            if len(head) > _MAX_HEAD:
                await self._answer(writer, 431, "text/plain", b"request head too large\n", False)
                return
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            fields = line.split()
            if len(fields) != 3 or not fields[2].startswith("HTTP/"):
                await self._answer(writer, 400, "text/plain", b"bad request\n", False)
                return
            method, target = fields[0], fields[1]
            path = urlsplit(target).path
            reg = self.registry
            if reg is not None and (path == REGISTRY_PREFIX or path.startswith(REGISTRY_PREFIX + "/")):
                if reg.app is None:
                    await self._answer(writer, 503, "application/vnd.schemaregistry.v1+json",
                                       reg.unavailable(), method == "HEAD")
                    return
                await serve_asgi(reg.app, reader, writer, method=method, target=target, head=head,
                                 tls=self.tls is not None, server=(self.host, self.port),
                                 root_path=REGISTRY_PREFIX)
                return
            if self.console is not None and (path == PREFIX or path.startswith(PREFIX + "/")):
                if path == PREFIX:
                    await self._answer(writer, 308, "text/plain", b"", method == "HEAD",
                                       extra=f"Location: {PREFIX}/\r\n")
                    return
                await serve_asgi(self.console.app, reader, writer, method=method, target=target, head=head,
                                 tls=self.tls is not None, server=(self.host, self.port))
                return
            if method not in ("GET", "HEAD"):
                await self._answer(writer, 405, "text/plain", b"method not allowed\n", False,
                                   extra="Allow: GET, HEAD\r\n")
                return
            route = self.routes.get(urlsplit(target).path)
            if route is None:
                await self._answer(writer, 404, "text/plain", self._not_found,
                                   method == "HEAD")
                return
            try:
                status, ctype, body = route()
            except Exception:
                log.exception("HTTP %s %s failed", method, target)
                status, ctype, body = 500, "text/plain", b"internal error\n"
            await self._answer(writer, status, ctype, body, method == "HEAD")
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    @staticmethod
    async def _answer(writer: asyncio.StreamWriter, status: int, ctype: str, body: bytes, head_only: bool,
                      extra: str = "") -> None:
        reason = {200: "OK", 308: "Permanent Redirect", 400: "Bad Request", 404: "Not Found",
                  405: "Method Not Allowed",
                  431: "Request Header Fields Too Large", 500: "Internal Server Error",
                  503: "Service Unavailable"}.get(status, "")
        header = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                  f"Connection: close\r\n{extra}\r\n")
        writer.write(header.encode("latin-1") if head_only else header.encode("latin-1") + body)  # one write
        with contextlib.suppress(ConnectionError):
            await writer.drain()
