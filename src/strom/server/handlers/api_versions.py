"""ApiVersions (18): the advertised ranges and features; the response header is always v0 (KIP-511).

Features (KIP-584) are those of a Kafka 4.0 broker in a cluster formatted with 4.0's defaults:
supported ``metadata.version`` 7..25 (3.3-IV3..4.0-IV3), ``kraft.version`` 0..1,
``transaction.version`` 0..2, ``group.version`` 0..1, ``eligible.leader.replicas.version`` 0..1;
finalized ``metadata.version`` 25, ``group.version`` 1 and ``transaction.version`` 2
(``strom.transaction.version``; a level-0 feature is not listed, as in Kafka). Clients act on
``transaction.version``: at 2 the Java producer uses KIP-890's transaction protocol.
Below v4 the response leaves out supported features whose minimum is 0 (the schema's rule: older
clients choke on it).
"""

from __future__ import annotations

from typing import Any

from ...protocol.api_versions import advertised
from ...protocol.errors import ErrorCode
from ..context import RequestContext
from . import REGISTRY, handler

# name -> (min, max) a Kafka 4.0 broker supports
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {
    "metadata.version": (7, 25),
    "kraft.version": (0, 1),
    "transaction.version": (0, 2),
    "group.version": (0, 1),
    "eligible.leader.replicas.version": (0, 1),
}
METADATA_VERSION = 25  # 4.0-IV3
GROUP_VERSION = 1
# the epoch of the finalized features (Kafka: the metadata offset of their last change); >= 0 so
# clients take them into account (-1 means unknown)
FINALIZED_FEATURES_EPOCH = 1


def finalized_features(transaction_version: int) -> dict[str, int]:
    levels = {
        "metadata.version": METADATA_VERSION,
        "group.version": GROUP_VERSION,
        "transaction.version": transaction_version,
    }
    return {name: level for name, level in levels.items() if level > 0}


def api_versions_body(
    error: int = ErrorCode.NONE, *, version: int = 0, transaction_version: int = 2, controller: bool = False
) -> dict[str, Any]:
    """``controller``: the answer on a controller listener, which also lists the controller's
    APIs (Envelope, BrokerRegistration, BrokerHeartbeat, the KRaft RPCs ...)."""
    body: dict[str, Any] = {
        "error_code": error,
        "api_keys": [
            {"api_key": k, "min_version": lo, "max_version": hi}
            for k, lo, hi in advertised(set(REGISTRY), controller=controller)
        ],
        "throttle_time": 0,
        "finalized_features_epoch": -1,
    }
    if version >= 3 and error == ErrorCode.NONE:
        body["supported_features"] = [
            {"name": name, "min_version": lo, "max_version": hi}
            for name, (lo, hi) in SUPPORTED_FEATURES.items()
            if version >= 4 or lo > 0
        ]
        body["finalized_features_epoch"] = FINALIZED_FEATURES_EPOCH
        body["finalized_features"] = [
            {"name": name, "max_version_level": level, "min_version_level": level}
            for name, level in finalized_features(transaction_version).items()
        ]
    return body


@handler(18)
async def handle_api_versions(ctx: RequestContext, request: Any) -> dict[str, Any]:
    config = ctx.broker.config
    tv = int(config["strom.transaction.version"])
    return api_versions_body(
        version=ctx.api_version, transaction_version=tv, controller=_on_controller_listener(ctx)
    )


def _on_controller_listener(ctx: RequestContext) -> bool:
    kraft = getattr(ctx.broker.config, "kraft", None)
    if not callable(kraft):
        return False
    try:
        names = kraft().controller_listener_names
    except Exception:  # a config without KRaft settings (tests' stand-ins)
        return False
    return ctx.session.listener in names
