"""SaslHandshake (17, v0-1) and SaslAuthenticate (36, v0-2): they advance the connection's
:class:`~strom.security.session.ConnectionSession`.

- SaslHandshake: an enabled mechanism -> NONE, the enabled list, and a fresh exchange kept in
  ``session.sasl_exchange``; otherwise UNSUPPORTED_SASL_MECHANISM with the list, and the
  connection is closed after the answer (Kafka's authenticator fails the channel).
- SaslAuthenticate: feeds the token to the exchange; success sets ``authenticated`` and
  ``principal = "User:<name>"``. A failure answers SASL_AUTHENTICATION_FAILED with a message and
  sets ``session.close_after_response``: the network driver closes the connection once that
  answer is written, as Kafka does after a failed authentication. v1+ answers
  ``session_lifetime_ms``: ``connections.max.reauth.ms`` (0, the default: no deadline); with
  OAUTHBEARER the token's remaining lifetime, capped by ``connections.max.reauth.ms`` when set
  (Kafka's rule), so the session ends when the token does.
- OAUTHBEARER (:mod:`strom.security.oauthbearer`): a refused token is answered with the challenge
  ``{"status":"invalid_token"}`` (error NONE); the client's ``\x01`` then fails the exchange.
- Re-authentication (KIP-368, with ``connections.max.reauth.ms`` > 0): an authenticated client
  sends SaslHandshake (v1+, the same mechanism) and SaslAuthenticate again before its session
  ends; the principal may not change (else SASL_AUTHENTICATION_FAILED and the connection is
  closed). A connection whose session ended is closed at its next request other than these.
- Handshake v0 is answered like v1, but the unframed token exchange Kafka allows after it (raw
  SASL bytes without a request header) is not supported: such bytes fail to parse as a request
  and the connection is closed. Clients that see SaslAuthenticate in ApiVersions (every client
  since Kafka 1.0) use v1 and SaslAuthenticate.

On a listener that is not SASL_*, or after a successful authentication (without
re-authentication), both APIs answer
ILLEGAL_SASL_STATE and the connection stays open (as in Kafka). A second handshake during an
exchange, or SaslAuthenticate before any handshake, also answer ILLEGAL_SASL_STATE and close
the connection. The broker-wide state (settings parsed from the config, the SCRAM credential
store) is the broker's ``sasl`` (:class:`~strom.security.sasl.SaslState`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ...protocol.errors import ErrorCode
from ...security.sasl import SaslAuthenticationError
from ..context import RequestContext
from . import handler

log = logging.getLogger("strom.sasl")

SASL_AUTHENTICATION_FAILED = 58


def _close_after(ctx: RequestContext) -> None:
    session = ctx.session
    session.sasl_exchange = None
    session.sasl_mechanism = None
    session.close_after_response = True


@handler(17)
async def handle_sasl_handshake(ctx: RequestContext, request: Any) -> dict[str, Any]:
    session = ctx.session
    state = ctx.broker.sasl
    enabled = list(state.settings.enabled_mechanisms(session.listener))
    reauth = (
        session.uses_sasl
        and session.authenticated
        and session.session_expiry_ms is not None  # (Kafka: a session with an end may be renewed)
        and ctx.api_version >= 1
        and session.sasl_exchange is None
    )
    if reauth:
        # KIP-368: an authenticated client re-authenticates, with the same mechanism
        mechanism = str(request.mechanism)
        if mechanism != session.sasl_mechanism:
            log.info("%s re-authenticating with %s after %s: refused", ctx.client_host, mechanism,
                     session.sasl_mechanism)
            _close_after(ctx)
            return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": enabled}
        session.reauthenticating = True
        session.sasl_exchange = state.settings.new_exchange(mechanism, session.listener, state.lookup)
        return {"error_code": ErrorCode.NONE, "mechanisms": enabled}
    if not session.uses_sasl or session.authenticated:
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": enabled}
    if session.sasl_exchange is not None:
        # a second handshake in the middle of an exchange: Kafka fails the connection
        _close_after(ctx)
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": enabled}
    mechanism = str(request.mechanism)
    if mechanism not in enabled:
        log.info("%s asked for disabled SASL mechanism %r", ctx.client_host, mechanism)
        _close_after(ctx)
        return {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": enabled}
    session.sasl_mechanism = mechanism
    session.sasl_exchange = state.settings.new_exchange(mechanism, session.listener, state.lookup)
    return {"error_code": ErrorCode.NONE, "mechanisms": enabled}


def _reauth_ms(ctx: RequestContext) -> int:
    return int(ctx.broker.config["connections.max.reauth.ms"] or 0)


def _auth_response(
    ctx: RequestContext, code: int, message: str | None, auth_bytes: bytes, lifetime_ms: int = 0
) -> dict[str, Any]:
    out: dict[str, Any] = {"error_code": code, "error_message": message, "auth_bytes": auth_bytes}
    if ctx.api_version >= 1:
        out["session_lifetime"] = lifetime_ms
    return out


@handler(36)
async def handle_sasl_authenticate(ctx: RequestContext, request: Any) -> dict[str, Any]:
    session = ctx.session
    exchange = session.sasl_exchange
    if exchange is None or not session.uses_sasl or (session.authenticated and not session.reauthenticating):
        # Kafka: on a listener without SASL, or once authenticated, the request is answered and
        # the connection kept; before any handshake the authenticator fails the connection
        if session.uses_sasl and not session.authenticated:
            _close_after(ctx)
        return _auth_response(
            ctx,
            ErrorCode.ILLEGAL_SASL_STATE,
            "SaslAuthenticate is only valid after a successful SaslHandshake on a SASL listener",
            b"",
        )
    try:
        if exchange.mechanism == "OAUTHBEARER":  # may read the JWKS (a file or an https fetch)
            reply = await asyncio.to_thread(exchange.evaluate, bytes(request.auth_bytes))
        else:
            reply = exchange.evaluate(bytes(request.auth_bytes))
    except SaslAuthenticationError as e:
        # the client gets Kafka's text; the reason (e.g. an unknown user) only the log
        log.info(
            "failed authentication with %s (%s) from %s on %s",
            session.sasl_mechanism,
            e.reason or e,
            ctx.client_host,
            session.listener,
        )
        _close_after(ctx)
        return _auth_response(ctx, SASL_AUTHENTICATION_FAILED, str(e), b"")
    if exchange.complete:
        principal = f"User:{exchange.username}"
        session.sasl_exchange = None
        if session.reauthenticating:
            session.reauthenticating = False
            if principal != session.principal:  # Kafka: the principal may not change
                message = (
                    f"Cannot change principals during re-authentication from {session.principal}: {principal}"
                )
                log.info("%s: %s", ctx.client_host, message)
                _close_after(ctx)
                return _auth_response(ctx, SASL_AUTHENTICATION_FAILED, message, b"")
            log.debug("%s re-authenticated as %s", ctx.client_host, principal)
        session.authenticated = True
        session.principal = principal
        log.debug("%s authenticated as %s with %s", ctx.client_host, session.principal, exchange.mechanism)
        lifetime = _reauth_ms(ctx)
        credential_end = getattr(exchange, "expiry_ms", None)  # OAUTHBEARER: the token's exp
        if credential_end is not None:
            # Kafka: min(token lifetime, connections.max.reauth.ms when set), never negative
            left = max(0, int(credential_end - ctx.broker.clock.time_ms()))
            lifetime = min(left, lifetime) if lifetime > 0 else left
            session.session_expiry_ms = ctx.broker.clock.monotonic_ms() + lifetime
        if lifetime > 0 and ctx.api_version >= 1:  # (v0 clients cannot re-authenticate)
            session.session_expiry_ms = ctx.broker.clock.monotonic_ms() + lifetime
            return _auth_response(ctx, ErrorCode.NONE, None, reply, lifetime)
    return _auth_response(ctx, ErrorCode.NONE, None, reply)
