"""The schema registry (:mod:`strom.schema_registry`) served by the broker's HTTP listener under
``/schema-registry/`` (``strom.http.schema.registry.enable``).

It is the same Starlette application ``strom schema-registry`` serves, driven through the console's
ASGI bridge (:func:`~strom.observability.console_mount.serve_asgi`) with ``/schema-registry`` as its
root path, so clients take ``http://broker:9644/schema-registry`` as the registry's URL
(confluent-kafka joins its request paths to the URL it is given). Its state is the ``_schemas``
topic of ``strom.http.schema.registry.bootstrap.servers`` (empty: this broker's own first PLAINTEXT
listener) read and written with librdkafka, as the standalone registry does; every broker that
enables it is one registry instance, and the instances elect their leader through the consumer
group ``strom.http.schema.registry.group.id`` exactly as standalone instances do (they may be
mixed). The registry's blocking work runs in worker threads, never on the broker's event loop.

The store is opened in the background once the broker's Kafka listener is up (the HTTP listener
starts first); until then requests get 503 with Confluent's error body and the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import TYPE_CHECKING, Any

from ..config_schema import ConfigError

if TYPE_CHECKING:
    from ..schema_registry.auth import Credential
    from ..server.broker import Broker

__all__ = ["REGISTRY_PREFIX", "RegistryMount"]

log = logging.getLogger("strom.http")
REGISTRY_PREFIX = "/schema-registry"
_NO_PLAINTEXT = ("strom.http.schema.registry.enable: this broker has no PLAINTEXT listener; set "
                 "strom.http.schema.registry.bootstrap.servers (and "
                 "strom.http.schema.registry.command.config for its security)")
_RETRY_S = 2.0


class RegistryMount:
    """One broker's schema registry instance (store, leader election, REST application)."""

    def __init__(self, broker: Broker) -> None:
        from ..schema_registry.app import client_config, load_properties
        from ..schema_registry.auth import load_realm

        cfg = broker.config
        self.broker = broker
        self.configured = str(cfg["strom.http.schema.registry.bootstrap.servers"]).strip()
        self.topic = str(cfg["strom.http.schema.registry.topic"]).strip() or "_schemas"
        self.group_id = str(cfg["strom.http.schema.registry.group.id"]).strip() or "schema-registry"
        self.conf: dict[str, str] = {}
        command_config = str(cfg["strom.http.schema.registry.command.config"]).strip()
        if command_config:
            try:
                self.conf = client_config(load_properties(command_config))
            except (OSError, ValueError) as e:
                raise ConfigError(
                    f"strom.http.schema.registry.command.config {command_config}: {e}"
                ) from None
        self.users: dict[str, Credential] | None = None
        realm = str(cfg["strom.http.schema.registry.basic.auth.file"]).strip()
        if realm:
            try:
                self.users = load_realm(realm)
            except (OSError, ValueError) as e:
                raise ConfigError(f"strom.http.schema.registry.basic.auth.file: {e}") from None
        self.app: Any = None
        self.status = "starting: the schema registry's store is not open yet"
        self.url = ""  # this instance's URL (the listener's + the prefix), set at start
        self._task: asyncio.Task[None] | None = None
        self._store: Any = None
        self._elector: Any = None

    def bootstrap(self) -> str:
        if self.configured:
            return self.configured
        from .console_mount import own_plaintext_bootstrap

        return own_plaintext_bootstrap(self.broker, _NO_PLAINTEXT)

    async def start(self, http_url: str) -> None:
        self.url = http_url + REGISTRY_PREFIX
        self._task = asyncio.get_running_loop().create_task(self._open())

    async def _open(self) -> None:
        from ..schema_registry.app import build_app
        from ..schema_registry.election import LeaderElector
        from ..schema_registry.registry import Registry
        from ..schema_registry.store import KafkaStore, StoreError

        while True:
            try:
                conf = {**self.conf, "bootstrap.servers": self.bootstrap()}
                store = await asyncio.to_thread(KafkaStore, conf, topic=self.topic, timeout=15.0)
            except (OSError, StoreError) as e:
                self.status = f"starting: the schema registry's store is not open yet ({e})"
                await asyncio.sleep(_RETRY_S)
                continue
            break
        self._store = store
        self._elector = await asyncio.to_thread(LeaderElector, conf, self.topic, self.url, self.group_id)
        self.app = build_app(Registry(store), self._elector, self.users)
        self.status = "ready"
        log.info("schema registry at %s (state in %s on %s)", self.url, self.topic, conf["bootstrap.servers"])

    def unavailable(self) -> bytes:
        return json.dumps({"error_code": 50002, "message": self.status}).encode()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        for closer in (self._elector, self._store):
            if closer is not None:
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(closer.close)
        self._elector = self._store = None
