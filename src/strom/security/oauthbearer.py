"""Server side of SASL/OAUTHBEARER (KIP-255) with JWT validation (KIP-768), sans-IO apart from
reading the JWKS.

Theory of operation
-------------------
1. The client's one message is RFC 7628's initial response: a GS2 header (``n,,`` or
   ``n,a=<authzid>,``), then ``key=value`` pairs each introduced by ``\\x01``, the last followed by
   ``\\x01\\x01``; ``auth=Bearer <token>`` carries the JWT, other keys are SASL extensions (which
   strom, like Kafka's default callback handler, accepts and ignores).
2. A valid token completes the exchange: the principal is ``User:<sub>`` (the claim named by
   ``sasl.oauthbearer.sub.claim.name``), and the token's ``exp`` is the credential's end: the
   SASL handler caps the session there (KIP-368: lifetime = min(exp - now,
   ``connections.max.reauth.ms``)), so a client re-authenticates with a fresh token.
3. An invalid token is answered as Kafka answers it: the server's challenge is the JSON
   ``{"status":"invalid_token"}``; the client then sends the single byte ``\\x01`` and the exchange
   fails with that JSON as the message (SASL_AUTHENTICATION_FAILED). Why the token was refused
   (expired, wrong audience, bad signature, ...) goes to the broker's log only.

Validators (chosen per listener, Kafka's names):

- **JWKS** (Kafka's ``OAuthBearerValidatorCallbackHandler``): used when
  ``sasl.oauthbearer.jwks.endpoint.url`` is set (``file://`` path, re-read when the file changes;
  or ``http(s)://``, fetched and cached for ``sasl.oauthbearer.jwks.endpoint.refresh.ms``, fetched
  again at once for an unknown ``kid``). The JWS signature must verify with the key of the
  token's ``kid`` (or the only key of the set without one), asymmetric algorithms only (RS*,
  PS*, ES*, EdDSA; ``none`` and HMAC are refused); ``exp`` and ``iat`` are required, ``exp``,
  ``nbf`` checked with ``sasl.oauthbearer.clock.skew.seconds`` of leeway;
  ``sasl.oauthbearer.expected.audience`` (comma list: one must be in ``aud``) and
  ``sasl.oauthbearer.expected.issuer`` checked when set; the subject claim is required.
- **Unsecured** (Kafka's ``OAuthBearerUnsecuredValidatorCallbackHandler``, for development):
  Kafka's default when no JWKS is configured. Unsigned tokens (``alg: none``) are accepted;
  the JAAS options of ``OAuthBearerLoginModule`` ``unsecuredValidatorPrincipalClaimName``
  (sub), ``unsecuredValidatorScopeClaimName`` (scope), ``unsecuredValidatorRequiredScope`` and
  ``unsecuredValidatorAllowableClockSkewMs`` (0) apply; ``exp`` is required. The broker logs a
  warning when a listener uses it: anyone can claim any identity.

Each setting may be given per listener as ``listener.name.<l>.oauthbearer.<key>`` (Kafka's
listener-and-mechanism prefix) or as the broker-wide ``<key>``. The handler class key is
``listener.name.<l>.oauthbearer.sasl.server.callback.handler.class``.

Error contract: ``ConfigError`` from :func:`oauth_settings` (bad settings: an unknown callback
handler, Kafka's validator without a JWKS URL, a malformed URL); :class:`SaslAuthenticationError`
from :meth:`OAuthBearerExchange.evaluate`. A JWKS that cannot be read makes the tokens it would
verify invalid (logged), never a traceback.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import re
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..config_schema import ConfigError
from .jaas import JaasError, parse_jaas
from .sasl_errors import SaslAuthenticationError

__all__ = [
    "INVALID_TOKEN",
    "JwksSource",
    "OAuthBearerExchange",
    "OAuthSettings",
    "TokenError",
    "ValidatedToken",
    "oauth_settings",
    "parse_client_initial_response",
]

log = logging.getLogger("strom.sasl.oauthbearer")

INVALID_TOKEN = '{"status":"invalid_token"}'
_KAFKA_PKG = "org.apache.kafka.common.security.oauthbearer."
_SECURED = {
    _KAFKA_PKG + "OAuthBearerValidatorCallbackHandler",
    _KAFKA_PKG + "secured.OAuthBearerValidatorCallbackHandler",
}
_UNSECURED = {
    _KAFKA_PKG + "OAuthBearerUnsecuredValidatorCallbackHandler",
    _KAFKA_PKG + "internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler",
}
_ASYMMETRIC = {
    "RSA": ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512"),
    "EC": ("ES256", "ES384", "ES512"),
    "OKP": ("EdDSA",),
}
# RFC 7628 / Kafka's OAuthBearerClientInitialResponse
_SEP = "\x01"
_GS2 = re.compile(r"n,(?:a=(?P<authzid>[^,]*))?,")
_KEY = re.compile(r"[A-Za-z]+")
_VALUE = re.compile(r"[\x21-\x7E \t\r\n]+")
_AUTH = re.compile(r"[Bb][Ee][Aa][Rr][Ee][Rr] +(?P<token>[-_.A-Za-z0-9~+/]+=*)")


class TokenError(Exception):
    """A token was refused; the message says why (for the broker's log)."""


@dataclass(frozen=True, slots=True)
class ValidatedToken:
    principal: str  # the subject claim's value
    expiry_ms: int  # exp, epoch ms
    scope: tuple[str, ...]


def parse_client_initial_response(data: bytes) -> tuple[str, str, dict[str, str]]:
    """``(authzid, token, extensions)`` of a client-first message; ValueError if malformed."""
    text = data.decode("utf-8")  # UnicodeDecodeError is a ValueError
    m = _GS2.match(text)
    if m is None:
        raise ValueError("invalid GS2 header (expected 'n,,' or 'n,a=<authzid>,')")
    rest = text[m.end() :]
    if not rest.startswith(_SEP) or not rest.endswith(_SEP + _SEP):
        raise ValueError("key/value pairs are not framed by \\x01 ... \\x01\\x01")
    pairs: dict[str, str] = {}
    for item in rest[1:-2].split(_SEP):
        key, eq, value = item.partition("=")
        if not eq or not _KEY.fullmatch(key) or not _VALUE.fullmatch(value):
            raise ValueError(f"malformed key/value pair {item[:40]!r}")
        if key in pairs:
            raise ValueError(f"duplicate key {key!r}")
        pairs[key] = value
    auth = pairs.pop("auth", None)
    if auth is None:
        raise ValueError("no 'auth' key")
    am = _AUTH.fullmatch(auth)
    if am is None:
        raise ValueError("the 'auth' value is not 'Bearer <token>'")
    return m["authzid"] or "", am["token"], pairs


def _b64url(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _scope(claims: Mapping[str, Any], name: str) -> tuple[str, ...]:
    raw = claims.get(name)
    if raw is None:
        return ()
    if isinstance(raw, str):
        return tuple(s for s in raw.split(" ") if s)
    if isinstance(raw, list) and all(isinstance(s, str) for s in raw):
        return tuple(raw)
    raise TokenError(f"the scope claim {name!r} is neither a string nor a list of strings")


def _number(claims: Mapping[str, Any], name: str, required: bool) -> float | None:
    raw = claims.get(name)
    if raw is None:
        if required:
            raise TokenError(f"the token has no {name!r} claim")
        return None
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise TokenError(f"the {name!r} claim is not a number")
    return float(raw)


def _subject(claims: Mapping[str, Any], name: str) -> str:
    sub = claims.get(name)
    if not isinstance(sub, str) or not sub.strip():
        raise TokenError(f"the token has no subject claim {name!r} (a non-empty string)")
    return sub


# -------------------------------------------------------------------------------- JWKS
class JwksSource:
    """The verification keys of ``url`` (``file://`` or ``http(s)://``), cached: a file is re-read
    when its modification time changes, a URL fetched again after ``refresh_ms`` or at once
    (at most every 10 s) for an unknown key id. Thread-safe (validation runs in a worker thread)."""

    def __init__(
        self, url: str, refresh_ms: int = 3_600_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.url = url
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme == "file":
            self.path: str | None = urllib.parse.unquote(parsed.path)
        elif parsed.scheme in ("http", "https") and parsed.netloc:
            self.path = None
        else:
            raise ConfigError(
                f"sasl.oauthbearer.jwks.endpoint.url: {url!r} is not a file://, http:// or https:// URL"
            )
        self.refresh_s = refresh_ms / 1000.0
        self._clock = clock
        self._lock = threading.Lock()
        self._keys: dict[str | None, tuple[Any, str | None]] = {}
        self._stamp: Any = None  # the file's mtime/size, or the fetch time
        self._last_forced = -1e18

    def _load(self) -> dict[str | None, tuple[Any, str | None]]:
        import jwt  # PyJWT (with cryptography): JWK parsing and JWS verification

        if self.path is not None:
            with open(self.path, "rb") as f:
                raw = f.read()
        else:
            req = urllib.request.Request(self.url, headers={"Accept": "application/json"})
            with urllib.request.urlopen(req, timeout=10) as resp:
                raw = resp.read(4 << 20)
        try:
            doc = json.loads(raw)
            keys: dict[str | None, tuple[Any, str | None]] = {}
            for jwk in doc["keys"]:
                if jwk.get("use", "sig") != "sig" or jwk.get("kty") not in _ASYMMETRIC:
                    continue  # encryption keys and symmetric keys never verify a token
                try:
                    keys[jwk.get("kid")] = (jwt.PyJWK(jwk), jwk.get("alg"))
                except jwt.exceptions.PyJWTError as e:
                    log.warning("JWKS %s: key %s skipped: %s", self.url, jwk.get("kid"), e)
            return keys
        except (ValueError, KeyError, TypeError) as e:
            raise OSError(f"not a JWKS document ({e})") from None

    def key_for(self, kid: str | None) -> tuple[Any, str | None]:
        """The key of ``kid`` and the algorithm its JWK declares (None: any of its type)."""
        with self._lock:
            now = self._clock()
            stamp: Any
            if self.path is not None:
                st = os.stat(self.path)
                stamp = (st.st_mtime_ns, st.st_size)
                if stamp != self._stamp:
                    self._keys, self._stamp = self._load(), stamp
            else:
                stale = self._stamp is None or now - self._stamp >= self.refresh_s
                unknown = kid not in self._keys and now - self._last_forced >= 10.0
                if stale or unknown:
                    if unknown and not stale:
                        self._last_forced = now
                    self._keys, self._stamp = self._load(), now
            if kid is None:
                if len(self._keys) == 1:
                    return next(iter(self._keys.values()))
                raise TokenError("the token has no 'kid' header and the JWKS has more than one key")
            key = self._keys.get(kid)
            if key is None:
                raise TokenError(f"no key with kid {kid!r} in the JWKS")
            return key


# ---------------------------------------------------------------------------- validators
@dataclass
class JwksValidator:
    jwks: JwksSource
    audience: tuple[str, ...]
    issuer: str
    sub_claim: str
    scope_claim: str
    skew_s: int

    def validate(self, token: str, now_s: float) -> ValidatedToken:
        import jwt

        try:
            header = jwt.get_unverified_header(token)
        except jwt.exceptions.PyJWTError as e:
            raise TokenError(f"malformed JWT: {e}") from None
        alg, kid = header.get("alg"), header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise TokenError("the 'kid' header is not a string")
        try:
            key, declared = self.jwks.key_for(kid)
        except OSError as e:
            raise TokenError(f"the JWKS {self.jwks.url} cannot be read: {e}") from None
        if alg not in _ASYMMETRIC.get(key.key_type, ()) or (declared is not None and declared != alg):
            raise TokenError(f"algorithm {alg!r} is not allowed for the {key.key_type} key {kid!r}")
        # times are checked below against the broker's clock (PyJWT would read its own)
        options: dict[str, Any] = {
            "require": ["exp", "iat"],
            "verify_aud": bool(self.audience),
            "verify_iss": bool(self.issuer),
            "verify_sub": False,
            "verify_jti": False,
            "verify_exp": False,
            "verify_nbf": False,
            "verify_iat": False,
        }
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                audience=list(self.audience) or None,
                issuer=self.issuer or None,
                options=options,  # type: ignore[arg-type]
            )
        except jwt.exceptions.PyJWTError as e:
            raise TokenError(f"{type(e).__name__}: {e}") from None
        _check_times(claims, now_s, float(self.skew_s), iat_in_future=False)
        return _result(claims, self.sub_claim, self.scope_claim)


def _check_times(claims: Mapping[str, Any], now_s: float, skew: float, iat_in_future: bool) -> None:
    """exp (required) and nbf with ``skew`` seconds of leeway; iat must be a number, and with
    ``iat_in_future`` (Kafka's unsecured validator) not after now + skew. Kafka's JWKS
    validator (jose4j) requires iat without checking its value."""
    exp = _number(claims, "exp", True)
    assert exp is not None
    if now_s - skew >= exp:
        raise TokenError(f"the token expired at {exp:.0f} (now {now_s:.0f}, clock skew {skew:g} s)")
    nbf = _number(claims, "nbf", False)
    if nbf is not None and nbf > now_s + skew:
        raise TokenError(f"the token is not yet valid: nbf {nbf:.0f} (now {now_s:.0f})")
    iat = _number(claims, "iat", not iat_in_future)
    if iat_in_future and iat is not None and iat > now_s + skew:
        raise TokenError(f"the token was issued in the future: iat {iat:.0f} (now {now_s:.0f})")


def _result(claims: Mapping[str, Any], sub_claim: str, scope_claim: str) -> ValidatedToken:
    exp = _number(claims, "exp", True)
    assert exp is not None
    return ValidatedToken(_subject(claims, sub_claim), int(exp * 1000), _scope(claims, scope_claim))


@dataclass
class UnsecuredValidator:
    sub_claim: str = "sub"
    scope_claim: str = "scope"
    required_scope: tuple[str, ...] = ()
    skew_ms: int = 0

    def validate(self, token: str, now_s: float) -> ValidatedToken:
        parts = token.split(".")
        if len(parts) != 3 or parts[2]:
            raise TokenError("an unsecured JWS has three parts and an empty signature")
        try:
            header, claims = json.loads(_b64url(parts[0])), json.loads(_b64url(parts[1]))
        except (ValueError, binascii.Error) as e:
            raise TokenError(f"malformed JWT: {e}") from None
        if not isinstance(header, dict) or not isinstance(claims, dict):
            raise TokenError("malformed JWT: header and claims must be JSON objects")
        if header.get("alg") != "none":
            raise TokenError("an unsecured JWS must have alg 'none'")
        _check_times(claims, now_s, self.skew_ms / 1000.0, iat_in_future=True)
        result = _result(claims, self.sub_claim, self.scope_claim)
        missing = [s for s in self.required_scope if s not in result.scope]
        if missing:
            raise TokenError(f"the token lacks the required scope {missing}")
        return result


Validator = JwksValidator | UnsecuredValidator


@dataclass
class OAuthSettings:
    validator: Validator
    unsecured: bool


def oauth_settings(values: Mapping[str, Any], listener: str | None, jaas_text: str) -> OAuthSettings:
    """The OAUTHBEARER validator of ``listener`` from the broker's config (see the module doc)."""
    name = (listener or "").lower()

    def get(key: str, default: Any = "") -> Any:
        if name:
            v = values.get(f"listener.name.{name}.oauthbearer.{key}")
            if v not in (None, ""):
                return v
        v = values.get(key)
        return default if v in (None, "", []) else v

    handler = str(get("sasl.server.callback.handler.class")).strip()
    url = str(get("sasl.oauthbearer.jwks.endpoint.url")).strip()
    if handler and handler not in _SECURED | _UNSECURED:
        raise ConfigError(
            f"listener.name.{name}.oauthbearer.sasl.server.callback.handler.class: {handler!r} is not "
            f"available in strom (use {sorted(_SECURED)[0]} or {sorted(_UNSECURED)[0]})"
        )
    if handler in _SECURED and not url:
        raise ConfigError(f"{handler} needs sasl.oauthbearer.jwks.endpoint.url")
    if url and handler not in _UNSECURED:
        try:
            import jwt  # noqa: F401
        except ImportError:  # a dependency of strom's: only a broken install lacks it
            raise ConfigError(
                "sasl.oauthbearer.jwks.endpoint.url needs the PyJWT package (pip install 'PyJWT[crypto]')"
            ) from None
        try:
            skew = int(get("sasl.oauthbearer.clock.skew.seconds", 30))
            refresh = int(get("sasl.oauthbearer.jwks.endpoint.refresh.ms", 3_600_000))
        except ValueError as e:
            raise ConfigError(f"sasl.oauthbearer: {e}") from None
        raw_aud = get("sasl.oauthbearer.expected.audience")
        if isinstance(raw_aud, (list, tuple)):
            raw_aud = ",".join(str(a) for a in raw_aud)
        audience = tuple(a.strip() for a in str(raw_aud).split(",") if a.strip())
        return OAuthSettings(
            JwksValidator(
                JwksSource(url, refresh),
                audience,
                str(get("sasl.oauthbearer.expected.issuer")).strip(),
                str(get("sasl.oauthbearer.sub.claim.name", "sub")),
                str(get("sasl.oauthbearer.scope.claim.name", "scope")),
                skew,
            ),
            unsecured=False,
        )
    options: dict[str, str] = {}
    if jaas_text.strip():
        try:
            options = parse_jaas(jaas_text, "sasl.jaas.config").options
        except JaasError as e:
            raise ConfigError(str(e)) from None
    try:
        skew_ms = int(options.get("unsecuredValidatorAllowableClockSkewMs", "0"))
    except ValueError:
        raise ConfigError("unsecuredValidatorAllowableClockSkewMs must be an integer") from None
    required = tuple(s for s in options.get("unsecuredValidatorRequiredScope", "").split(" ") if s)
    return OAuthSettings(
        UnsecuredValidator(
            options.get("unsecuredValidatorPrincipalClaimName", "sub") or "sub",
            options.get("unsecuredValidatorScopeClaimName", "scope") or "scope",
            required,
            skew_ms,
        ),
        unsecured=True,
    )


# ------------------------------------------------------------------------------- exchange
class OAuthBearerExchange:
    """One OAUTHBEARER exchange (see the module doc). ``expiry_ms`` (epoch ms) is the token's
    end once ``complete``."""

    mechanism = "OAUTHBEARER"

    def __init__(self, settings: OAuthSettings, wall_clock: Callable[[], float] = time.time) -> None:
        self._settings = settings
        self._clock = wall_clock
        self.complete = False
        self.username: str | None = None
        self.expiry_ms: int | None = None
        self._error: str | None = None
        self.reason: str | None = None  # why the token was refused (for the log)

    def evaluate(self, token: bytes) -> bytes:
        if self._error is not None:
            # the client acknowledges our error challenge with a lone \x01: the exchange fails
            # with the challenge as the message (Kafka's OAuthBearerSaslServer)
            raise SaslAuthenticationError(self._error, self.reason)
        if self.complete:
            raise SaslAuthenticationError("Authentication failed: OAUTHBEARER exchange already complete")
        try:
            authzid, jwt_text, _extensions = parse_client_initial_response(token)
        except ValueError as e:
            raise SaslAuthenticationError(
                f"Authentication failed: invalid OAUTHBEARER client first message: {e}"
            ) from None
        try:
            result = self._settings.validator.validate(jwt_text, self._clock())
        except TokenError as e:
            self.reason = str(e)
            self._error = INVALID_TOKEN
            return INVALID_TOKEN.encode()
        if authzid and authzid != result.principal:
            raise SaslAuthenticationError(
                f"Authentication failed: Client requested an authorization id ({authzid}) that is "
                f"different from the token's principal name ({result.principal})"
            )
        self.complete = True
        self.username = result.principal
        self.expiry_ms = result.expiry_ms
        return b""
