"""The web console (:mod:`strom.console`) served by the broker's HTTP listener under ``/console/``
(``strom.http.console.enable``).

The console is the same Starlette application ``strom console`` serves; here it runs on the
broker's event loop and is driven through a small ASGI bridge (:func:`serve_asgi`): the HTTP
listener parses the request head, reads a ``Content-Length`` body (capped), and the app's
response is written as it is sent, a streamed one (the live tail's server-sent events) ending
with the connection (``Connection: close``). The console still talks only the Kafka protocol, to
``strom.http.console.bootstrap.servers`` or this broker's own first PLAINTEXT listener, so what it
shows is what any client sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config_schema import ConfigError

if TYPE_CHECKING:
    from ..client.client import Client
    from ..server.broker import Broker

__all__ = ["PREFIX", "ConsoleMount", "serve_asgi"]

log = logging.getLogger("strom.http")
PREFIX = "/console"
MAX_BODY = 11 << 20  # the console's forms are capped at 10 MiB (console.app._form)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class ConsoleMount:
    """The console application of one broker, its lifespan (metrics sampler, Kafka client)
    entered at start and left at stop."""

    def __init__(self, broker: Broker, local_metrics: Callable[[], bytes] | None = None) -> None:
        from ..console.app import ConsoleSettings, build_app, load_basic_auth

        cfg = broker.config
        self.broker = broker
        users = None
        auth_file = str(cfg["strom.http.console.basic.auth.file"]).strip()
        if auth_file:
            try:
                users = load_basic_auth(auth_file)
            except OSError as e:
                raise ConfigError(f"cannot read strom.http.console.basic.auth.file {auth_file}: "
                                  f"{e.strerror or e}") from None
            except ValueError as e:
                raise ConfigError(f"strom.http.console.basic.auth.file: {e}") from None
        registry = None
        registry_url = str(cfg["strom.http.console.schema.registry.url"]).strip()
        if registry_url:
            if not registry_url.startswith(("http://", "https://")):
                raise ConfigError(
                    f"strom.http.console.schema.registry.url {registry_url}: not an http(s) URL"
                )
            from ..console.registry_view import RegistryView

            info = str(cfg["strom.http.console.schema.registry.basic.auth.user.info"]).strip()
            registry = RegistryView(registry_url, info or None)
        self.security = _security(str(cfg["strom.http.console.command.config"]).strip())
        self.configured = str(cfg["strom.http.console.bootstrap.servers"]).strip()
        if not self.configured:
            from ..metadata.quorum_config import parse_listener_names

            controllers = set(parse_listener_names(cfg.values.get("controller.listener.names")))
            if not any(proto == "PLAINTEXT" and name not in controllers
                       for name, proto, _h, _p in cfg.listener_protocols()):
                raise ConfigError(_NO_PLAINTEXT)
        own = broker.node_id
        self.http_url = ""  # the listener's, once bound

        def metrics_url(node: int, host: str) -> str:  # the other brokers: the same port, by convention
            if node == own:
                return f"{self.http_url}/metrics"
            scheme, _, rest = self.http_url.partition("://")
            port = rest.rsplit(":", 1)[-1]
            return f"{scheme}://{'[' + host + ']' if ':' in host else host}:{port}/metrics"

        async def fetch(url: str) -> str:
            """This broker's own metrics rendered here (no HTTP, no TLS trust to set up); the
            others' over HTTP."""
            if local_metrics is not None and url == f"{self.http_url}/metrics":
                return local_metrics().decode()
            from ..console.sampler import _get

            return await asyncio.to_thread(_get, url)

        self.settings = ConsoleSettings(
            self.configured or "this broker", read_only=bool(cfg["strom.http.console.read.only"]),
            client_factory=self._client, basic_auth=users, registry=registry, prefix=PREFIX,
            metrics_url_for=metrics_url,
            metrics_interval_s=int(cfg["strom.http.console.metrics.interval.ms"]) / 1000, metrics_fetch=fetch,
            max_searches=int(cfg["strom.http.console.max.searches"]),
            search_timeout_s=int(cfg["strom.http.console.search.timeout.ms"]) / 1000)
        self.app: Any = build_app(self.settings)
        self._lifespan: AbstractAsyncContextManager[Any] | None = None

    def bootstrap(self) -> str:
        """The configured bootstrap servers, else this broker's first PLAINTEXT Kafka listener."""
        if self.configured:
            return self.configured
        return own_plaintext_bootstrap(self.broker, _NO_PLAINTEXT)

    def _client(self) -> Client:
        from ..client.client import Client

        return Client(self.bootstrap(), client_id="strom-console", request_timeout_ms=10_000,
                      connect_timeout_ms=5_000, retries=1, security=self.security)

    async def start(self) -> None:
        self._lifespan = self.app.router.lifespan_context(self.app)
        await self._lifespan.__aenter__()

    async def stop(self) -> None:
        if self._lifespan is not None:
            lifespan, self._lifespan = self._lifespan, None
            with contextlib.suppress(Exception):
                await lifespan.__aexit__(None, None, None)


