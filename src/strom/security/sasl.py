"""Server side of SASL, sans-IO: the PLAIN and SCRAM-SHA-256/512 exchanges, the JAAS text that
declares PLAIN users, and the broker's SASL settings.

Theory of operation (Kafka's protocol, KIP-43/KIP-152):

1. On a SASL listener the client sends SaslHandshake with a mechanism; the broker answers with
   its enabled mechanisms, and an exchange object for that mechanism is kept on the connection.
2. Each SaslAuthenticate carries one client token; :meth:`SaslExchange.evaluate` returns the
   server's token. PLAIN is one round (``authzid \\0 user \\0 password``), SCRAM two
   (client-first -> server-first, client-final -> server-final, RFC 5802).
3. When ``complete`` is true the user is authenticated as ``username``. A failure raises
   :class:`SaslAuthenticationError` whose message goes back to the client (for SCRAM Kafka's
   fixed text, the same for an unknown user and a wrong password; the detail is in ``reason``,
   for the broker's log); Kafka then closes the connection.

Configuration (Kafka's names; listener names lower-cased in prefixes):

- ``sasl.enabled.mechanisms`` / ``listener.name.<listener>.sasl.enabled.mechanisms``: comma list
  of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (Kafka's default, GSSAPI, is not
  available in strom). OAUTHBEARER's settings (JWKS, audience, issuer, ...) are described in
  :mod:`strom.security.oauthbearer`.
- ``listener.name.<listener>.plain.sasl.jaas.config``, else ``sasl.jaas.config``: a JAAS entry
  such as ``org.apache.kafka.common.security.plain.PlainLoginModule required username="admin"
  password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";`` where every
  ``user_<name>`` option declares a PLAIN user (as Kafka's PlainServerCallbackHandler reads it).

Error contract: :class:`SaslAuthenticationError` from ``evaluate``; ``ConfigError`` from
:func:`validate_sasl_config`, :func:`parse_jaas_config` and :meth:`SaslSettings.from_values`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..config_schema import ConfigError
from ..metadata.image import ScramImage
from .credentials import SCRAM_MECHANISMS, CredentialStore, ImageCredentials, ScramCredential
from .jaas import JaasEntry, JaasError, parse_jaas
from .oauthbearer import OAuthBearerExchange, OAuthSettings, oauth_settings
from .sasl_errors import SaslAuthenticationError

__all__ = [
    "MECHANISMS",
    "JaasEntry",
    "PlainExchange",
    "SaslAuthenticationError",
    "SaslExchange",
    "SaslSettings",
    "SaslState",
    "ScramExchange",
    "parse_jaas_config",
    "validate_sasl_config",
]

_log = logging.getLogger("strom.sasl")

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class SaslExchange(Protocol):
    mechanism: str
    complete: bool
    username: str | None

    def evaluate(self, token: bytes) -> bytes: ...


# ---------------------------------------------------------------------------------------- PLAIN
class PlainExchange:
    """RFC 4616: one client message ``[authzid] NUL authcid NUL passwd``; the server answers
    with no bytes. An authorization id other than the user's own is refused (as Kafka does)."""

    mechanism = "PLAIN"

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.complete = False
        self.username: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslAuthenticationError("Authentication failed: PLAIN exchange already complete")
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: not UTF-8") from None
        parts = text.split("\0")
        if len(parts) != 3:
            raise SaslAuthenticationError(
                f"Invalid SASL/PLAIN response: expected 3 NUL-separated fields, got {len(parts)}"
            )
        authzid, user, password = parts
        if not user:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self._users.get(user)
        # compare_digest on both branches so a missing user costs what a wrong password does
        ok = hmac.compare_digest(password.encode(), (expected if expected is not None else "\0").encode())
        if expected is None or not ok:
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self.complete = True
        self.username = user
        return b""


# ---------------------------------------------------------------------------------------- SCRAM
def _unescape_saslname(name: str) -> str:
    """RFC 5802 saslname: ``=2C`` is a comma, ``=3D`` an equals sign."""
    return name.replace("=2C", ",").replace("=3D", "=")


# RFC 5802's client-first message as Kafka's ScramMessages.ClientFirstMessage accepts it: gs2
# flag "n" only (no channel binding), an optional authzid, the reserved "m=" attribute, the user
# (ASCII, "," and "=" escaped as =2C/=3D), the nonce, then optional "key=value" extensions.
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,(?P<bare>(?:m={_VALUE},)?n=(?P<saslname>{_SASLNAME}),"
    rf"r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)(?P<extensions>(?:,[A-Za-z]+={_VALUE})*))"
)


