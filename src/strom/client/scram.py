"""The client half of SCRAM (RFC 5802; SCRAM-SHA-256 / SCRAM-SHA-512 as RFC 7677 and Kafka use
them), sans-IO: :meth:`ScramClient.client_first`, then :meth:`ScramClient.client_final` with the
server-first message, then :meth:`ScramClient.verify_server_final`.

As Kafka's ScramFormatter, librdkafka, strom's broker and strom's admin credential helper do,
the user name and the password are used as their raw UTF-8 bytes, *without* SASLprep
(RFC 4013): a password holding a soft hyphen, a Roman numeral or a control character must
produce the same salted password here as the credential stored on the broker.

No channel binding (``n,,``), no authorization identity: Kafka's SCRAM has neither. The server's
iteration count must be at least 4096 (Kafka's client refuses fewer) and at most
:data:`MAX_ITERATIONS` (a bound on the work a hostile server can ask for).

Error contract: every failure (malformed or inconsistent server message, a server ``e=`` error,
a bad server signature) raises :class:`KafkaError` SASL_AUTHENTICATION_FAILED (58); messages
never hold the password or key material.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import secrets

from kio.schema.errors import ErrorCode

from strom.client.errors import KafkaError
from strom.security.scram_keys import SCRAM_MECHANISMS, salted_password, scram_keys

__all__ = ["HASHES", "MAX_ITERATIONS", "MIN_ITERATIONS", "ScramClient"]

HASHES = {name: hash_name for name, (_wire_id, hash_name) in SCRAM_MECHANISMS.items()}
MIN_ITERATIONS = 4096  # Kafka's ScramMechanism minimum; its client refuses fewer
MAX_ITERATIONS = 1_000_000
_AUTH_FAILED = int(ErrorCode.sasl_authentication_failed)
_GS2_HEADER = "n,,"


def _saslname(name: str) -> str:
    """RFC 5802 saslname: ``=`` -> ``=3D``, ``,`` -> ``=2C`` (in that order)."""
    return name.replace("=", "=3D").replace(",", "=2C")


def _printable_nonce(value: str) -> bool:
    # RFC 5802: printable = %x21-2B / %x2D-7E (printable ASCII except ",")
    return value != "" and all(0x21 <= ord(c) <= 0x7E and c != "," for c in value)


class ScramClient:
    """One SCRAM login as a client. ``nonce`` is for tests (fixed vectors); by default a fresh
    random one is made."""

    def __init__(self, mechanism: str, username: str, password: str, *, nonce: str | None = None) -> None:
        if mechanism not in HASHES:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self._hash = HASHES[mechanism]
        self._username = username
        self._password = password
        self._nonce = nonce if nonce is not None else secrets.token_urlsafe(24)
        if not _printable_nonce(self._nonce):
            raise ValueError("a SCRAM nonce is printable ASCII without ','")
        self._client_first_bare = f"n={_saslname(username)},r={self._nonce}"
        self._server_signature: bytes | None = None
        self._step = 0

    def __repr__(self) -> str:
        return f"ScramClient({self.mechanism}, user={self._username!r})"

    def _fail(self, reason: str) -> KafkaError:
        self._step = 3
        return KafkaError(_AUTH_FAILED, f"{self.mechanism} authentication failed: {reason}")

    def client_first(self) -> bytes:
        """``n,,n=<user>,r=<client nonce>``."""
        if self._step != 0:
            raise self._fail("client-first message already sent")
        self._step = 1
        return (_GS2_HEADER + self._client_first_bare).encode("utf-8")

    def client_final(self, server_first: bytes) -> bytes:
        """The client-final message (``c=biws,r=<nonce>,p=<proof>``) answering ``server_first``
        (``r=<nonce>,s=<salt>,i=<iterations>[,extensions]``)."""
        if self._step != 1:
            raise self._fail("unexpected server-first message")
        self._step = 2
        try:
            text = server_first.decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail("server-first message is not UTF-8") from None
        if text.startswith("e="):
            raise self._fail(f"the server refused the login ({text[2:200] or 'no reason given'})")
        if text.startswith("m="):
            raise self._fail("server-first message requires an unsupported extension")
        parts = text.split(",")
        if len(parts) < 3 or not (
            parts[0].startswith("r=") and parts[1].startswith("s=") and parts[2].startswith("i=")
        ):
            raise self._fail("malformed server-first message (expected r=..,s=..,i=..)")
        nonce, salt_b64, iterations_text = parts[0][2:], parts[1][2:], parts[2][2:]
        if not _printable_nonce(nonce):
            raise self._fail("malformed nonce in the server-first message")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise self._fail("the server nonce does not extend the client nonce")
        try:
            salt = base64.b64decode(salt_b64, validate=True)
        except (binascii.Error, ValueError):
            raise self._fail("malformed salt in the server-first message") from None
        if not iterations_text.isascii() or not iterations_text.isdigit():
            raise self._fail("malformed iteration count in the server-first message")
        iterations = int(iterations_text)
        if iterations < MIN_ITERATIONS:
            raise self._fail(f"iteration count {iterations} is less than the minimum {MIN_ITERATIONS}")
        if iterations > MAX_ITERATIONS:
            raise self._fail(f"iteration count {iterations} is more than the maximum {MAX_ITERATIONS}")

        client_key, stored_key, server_key = scram_keys(
            self._hash, salted_password(self._hash, self._password, salt, iterations)
        )
        channel_binding = base64.b64encode(_GS2_HEADER.encode()).decode()  # "biws"
        without_proof = f"c={channel_binding},r={nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        client_signature = hmac.new(stored_key, auth_message, self._hash).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, client_signature, strict=True))
        self._server_signature = hmac.new(server_key, auth_message, self._hash).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        """Check the server's ``v=<signature>``; an ``e=<error>`` or a wrong signature fails."""
        if self._step != 2 or self._server_signature is None:
            raise self._fail("unexpected server-final message")
        self._step = 3
        try:
            text = server_final.decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail("server-final message is not UTF-8") from None
        first = text.split(",", 1)[0]
        if first.startswith("e="):
            raise self._fail(f"the server refused the login ({first[2:200] or 'no reason given'})")
        if not first.startswith("v="):
            raise self._fail("malformed server-final message (expected v=..)")
        try:
            signature = base64.b64decode(first[2:], validate=True)
        except (binascii.Error, ValueError):
            raise self._fail("malformed server signature") from None
        if not hmac.compare_digest(signature, self._server_signature):
            raise self._fail("invalid server signature (the server does not know the credential)")
