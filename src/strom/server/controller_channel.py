"""How a broker reaches the active controller (Kafka's ``NodeToControllerChannelManager``).

Theory of operation: everything a broker asks of the controller (BrokerRegistration,
BrokerHeartbeat, and the forwarded admin requests: CreateTopics, DeleteTopics, CreatePartitions,
AlterConfigs/IncrementalAlterConfigs, AllocateProducerIds) goes through one
:class:`ControllerChannel`: ``await channel.call(api_key, request)`` returns the controller's
response as a dict (the controller state machine's response shape) once the controller committed
the result, and raises :class:`~strom.controller.server.NotControllerError` when no controller
could answer.

:class:`LocalControllerChannel` calls the :class:`~strom.controller.server.ControllerServer` of
this process directly: a combined node whose controller is active needs no socket. A multi-node
quorum uses a channel that picks the local controller when it is active and otherwise sends the
request over the wire to the active controller's listener (retrying on NOT_CONTROLLER and on a
broken connection until its timeout).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..controller.server import ControllerServer

__all__ = ["ControllerChannel", "LocalControllerChannel"]


class ControllerChannel(Protocol):
    async def call(self, api_key: int, request: Any, api_version: int = -1) -> dict[str, Any]: ...

    async def close(self) -> None: ...


class LocalControllerChannel:
    """The controller of this process (raises NotControllerError when it is not active)."""

    def __init__(self, controller: ControllerServer) -> None:
        self.controller = controller

    async def call(self, api_key: int, request: Any, api_version: int = -1) -> dict[str, Any]:
        return await self.controller.call(api_key, request, api_version)

    async def close(self) -> None:
        return None
