"""The ``strom console`` command: serve the web console with uvicorn."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["add_parser", "console"]


def add_parser(sub: Any, add_bootstrap: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("console", help="a web console for a Kafka cluster (Kafka protocol only)")
    add_bootstrap(p)
    p.add_argument("--port", type=int, default=8080, help="HTTP port (default 8080)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--read-only", action="store_true", help="no mutating action is offered or accepted")
    p.add_argument("--basic-auth-file", metavar="FILE",
                   help="require HTTP basic auth; FILE holds user:password lines")
    p.add_argument("--schema-registry-url", metavar="URL",
                   help="decode keys/values in Confluent's wire format (Avro, JSON Schema, Protobuf) "
                        "through this schema registry")
    p.add_argument("--schema-registry-user-info", metavar="USER:PASSWORD",
                   help="HTTP basic auth to the schema registry (basic.auth.user.info)")
    p.add_argument("--scan-cap", type=int, default=10_000,
                   help="records a message search scans at most (default 10000)")
    p.add_argument("--max-searches", type=int, default=4, metavar="N",
                   help="message searches running at once, at most (default 4; more get a 503 page)")
    p.add_argument("--search-timeout", type=float, default=300.0, metavar="SECONDS",
                   help="a message search stops after this long, and says so (default 300)")
    p.add_argument("--metrics-url", action="append", default=[], metavar="URL",
                   help="a broker's Prometheus /metrics, charted on the Metrics page (repeatable)")
    p.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="chart every broker of the cluster's metadata at http://HOST:PORT/metrics "
                        "(strom's strom.http.listener port, 9644 by default)")
    p.add_argument("--metrics-interval", type=float, default=10.0, metavar="SECONDS",
                   help="how often the metrics are sampled (default 10)")


def console(args: argparse.Namespace) -> int:
    import uvicorn

    from ..cli.commands import CommandError, _client
    from .app import ConsoleSettings, build_app, load_basic_auth

    if not 0 <= args.port <= 65535:
        raise CommandError(f"--port {args.port} is not a port", 2)
    if args.metrics_interval <= 0:
        raise CommandError("--metrics-interval must be positive", 2)
    for url in args.metrics_url:
        if not url.startswith(("http://", "https://")):
            raise CommandError(f"--metrics-url {url}: expected http://host:port/metrics", 2)
    port = args.metrics_port
    if port is not None and not 0 < port <= 65535:
        raise CommandError(f"--metrics-port {port} is not a port", 2)
    if args.scan_cap < 1:
        raise CommandError("--scan-cap must be at least 1", 2)
    if args.max_searches < 1:
        raise CommandError("--max-searches must be at least 1", 2)
    if args.search_timeout <= 0:
        raise CommandError("--search-timeout must be positive", 2)
    users = None
    if args.basic_auth_file:
        try:
            users = load_basic_auth(args.basic_auth_file)
        except OSError as e:
            why = e.strerror or e
            raise CommandError(f"cannot read --basic-auth-file {args.basic_auth_file}: {why}", 2) from None
        except ValueError as e:
            raise CommandError(str(e), 2) from None
    registry = None
    if args.schema_registry_url:
        if not args.schema_registry_url.startswith(("http://", "https://")):
            raise CommandError(
                f"--schema-registry-url {args.schema_registry_url}: expected http(s)://host:port", 2
            )
        from .registry_view import RegistryView

        registry = RegistryView(args.schema_registry_url, args.schema_registry_user_info)
    elif args.schema_registry_user_info:
        raise CommandError("--schema-registry-user-info needs --schema-registry-url", 2)
    client = _client(args)  # validates --bootstrap-server and --command-config now
    settings = ConsoleSettings(args.bootstrap_server, read_only=args.read_only, client_factory=lambda: client,
                               basic_auth=users, registry=registry, scan_cap=args.scan_cap,
                               metrics_urls=tuple(args.metrics_url),
                               metrics_interval_s=args.metrics_interval, max_searches=args.max_searches,
                               search_timeout_s=args.search_timeout,
                               metrics_url_for=None if port is None else (
                                   lambda _node, host: f"http://{_url_host(host)}:{port}/metrics"))
    app = build_app(settings)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", access_log=False,
                            lifespan="on")
    server = uvicorn.Server(config)
    print(f"strom console on http://{args.host}:{args.port}/ for {args.bootstrap_server}"
          f"{' (read-only)' if args.read_only else ''}", file=sys.stderr, flush=True)
    asyncio.run(server.serve())
    return 0 if server.started else 1


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