def own_plaintext_bootstrap(broker: Broker, missing: str) -> str:
    """``host:port`` of the broker's first bound PLAINTEXT (non-controller) Kafka listener;
    OSError(``missing``) when there is none (yet)."""
    protocols = broker.config.security_protocol_map()
    from ..metadata.quorum_config import parse_listener_names

    controllers = set(parse_listener_names(broker.config.values.get("controller.listener.names")))
    for srv in broker.servers:
        if protocols.get(srv.name) == "PLAINTEXT" and srv.name not in controllers and srv.sockets:
            host, port = srv.sockets[0].getsockname()[:2]
            if host in ("0.0.0.0", "::", ""):
                host = "127.0.0.1"
            return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    raise OSError(missing)


def _security(path: str) -> Any:
    if not path:
        return None
    from ..client.security import SecurityConfig
    from ..config import parse_properties

    try:
        props = parse_properties(Path(path).read_text())
    except OSError as e:
        why = e.strerror or e
        raise ConfigError(f"cannot read strom.http.console.command.config {path}: {why}") from None
    try:
        return SecurityConfig.from_config(props)
    except ValueError as e:
        raise ConfigError(f"strom.http.console.command.config {path}: {e}") from None


async def serve_asgi(app: App, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                     method: str, target: str, head: bytes, tls: bool,
                     server: tuple[str, int], root_path: str = PREFIX) -> None:
    """Run one HTTP/1.1 request (its head already read) through an ASGI app and write the
    answer; the connection is closed after it by the caller."""
    from urllib.parse import unquote, urlsplit

    lines = head.decode("latin-1").split("\r\n")[1:]
    headers: list[tuple[bytes, bytes]] = []
    length = 0
    for line in lines:
        if not line:
            continue
        name, _, value = line.partition(":")
        name, value = name.strip().lower(), value.strip()
        if name == "content-length":
            try:
                length = int(value)
            except ValueError:
                length = -1
        elif name == "transfer-encoding":
            length = -2
        headers.append((name.encode("latin-1"), value.encode("latin-1")))
    if length < 0 or length > MAX_BODY:
        why = (b"request body too large\n" if length > MAX_BODY else
               b"chunked bodies are not accepted: send Content-Length\n" if length == -2 else
               b"bad Content-Length\n")
        status = 413 if length > MAX_BODY else 400
        writer.write(f"HTTP/1.1 {status} {'Payload Too Large' if status == 413 else 'Bad Request'}\r\n"
                     f"Content-Type: text/plain\r\nContent-Length: {len(why)}\r\nConnection: close\r\n\r\n"
                     .encode() + why)
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        return
    try:
        body = await asyncio.wait_for(reader.readexactly(length), 30) if length else b""
    except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
        return
    parts = urlsplit(target)
    peer = writer.get_extra_info("peername")
    scope: Scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
        "method": method, "scheme": "https" if tls else "http",
        "path": unquote(parts.path), "raw_path": parts.path.encode("latin-1"), "root_path": root_path,
        "query_string": parts.query.encode("latin-1"), "headers": headers,
        "client": tuple(peer[:2]) if isinstance(peer, tuple) else None, "server": server, "state": {},
    }
    gone = asyncio.Event()

    async def watch_eof() -> None:  # the client closing its side: the live tail stops
        with contextlib.suppress(Exception):
            while await reader.read(4096):
                pass
        gone.set()

    watcher = asyncio.get_running_loop().create_task(watch_eof())
    sent_body = False

    async def receive() -> Message:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    started: dict[str, Any] = {}
    head_written = False

    async def send(message: Message) -> None:
        nonlocal head_written
        if message["type"] == "http.response.start":
            started["status"] = message["status"]
            started["headers"] = message.get("headers", [])
            return
        if message["type"] != "http.response.body":
            return
        data = bytes(message.get("body", b""))
        more = bool(message.get("more_body", False))
        if not head_written:
            head_written = True
            status = int(started.get("status", 500))
            out = [f"HTTP/1.1 {status} {_REASONS.get(status, '')}".encode("latin-1")]
            has_length = False
            for k, v in started.get("headers", []):
                if k.lower() == b"connection":
                    continue
                has_length = has_length or k.lower() == b"content-length"
                out.append(bytes(k) + b": " + bytes(v))
            if not has_length and not more:
                out.append(f"content-length: {len(data)}".encode())
            out.append(b"connection: close")
            writer.write(b"\r\n".join(out) + b"\r\n\r\n")
        if data and method != "HEAD":
            writer.write(data)
        if gone.is_set():
            raise ConnectionError("client went away")
        await writer.drain()

    try:
        await app(scope, receive, send)
    except ConnectionError:
        pass
    except Exception:  # the app's own error page already went out where it could
        log.exception("console %s %s failed", method, target)
        if not head_written:
            body_500 = b"internal error\n"
            writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\n"
                         b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body_500), body_500))
            with contextlib.suppress(ConnectionError):
                await writer.drain()
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await watcher


_NO_PLAINTEXT = ("strom.http.console.enable: this broker has no PLAINTEXT listener; set "
                 "strom.http.console.bootstrap.servers (and strom.http.console.command.config "
                 "for its security)")
_REASONS = {200: "OK", 303: "See Other", 307: "Temporary Redirect", 308: "Permanent Redirect",
            400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 500: "Internal Server Error", 502: "Bad Gateway",
            503: "Service Unavailable"}