class ScramExchange:
    """RFC 5802 server, no channel binding (Kafka's SCRAM has none), as Kafka's ScramSaslServer.
    ``lookup`` returns the user's credential for this mechanism, or None for an unknown user
    (refused at the first message, as Kafka does).

    The client-first message must match Kafka's grammar (``_CLIENT_FIRST``); unknown extensions
    are ignored and ``tokenauth=true`` (delegation tokens, which strom does not have) fails. The
    server-first message carries the stored salt, whatever its length (Kafka stores any salt,
    even an empty one). Kafka accepts a final nonce that merely *ends with* the server-first
    nonce, and some librdkafka releases rely on it (2.0.2, which Debian's kcat links, was seen
    doing it): they send their client nonce followed by the whole combined nonce. The proof is
    computed over the message the client actually sent, so it still proves the password.
    """

    def __init__(self, mechanism: str, lookup: Callable[[str], ScramCredential | None]) -> None:
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self.complete = False
        self.username: str | None = None
        self._digest = SCRAM_MECHANISMS[mechanism][1]
        self._lookup = lookup
        self._cred: ScramCredential | None = None
        self._step = 0
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    def _fail(self, reason: str) -> SaslAuthenticationError:
        """Kafka's fixed text for the client, whatever went wrong (an unknown user and a wrong
        password must look alike); ``reason`` (no secrets in it) goes to the broker's log."""
        self.username = None
        self._step = 2
        return SaslAuthenticationError(
            f"Authentication failed during authentication due to invalid credentials with SASL "
            f"mechanism {self.mechanism}",
            reason,
        )

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail("message is not UTF-8") from None
        if self._step == 0:
            self._step = 1
            return self._client_first(text)
        if self._step == 1:
            self._step = 2
            final = self._client_final(text)
            self.complete = True
            return final
        raise SaslAuthenticationError(f"Authentication failed: {self.mechanism} exchange already complete")

    def _client_first(self, text: str) -> bytes:
        m = _CLIENT_FIRST.fullmatch(text)
        if m is None:
            raise self._fail("invalid SCRAM client-first message format")
        extensions = dict(e.split("=", 1) for e in m["extensions"].split(",")[1:])
        if extensions.get("tokenauth", "").lower() == "true":
            raise self._fail("delegation token authentication is not supported")
        user = _unescape_saslname(m["saslname"])
        cred = self._lookup(user)
        if cred is None:
            raise self._fail("unknown user")
        authzid = m["authzid"]
        if authzid is not None and _unescape_saslname(authzid) != user:
            raise self._fail("Client requested an authorization id that is different from username")
        self.username, self._cred = user, cred
        self._gs2_header = text[: m.start("bare")]
        self._client_first_bare = m["bare"]
        self._nonce = m["nonce"] + secrets.token_urlsafe(18)
        salt = base64.b64encode(cred.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={cred.iterations}"
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        cred = self._cred
        assert cred is not None  # step 1 succeeded only with a credential
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        attrs = without_proof.split(",")
        if not sep or len(attrs) < 2 or not attrs[0].startswith("c=") or not attrs[1].startswith("r="):
            raise self._fail("malformed client-final message")
        try:
            binding = base64.b64decode(attrs[0][2:], validate=True)
            proof = base64.b64decode(proof_b64, validate=True)
        except (binascii.Error, ValueError):
            raise self._fail("malformed client-final message") from None
        if binding != self._gs2_header.encode():
            raise self._fail("channel binding data does not match the gs2 header")
        if not attrs[1][2:].endswith(self._nonce):
            raise self._fail("invalid nonce in the client-final message")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = hmac.new(cred.stored_key, auth_message, self._digest).digest()
        if len(proof) != len(client_signature):
            raise self._fail("invalid client proof")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._digest, client_key).digest(), cred.stored_key):
            raise self._fail("invalid client proof")
        server_signature = hmac.new(cred.server_key, auth_message, self._digest).digest()
        return b"v=" + base64.b64encode(server_signature)


# ---------------------------------------------------------------------------------------- JAAS
def parse_jaas_config(text: str, key: str = "sasl.jaas.config") -> JaasEntry:
    """The broker's reading of a JAAS config (:func:`strom.security.jaas.parse_jaas`): malformed
    text is a ``ConfigError`` naming ``key``."""
    try:
        return parse_jaas(text, key)
    except JaasError as e:
        raise ConfigError(str(e)) from None


def _mechanism_list(key: str, raw: Any) -> tuple[str, ...]:
    out: list[str] = []
    for item in str(raw).split(","):
        m = item.strip().upper()
        if not m:
            continue
        if m not in MECHANISMS:
            raise ConfigError(
                f"{key}: SASL mechanism {item.strip()!r} is not supported by strom "
                f"(supported: {', '.join(MECHANISMS)})"
            )
        if m not in out:
            out.append(m)
    return tuple(out)


