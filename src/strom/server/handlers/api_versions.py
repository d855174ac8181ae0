"""ApiVersions (18): the advertised ranges; the response header is always v0 (KIP-511)."""

from __future__ import annotations

from typing import Any

from ...protocol.api_versions import advertised
from ...protocol.errors import ErrorCode
from ..context import RequestContext
from . import REGISTRY, handler


def api_versions_body(error: int = ErrorCode.NONE) -> dict[str, Any]:
    return {
        "error_code": error,
        "api_keys": [
            {"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in advertised(set(REGISTRY))
        ],
        "throttle_time": 0,
        "finalized_features_epoch": -1,
    }


@handler(18)
async def handle_api_versions(ctx: RequestContext, request: Any) -> dict[str, Any]:
    return api_versions_body()
