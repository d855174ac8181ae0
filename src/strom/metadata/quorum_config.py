"""The KRaft settings of a node, parsed and checked together (Kafka's ``QuorumConfig`` and the
KRaft part of ``KafkaConfig.validateValues``).

What a node is and whom it talks to:

* ``process.roles``: ``broker``, ``controller`` or both (``broker,controller``, strom's default:
  one process that serves clients and votes in the metadata quorum).
* ``controller.quorum.voters``: the static quorum, ``id@host:port,...``. Each controller must be
  one of them (its ``node.id``); a broker-only node must not be.
* ``controller.listener.names``: the listeners (names in ``listeners``) the controller serves
  the quorum on. A controller must have at least one of them in ``listeners``; a broker-only
  node must name one but not listen on it (it is the one it uses to reach the controllers).

strom extension (zero set-up): a combined node (``broker,controller``) with an empty
``controller.quorum.voters`` and no ``controller.quorum.bootstrap.servers`` is a quorum of one,
itself; it needs no controller listener (:attr:`KRaftConfig.single_node`). That is what plain
``strom serve`` runs, and why its data dirs are formatted on first start (see
:mod:`strom.log.log_dirs`). A node with explicit voters is part of a multi-node cluster and
needs ``strom storage format`` first, as Kafka does.

Dynamic quorums (KIP-853: ``controller.quorum.bootstrap.servers`` with no voters on a
controller) are not supported yet and refused with a message saying so; a broker-only node may
use ``controller.quorum.bootstrap.servers`` to find the controllers.

This module imports nothing else from strom (``strom.config`` imports it).

Error contract: :class:`QuorumConfigError` (a ``ValueError``) whose message names the setting;
``strom.config`` re-raises it as its ``ConfigError``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BROKER_ROLE",
    "CONTROLLER_ROLE",
    "KRaftConfig",
    "QuorumConfigError",
    "Voter",
    "parse_bootstrap_servers",
    "parse_listener_names",
    "parse_process_roles",
    "parse_voters",
]

BROKER_ROLE = "broker"
CONTROLLER_ROLE = "controller"
ROLES_KEY = "process.roles"
VOTERS_KEY = "controller.quorum.voters"
BOOTSTRAP_KEY = "controller.quorum.bootstrap.servers"
CONTROLLER_LISTENERS_KEY = "controller.listener.names"
NON_ROUTABLE_HOST = "0.0.0.0"
_FORM = "Each entry should be in the form `{id}@{host}:{port}`."
# Kafka's Utils.validHostPattern / HOST_PORT_PATTERN, host part
_HOST = re.compile(r"^[0-9a-zA-Z\-%._:]+$")


class QuorumConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Voter:
    """One entry of ``controller.quorum.voters``."""

    node_id: int
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.node_id}@{host}:{self.port}"


def _csv(text: Any) -> list[str]:
    return [item.strip() for item in str(text or "").split(",") if item.strip()]


def parse_process_roles(text: Any) -> frozenset[str]:
    """``process.roles`` -> {"broker"} | {"controller"} | both (Kafka's ``parseProcessRoles``)."""
    roles = _csv(text)
    if not roles:
        raise QuorumConfigError(f"{ROLES_KEY} is empty: it must be broker, controller or broker,controller")
    for role in roles:
        if role not in (BROKER_ROLE, CONTROLLER_ROLE):
            raise QuorumConfigError(
                f"Unknown process role '{role}' in {ROLES_KEY} "
                f"(only 'broker' and 'controller' are allowed roles)"
            )
    if len(set(roles)) != len(roles):
        raise QuorumConfigError(f"Duplicate role names found in `{ROLES_KEY}`: {roles}")
    return frozenset(roles)


def parse_listener_names(text: Any) -> tuple[str, ...]:
    """``controller.listener.names`` -> upper-cased names in order (listener names are
    case-insensitive, as in ``listeners``)."""
    return tuple(name.upper() for name in _csv(text))


def _host_port(entry: str, text: str, key: str, form: str) -> tuple[str, int]:
    host, sep, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not _HOST.match(host):
        raise QuorumConfigError(
            f"Failed to parse host name from entry {entry} for the configuration {key}. {form}"
        )
    if not port_text.isdigit() or not 0 < int(port_text) <= 65535:
        raise QuorumConfigError(
            f"Failed to parse host port from entry {entry} for the configuration {key}. {form}"
        )
    return host, int(port_text)


def parse_voters(text: Any) -> tuple[Voter, ...]:
    """``controller.quorum.voters`` (``id@host:port,...``) in order. Refused, naming the
    setting: an entry not of that form, a negative or non-integer id, an id given twice, two
    voters at one endpoint, the non-routable host 0.0.0.0 (Kafka's ``parseVoterConnections``
    with routable addresses required, plus the duplicate checks)."""
    voters: list[Voter] = []
    for entry in _csv(text):
        parts = entry.split("@")
        if len(parts) != 2:
            raise QuorumConfigError(f"Invalid configuration value for {VOTERS_KEY}. {_FORM}")
        id_text, address = parts[0].strip(), parts[1].strip()
        try:
            node_id = int(id_text)
        except ValueError:
            raise QuorumConfigError(
                f"Failed to parse voter ID as an integer from {id_text!r} in {VOTERS_KEY}. {_FORM}"
            ) from None
        if node_id < 0:
            raise QuorumConfigError(f"Invalid voter ID {node_id} in {VOTERS_KEY}: ids are non-negative")
        host, port = _host_port(entry, address, VOTERS_KEY, _FORM)
        if host == NON_ROUTABLE_HOST:
            raise QuorumConfigError(f"Host string ({host}) is not routeable in {VOTERS_KEY} entry {entry}")
        for other in voters:
            if other.node_id == node_id:
                raise QuorumConfigError(f"{VOTERS_KEY} lists node id {node_id} more than once")
            if (other.host.lower(), other.port) == (host.lower(), port):
                raise QuorumConfigError(
                    f"{VOTERS_KEY} gives nodes {other.node_id} and {node_id} the same endpoint {host}:{port}"
                )
        voters.append(Voter(node_id, host, port))
    return tuple(voters)


def parse_bootstrap_servers(text: Any) -> tuple[tuple[str, int], ...]:
    """``controller.quorum.bootstrap.servers`` (``host:port,...``)."""
    form = 'Each entry should be in the form "{host}:{port}"'
    return tuple(_host_port(entry, entry, BOOTSTRAP_KEY, form) for entry in _csv(text))


@dataclass(frozen=True)
class KRaftConfig:
    """A node's KRaft settings after :meth:`parse` (names as Kafka's ``KafkaConfig``)."""

    node_id: int
    process_roles: frozenset[str]
    voters: tuple[Voter, ...]
    bootstrap_servers: tuple[tuple[str, int], ...]
    controller_listener_names: tuple[str, ...]
    # the entries of ``listeners`` named in controller.listener.names: (name, host, port)
    controller_listeners: tuple[tuple[str, str, int], ...]
    election_timeout_ms: int
    fetch_timeout_ms: int
    election_backoff_max_ms: int
    request_timeout_ms: int
    append_linger_ms: int
    retry_backoff_ms: int
    broker_heartbeat_interval_ms: int
    broker_session_timeout_ms: int

    @property
    def is_broker(self) -> bool:
        return BROKER_ROLE in self.process_roles

    @property
    def is_controller(self) -> bool:
        return CONTROLLER_ROLE in self.process_roles

    @property
    def is_combined(self) -> bool:
        return self.is_broker and self.is_controller

    @property
    def single_node(self) -> bool:
        """The zero set-up quorum: a combined node with no voters configured votes alone."""
        return self.is_combined and not self.voters and not self.bootstrap_servers

    @property
    def voter_ids(self) -> frozenset[int]:
        """The ids of the quorum's voters (this node alone for :attr:`single_node`)."""
        if self.single_node:
            return frozenset({self.node_id})
        return frozenset(v.node_id for v in self.voters)

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.voter_ids

    @classmethod
    def parse(
        cls,
        values: Mapping[str, Any],
        node_id: int,
        listeners: Sequence[tuple[str, str, int]],
        protocol_map: Mapping[str, str],
    ) -> KRaftConfig:
        """Parse and check the KRaft settings of ``values`` (a broker config's typed values,
        every key of ``strom.config_schema.BROKER_CONFIGS`` present: the defaults live there), given
        the node id and the already parsed ``listeners`` (name, host, port) and
        ``listener.security.protocol.map``. Raises :class:`QuorumConfigError`."""
        roles = parse_process_roles(values[ROLES_KEY])
        voters = parse_voters(values[VOTERS_KEY])
        bootstrap = parse_bootstrap_servers(values[BOOTSTRAP_KEY])
        names = parse_listener_names(values[CONTROLLER_LISTENERS_KEY])
        listener_names = [name for name, _h, _p in listeners]
        cfg = cls(
            node_id=node_id,
            process_roles=roles,
            voters=voters,
            bootstrap_servers=bootstrap,
            controller_listener_names=names,
            controller_listeners=tuple(lst for lst in listeners if lst[0] in names),
            election_timeout_ms=int(values["controller.quorum.election.timeout.ms"]),
            fetch_timeout_ms=int(values["controller.quorum.fetch.timeout.ms"]),
            election_backoff_max_ms=int(values["controller.quorum.election.backoff.max.ms"]),
            request_timeout_ms=int(values["controller.quorum.request.timeout.ms"]),
            append_linger_ms=int(values["controller.quorum.append.linger.ms"]),
            retry_backoff_ms=int(values["controller.quorum.retry.backoff.ms"]),
            broker_heartbeat_interval_ms=int(values["broker.heartbeat.interval.ms"]),
            broker_session_timeout_ms=int(values["broker.session.timeout.ms"]),
        )
        cfg._validate(listener_names, protocol_map)
        return cfg

    def _validate(self, listener_names: Sequence[str], protocol_map: Mapping[str, str]) -> None:
        if self.node_id < 0:
            raise QuorumConfigError(
                f"Missing configuration `node.id` which is required when `{ROLES_KEY}` is defined "
                f"(i.e. when running in KRaft mode): node.id must be 0 or more, not {self.node_id}"
            )
        ids = sorted(v.node_id for v in self.voters)
        if not self.voters and not self.bootstrap_servers and not self.single_node:
            raise QuorumConfigError(
                f"If using {ROLES_KEY}, either {BOOTSTRAP_KEY} must contain the set of bootstrap "
                f"controllers or {VOTERS_KEY} must contain a parseable set of controllers "
                f"(only a broker,controller node may leave both empty: strom's quorum of one)"
            )
        if self.is_controller and not self.voters and self.bootstrap_servers:
            raise QuorumConfigError(
                f"{BOOTSTRAP_KEY} without {VOTERS_KEY} on a controller is a dynamic quorum (KIP-853), "
                f"which strom does not support yet: list the controllers in {VOTERS_KEY}"
            )
        if self.is_controller:
            if self.voters and self.node_id not in ids:
                raise QuorumConfigError(
                    f"If {ROLES_KEY} contains the 'controller' role, the node id {self.node_id} must be "
                    f"included in the set of voters {VOTERS_KEY}={ids}"
                )
            if not self.single_node and not self.controller_listeners:
                raise QuorumConfigError(
                    f"{CONTROLLER_LISTENERS_KEY} must contain at least one value appearing in the "
                    f"'listeners' configuration when running the KRaft controller role"
                    f" ({CONTROLLER_LISTENERS_KEY}={','.join(self.controller_listener_names)}, "
                    f"listeners names {','.join(listener_names)})"
                )
            missing = [n for n in self.controller_listener_names if n not in listener_names]
            if missing:
                raise QuorumConfigError(
                    f"{CONTROLLER_LISTENERS_KEY} must only contain values appearing in the 'listeners' "
                    f"configuration when running the KRaft controller role: {','.join(missing)} is not "
                    f"in listeners ({','.join(listener_names)})"
                )
            if not self.is_broker and len(self.controller_listeners) != len(listener_names):
                raise QuorumConfigError(
                    f"The listeners config must only contain KRaft controller listeners from "
                    f"{CONTROLLER_LISTENERS_KEY} when {ROLES_KEY}=controller"
                )
            self._check_own_voter_endpoint()
        else:  # broker only
            if self.node_id in ids:
                raise QuorumConfigError(
                    f"If {ROLES_KEY} contains just the 'broker' role, the node id {self.node_id} must "
                    f"not be included in the set of voters {VOTERS_KEY}={ids}"
                )
            if not self.controller_listener_names:
                raise QuorumConfigError(
                    f"{CONTROLLER_LISTENERS_KEY} must contain at least one value when running KRaft "
                    f"with just the broker role"
                )
            if self.controller_listeners:
                raise QuorumConfigError(
                    f"{CONTROLLER_LISTENERS_KEY} must not contain a value appearing in the 'listeners' "
                    f"configuration when running KRaft with just the broker role"
                )
            for name in self.controller_listener_names:
                if name not in protocol_map:
                    raise QuorumConfigError(
                        f"Controller listener with name {name} defined in {CONTROLLER_LISTENERS_KEY} not "
                        f"found in listener.security.protocol.map"
                    )
        if self.is_broker:
            broker_listeners = [n for n in listener_names if n not in self.controller_listener_names]
            if not broker_listeners:
                raise QuorumConfigError(
                    f"There must be at least one broker advertised listener. Perhaps all listeners "
                    f"appear in {CONTROLLER_LISTENERS_KEY}?"
                )

    def _check_own_voter_endpoint(self) -> None:
        """strom's check (Kafka has none): the port this controller's voter entry gives must be
        one its controller listeners listen on, or the other voters could never reach it.
        Ephemeral (port 0) listeners are not checked."""
        own = next((v for v in self.voters if v.node_id == self.node_id), None)
        if own is None or not self.controller_listeners:
            return
        ports = {port for _n, _h, port in self.controller_listeners}
        if 0 in ports or own.port in ports:
            return
        names = ",".join(self.controller_listener_names)
        raise QuorumConfigError(
            f"{VOTERS_KEY} gives this node ({self.node_id}) the endpoint {own.host}:{own.port}, but "
            f"its controller listeners ({CONTROLLER_LISTENERS_KEY}={names}) listen on port "
            f"{','.join(str(p) for p in sorted(ports))}"
        )
