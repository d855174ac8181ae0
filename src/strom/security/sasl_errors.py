"""The error a SASL exchange fails with (every mechanism's: PLAIN, SCRAM, OAUTHBEARER), apart from
:mod:`strom.security.sasl` so that the mechanisms' modules need not import it back."""

from __future__ import annotations


class SaslAuthenticationError(Exception):
    """The exchange failed; the message is what the client is told. ``reason``, when given, is
    the detail for the broker's log only (never sent: e.g. whether the user exists)."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