@dataclass
class SaslSettings:
    """The SASL configuration of every listener, read from the broker's config values."""

    values: Mapping[str, Any]
    _enabled: dict[str, tuple[str, ...]] = field(default_factory=dict)
    _plain: dict[str, dict[str, str]] = field(default_factory=dict)
    _oauth: dict[str, OAuthSettings] = field(default_factory=dict)

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> SaslSettings:
        s = cls(values)
        s.enabled_mechanisms(None)
        s.plain_users(None)
        for key in values:
            if key.startswith("listener.name.") and (
                key.endswith(".sasl.enabled.mechanisms")
                or key.endswith(".sasl.jaas.config")
                or ".oauthbearer." in key
            ):
                listener = key[len("listener.name.") :].split(".", 1)[0]
                s.enabled_mechanisms(listener)
                s.plain_users(listener)
        for name, mechanisms in list(s._enabled.items()):
            if "OAUTHBEARER" in mechanisms:
                s.oauth(name or None)
        return s

    def oauth(self, listener: str | None) -> OAuthSettings:
        """The OAUTHBEARER validator of ``listener`` (:mod:`strom.security.oauthbearer`)."""
        name = (listener or "").lower()
        if name not in self._oauth:
            key = f"listener.name.{name}.oauthbearer.sasl.jaas.config"
            if listener is None or not self.values.get(key):
                key = "sasl.jaas.config"
            self._oauth[name] = oauth_settings(self.values, listener, str(self.values.get(key) or ""))
        return self._oauth[name]

    def unsecured_oauth_listeners(self) -> list[str]:
        return [name for name, o in self._oauth.items() if o.unsecured]

    def enabled_mechanisms(self, listener: str | None) -> tuple[str, ...]:
        name = (listener or "").lower()
        if name not in self._enabled:
            key = f"listener.name.{name}.sasl.enabled.mechanisms"
            if listener is None or key not in self.values:
                key = "sasl.enabled.mechanisms"
            self._enabled[name] = _mechanism_list(key, self.values.get(key) or "")
        return self._enabled[name]

    def plain_users(self, listener: str | None) -> dict[str, str]:
        name = (listener or "").lower()
        if name not in self._plain:
            key = f"listener.name.{name}.plain.sasl.jaas.config"
            if listener is None or not self.values.get(key):
                key = "sasl.jaas.config"
            text = str(self.values.get(key) or "").strip()
            self._plain[name] = parse_jaas_config(text, key).plain_users() if text else {}
        return self._plain[name]

    def new_exchange(
        self, mechanism: str, listener: str, lookup: Callable[[str, str], ScramCredential | None]
    ) -> SaslExchange:
        if mechanism == "PLAIN":
            return PlainExchange(self.plain_users(listener))
        if mechanism == "OAUTHBEARER":
            return OAuthBearerExchange(self.oauth(listener))
        return ScramExchange(mechanism, lambda user: lookup(user, mechanism))


class SaslState:
    """The broker's SASL state, which it makes at construction and owns: the settings of every
    listener, and the SCRAM credential store of ``log_dir``, opened at first use (the broker
    opens it at start when it has a SASL listener, so a corrupt store fails the start).

    ``from_image`` (the broker runs on the metadata quorum): SCRAM logins and
    DescribeUserScramCredentials read the credentials of the metadata image instead,
    ``scram_image``, which the broker's metadata publisher sets as images are published (the
    local store is then only read once, migrated into the first batch of the metadata log).

    Error contract: ``ConfigError`` from the constructor (bad settings); ``ValueError`` from
    :attr:`credentials` for a corrupt store file."""

    def __init__(self, values: Mapping[str, Any], log_dir: Path, *, from_image: bool = False) -> None:
        self.settings = SaslSettings.from_values(values)
        for name in self.settings.unsecured_oauth_listeners():
            _log.warning(
                "listener %s: SASL/OAUTHBEARER uses Kafka's unsecured validator (unsigned tokens, any "
                "client may claim any identity): set sasl.oauthbearer.jwks.endpoint.url outside development",
                name or "(default)",
            )
        self.log_dir = log_dir
        self._credentials: CredentialStore | None = None
        self.from_image = from_image
        self.scram_image: ScramImage | None = None

    @property
    def credentials(self) -> CredentialStore:
        if self._credentials is None:
            self._credentials = CredentialStore(self.log_dir)
        return self._credentials

    def credential_view(self) -> CredentialStore | ImageCredentials:
        """Where SCRAM credentials are read: the image's on the quorum, else the local store."""
        if self.from_image:
            return ImageCredentials(self.scram_image)
        return self.credentials

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.credential_view().get(user, mechanism)


def validate_sasl_config(values: Mapping[str, Any]) -> None:
    """Raise ConfigError for an unknown mechanism or malformed JAAS text in any SASL key; every
    ``*.sasl.jaas.config`` is checked, also those for SCRAM (strom reads no options from them)."""
    SaslSettings.from_values(values)
    for key, raw in values.items():
        if key.endswith("sasl.jaas.config") and str(raw or "").strip():
            parse_jaas_config(str(raw), key)
