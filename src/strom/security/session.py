"""The security state of one client connection, shared by the network driver (which creates it
when a connection is accepted) and the handlers (SaslHandshake/SaslAuthenticate advance it).

Kafka's rules, which the network driver enforces with it:

- On a ``SASL_PLAINTEXT`` or ``SASL_SSL`` listener a connection starts unauthenticated; until a
  SASL exchange succeeds only ApiVersions, SaslHandshake and SaslAuthenticate are answered, and
  any other request closes the connection.
- The principal is ``User:ANONYMOUS`` on PLAINTEXT, the TLS client certificate's subject
  (``User:CN=...``) on SSL with client authentication, the SASL user name (``User:alice``)
  after SASL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ANONYMOUS", "SECURITY_PROTOCOLS", "ConnectionSession"]

ANONYMOUS = "User:ANONYMOUS"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(slots=True)
class ConnectionSession:
    listener: str = "PLAINTEXT"  # the listener's name, as in ``listeners``
    security_protocol: str = "PLAINTEXT"  # one of SECURITY_PROTOCOLS
    principal: str = ANONYMOUS
    authenticated: bool = True  # False on SASL listeners until SaslAuthenticate succeeds
    sasl_mechanism: str | None = None  # chosen by SaslHandshake
    sasl_exchange: Any = None  # the server side of a SASL exchange in progress
    # set by a handler (failed SASL authentication, unsupported mechanism): the network driver
    # closes the connection once the response to this request is written, as Kafka does
    close_after_response: bool = False
    # set by a handler whose client exceeded its quota: the network driver reads no further
    # request of this connection for that long after the response (KIP-219)
    throttle_ms: int = 0
    # KIP-368 (connections.max.reauth.ms): when the SASL session ends (monotonic ms), and whether
    # an exchange in progress is a re-authentication of an authenticated connection
    session_expiry_ms: float | None = None
    reauthenticating: bool = False

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @classmethod
    def for_listener(cls, listener: str, security_protocol: str) -> ConnectionSession:
        sasl = security_protocol.startswith("SASL_")
        return cls(listener=listener, security_protocol=security_protocol, authenticated=not sasl)
