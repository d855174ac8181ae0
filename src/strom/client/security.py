"""Client-side security: TLS and SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) with Kafka's client
config names, the TLS context built from them, and the SASL exchange as sans-IO steps.

Settings (:meth:`SecurityConfig.from_config`, names as the Java client and librdkafka take them):

* ``security.protocol``: ``PLAINTEXT`` (default), ``SSL``, ``SASL_PLAINTEXT``, ``SASL_SSL``.
* ``sasl.mechanism``: ``PLAIN``, ``SCRAM-SHA-256``, ``SCRAM-SHA-512``. Kafka's default is GSSAPI,
  which, like OAUTHBEARER, this client does not speak: a SASL protocol without a mechanism it
  knows is refused with a message saying so. Credentials come from ``sasl.jaas.config``
  (``...PlainLoginModule required username="u" password="p";``, or the ScramLoginModule form) or
  from librdkafka's ``sasl.username`` / ``sasl.password``.
* TLS: PEM stores only (``ssl.truststore.type`` / ``ssl.keystore.type`` ``PEM``; JKS and PKCS12
  are refused with a message naming the conversion): ``ssl.truststore.location`` (file) or
  ``ssl.truststore.certificates`` (PEM text); a client certificate for mutual TLS from
  ``ssl.keystore.location`` (one PEM file with the key and the chain) or ``ssl.keystore.key`` +
  ``ssl.keystore.certificate.chain`` (PEM text), ``ssl.key.password`` for an encrypted key (PEM
  text that lost its line breaks, e.g. joined continuation lines of a properties file, is
  re-wrapped before OpenSSL reads it, as the broker does);
  ``ssl.endpoint.identification.algorithm`` ``https`` (default: the broker certificate must name
  the host) or empty (chain checked, host name not). Without a trust store the system's CAs are
  trusted. librdkafka's ``ssl.ca.location`` / ``ssl.certificate.location`` / ``ssl.key.location``
  are taken too.

Rules: :class:`SecurityConfig` is a frozen, hashable, picklable value (Spark ships it to
executors); the :class:`ssl.SSLContext` is never part of it: :meth:`SecurityConfig.ssl_context`
builds one per process on first use and caches it. Secrets (passwords, private keys, the JAAS
text) never appear in ``repr``, logs or error messages.

SASL runs after ApiVersions, as Kafka clients do: SaslHandshake v1 names the mechanism, then
SaslAuthenticate rounds carry the mechanism's messages (PLAIN: one round; SCRAM: client-first /
server-first, client-final / server-final, in :mod:`strom.client.scram`: raw UTF-8 credentials,
no SASLprep, as Kafka). :func:`sasl_exchange` yields the
requests and takes the decoded answers, so the asyncio connection and the blocking fetch channel
drive the same steps.

Error contract: bad settings raise :class:`SecurityConfigError` (a ``ValueError``) naming the
setting; a broker refusing the mechanism raises :class:`KafkaError` UNSUPPORTED_SASL_MECHANISM
(33), refused credentials :class:`KafkaError` SASL_AUTHENTICATION_FAILED (58) with the broker's
message: neither is retriable.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from strom.client.errors import KafkaError
from strom.client.scram import ScramClient
from strom.security.jaas import JaasError, parse_jaas
from strom.security.pem import key_material_path, rewrap_pem

__all__ = [
    "MECHANISMS",
    "PROTOCOLS",
    "SASL_AUTHENTICATE",
    "SASL_HANDSHAKE",
    "SaslMechanism",
    "SecurityConfig",
    "SecurityConfigError",
    "parse_jaas_config",
    "sasl_exchange",
]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
_TLS_VERSIONS = {
    "tlsv1": ssl.TLSVersion.TLSv1,
    "tlsv1.1": ssl.TLSVersion.TLSv1_1,
    "tlsv1.2": ssl.TLSVersion.TLSv1_2,
    "tlsv1.3": ssl.TLSVersion.TLSv1_3,
}
_AUTH_FAILED = int(ErrorCode.sasl_authentication_failed)


class SecurityConfigError(ValueError):
    """A security setting that is invalid, contradictory or not supported by this client."""


# ---------------------------------------------------------------------------- JAAS


def parse_jaas_config(text: str, key: str = "sasl.jaas.config") -> tuple[str, dict[str, str]]:
    """``<LoginModule class> <flag> key=value ... ;`` -> ``(class, {key: value})``
    (:func:`strom.security.jaas.parse_jaas`); malformed text is a :class:`SecurityConfigError`
    naming ``key``, never the text (it holds a password)."""
    try:
        entry = parse_jaas(text, key)
    except JaasError as e:
        raise SecurityConfigError(str(e)) from None
    return entry.login_module, entry.options


# ---------------------------------------------------------------------------- settings


def _secret(value: str | None) -> str:
    return "None" if value is None else "'********'"


@dataclass(frozen=True, repr=False)
class SecurityConfig:
    """How to secure a connection (see the module docstring). The default is PLAINTEXT."""

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_cafile: str | None = None
    ssl_cadata: str | None = None  # PEM text
    ssl_certfile: str | None = None  # PEM: the certificate chain, and the key unless ssl_keyfile
    ssl_keyfile: str | None = None
    ssl_cert_pem: str | None = None  # PEM text of the chain (ssl.keystore.certificate.chain)
    ssl_key_pem: str | None = None  # PEM text of the private key (ssl.keystore.key): secret
    ssl_key_password: str | None = None
    check_hostname: bool = True
    tls_versions: tuple[str, ...] = ()  # ssl.enabled.protocols, lower case; () = library default

    def __repr__(self) -> str:
        parts = [f"protocol={self.protocol!r}"]
        if self.uses_sasl:
            parts += [
                f"sasl_mechanism={self.sasl_mechanism!r}",
                f"sasl_username={self.sasl_username!r}",
                f"sasl_password={_secret(self.sasl_password)}",
            ]
        if self.uses_tls:
            parts += [
                f"ssl_cafile={self.ssl_cafile!r}",
                f"ssl_cadata={'None' if self.ssl_cadata is None else '<PEM>'}",
                f"ssl_certfile={self.ssl_certfile!r}",
                f"ssl_keyfile={self.ssl_keyfile!r}",
                f"ssl_cert_pem={'None' if self.ssl_cert_pem is None else '<PEM>'}",
                f"ssl_key_pem={_secret(self.ssl_key_pem)}",
                f"ssl_key_password={_secret(self.ssl_key_password)}",
                f"check_hostname={self.check_hostname}",
            ]
            if self.tls_versions:
                parts.append(f"tls_versions={self.tls_versions!r}")
        return f"SecurityConfig({', '.join(parts)})"

    __str__ = __repr__

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    # ------------------------------------------------------------------ parsing

    @classmethod
    def from_config(cls, config: Mapping[str, str], *, prefix: str = "") -> SecurityConfig:
        """The security settings among Kafka client settings ``config`` (names as Kafka's, case
        insensitive; others are ignored). ``prefix`` is put before setting names in errors
        (``kafka.`` for Spark options)."""
        conf = {str(k).strip().lower(): str(v) for k, v in config.items()}

        def name(key: str) -> str:
            return prefix + key

        def get(*keys: str) -> str | None:
            for k in keys:
                v = conf.get(k)
                if v is not None and v.strip() != "":
                    return v.strip()
            return None

        protocol = (get("security.protocol") or "PLAINTEXT").upper()
        if protocol not in PROTOCOLS:
            raise SecurityConfigError(
                f"Invalid value {protocol} for configuration {name('security.protocol')}: "
                f"must be one of {', '.join(PROTOCOLS)}"
            )
        kw: dict[str, Any] = {"protocol": protocol}
        if protocol.startswith("SASL_"):
            kw.update(_sasl_settings(get, name))
        if protocol in ("SSL", "SASL_SSL"):
            kw.update(_ssl_settings(conf, get, name))
        return cls(**kw)

    # ------------------------------------------------------------------ TLS

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for these settings (``None`` without TLS), built once per process."""
        if not self.uses_tls:
            return None
        with _CONTEXTS_LOCK:
            ctx = _CONTEXTS.get(self)
            if ctx is None:
                ctx = _CONTEXTS[self] = self._build_context()
            return ctx

    def _build_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED, check_hostname on
        ctx.check_hostname = self.check_hostname
        if self.tls_versions:
            versions = sorted(_TLS_VERSIONS[v] for v in self.tls_versions)
            ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
        try:
            if self.ssl_cafile is not None or self.ssl_cadata is not None:
                cadata = None if self.ssl_cadata is None else rewrap_pem(self.ssl_cadata)
                ctx.load_verify_locations(cafile=self.ssl_cafile, cadata=cadata)
            else:
                ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        except (OSError, ssl.SSLError, ValueError) as e:
            where = self.ssl_cafile if self.ssl_cafile is not None else "ssl.truststore.certificates"
            raise SecurityConfigError(f"cannot load the trust store {where}: {_ssl_reason(e)}") from None
        password = self.ssl_key_password
        try:
            if self.ssl_certfile is not None:
                ctx.load_cert_chain(self.ssl_certfile, self.ssl_keyfile, password)
            elif self.ssl_cert_pem is not None and self.ssl_key_pem is not None:
                _load_pem_chain(ctx, self.ssl_cert_pem, self.ssl_key_pem, password)
        except (OSError, ssl.SSLError, ValueError) as e:
            where = self.ssl_certfile if self.ssl_certfile is not None else "ssl.keystore.key"
            raise SecurityConfigError(
                f"cannot load the client certificate and key from {where}: {_ssl_reason(e)} "
                "(a PEM private key and certificate chain are expected; an encrypted key needs "
                "ssl.key.password)"
            ) from None
        return ctx


_CONTEXTS: dict[SecurityConfig, ssl.SSLContext] = {}
_CONTEXTS_LOCK = threading.Lock()


def _ssl_reason(e: BaseException) -> str:
    if isinstance(e, ssl.SSLError):
        return str(getattr(e, "verify_message", None) or e.reason or e)
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return type(e).__name__


def _load_pem_chain(ctx: ssl.SSLContext, cert_pem: str, key_pem: str, password: str | None) -> None:
    """Load an in-memory key and chain: :mod:`ssl` reads them from files only, so they go
    through :func:`~strom.security.pem.key_material_path` (a memory file on Linux, never a disk).
    Both are re-wrapped first (:func:`~strom.security.pem.rewrap_pem`): PEM from a properties
    file's continuation lines or a Spark option has lost its line breaks."""
    cert, key = (t if t.endswith("\n") else t + "\n" for t in (rewrap_pem(cert_pem), rewrap_pem(key_pem)))
    with key_material_path(cert.encode()) as cert_path, key_material_path(key.encode()) as key_path:
        ctx.load_cert_chain(cert_path, key_path, password)


def _sasl_settings(get: Any, name: Any) -> dict[str, Any]:
    mechanism = (get("sasl.mechanism", "sasl.mechanisms") or "GSSAPI").upper()
    if mechanism not in MECHANISMS:
        default = " (Kafka's default when none is set)" if mechanism == "GSSAPI" else ""
        raise SecurityConfigError(
            f"SASL mechanism {mechanism}{default} is not supported by the strom client: set "
            f"{name('sasl.mechanism')} to one of {', '.join(MECHANISMS)}"
        )
    username = get("sasl.username")
    password = get("sasl.password")
    jaas = get("sasl.jaas.config")
    if jaas is not None:
        module, options = parse_jaas_config(jaas, name("sasl.jaas.config"))
        short = module.rsplit(".", 1)[-1]
        if short not in ("PlainLoginModule", "ScramLoginModule"):
            raise SecurityConfigError(
                f"{name('sasl.jaas.config')}: login module {module} is not supported by the strom "
                "client (PlainLoginModule or ScramLoginModule with username and password)"
            )
        username = options.get("username", username)
        password = options.get("password", password)
    if username is None or password is None:
        raise SecurityConfigError(
            f"SASL mechanism {mechanism} needs a user name and a password: set "
            f"{name('sasl.jaas.config')} (e.g. org.apache.kafka.common.security."
            f"{'plain.PlainLoginModule' if mechanism == 'PLAIN' else 'scram.ScramLoginModule'} "
            f'required username="..." password="...";) or {name("sasl.username")} and '
            f"{name('sasl.password')}"
        )
    return {"sasl_mechanism": mechanism, "sasl_username": username, "sasl_password": password}


def _ssl_settings(conf: Mapping[str, str], get: Any, name: Any) -> dict[str, Any]:
    for kind in ("truststore", "keystore"):
        t = (get(f"ssl.{kind}.type") or "PEM").upper()
        if t != "PEM":
            raise SecurityConfigError(
                f"{name(f'ssl.{kind}.type')}={t} is not supported by the strom client: it reads PEM "
                f"stores only. Set {name(f'ssl.{kind}.type')}=PEM and give PEM files or text "
                "(convert with `keytool -importkeystore -deststoretype PKCS12` then "
                "`openssl pkcs12 -nodes`)"
            )
        if get(f"ssl.{kind}.password") is not None:
            raise SecurityConfigError(
                f"{name(f'ssl.{kind}.password')} cannot be used with PEM stores (the strom client "
                f"reads PEM only); an encrypted private key's password goes in {name('ssl.key.password')}"
            )
    cafile = get("ssl.truststore.location", "ssl.ca.location")
    cadata = get("ssl.truststore.certificates", "ssl.ca.pem")
    if cafile is not None and cadata is not None:
        raise SecurityConfigError(
            f"{name('ssl.truststore.location')} and {name('ssl.truststore.certificates')} "
            "cannot both be set"
        )
    certfile = get("ssl.keystore.location", "ssl.certificate.location")
    keyfile = get("ssl.key.location")
    key_pem = get("ssl.keystore.key", "ssl.key.pem")
    cert_pem = get("ssl.keystore.certificate.chain", "ssl.certificate.pem")
    if certfile is not None and (key_pem is not None or cert_pem is not None):
        raise SecurityConfigError(
            f"{name('ssl.keystore.location')} and {name('ssl.keystore.key')} / "
            f"{name('ssl.keystore.certificate.chain')} cannot both be set"
        )
    if (key_pem is None) != (cert_pem is None):
        raise SecurityConfigError(
            f"{name('ssl.keystore.key')} and {name('ssl.keystore.certificate.chain')} must be set together"
        )
    if keyfile is not None and certfile is None:
        raise SecurityConfigError(f"ssl.key.location needs {name('ssl.certificate.location')} too")
    algo = conf.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    if algo not in ("https", ""):
        raise SecurityConfigError(
            f"Invalid value {algo} for configuration {name('ssl.endpoint.identification.algorithm')}: "
            "must be 'https' (verify the broker's host name) or empty (do not)"
        )
    check_hostname = algo == "https"
    verify = (get("enable.ssl.certificate.verification") or "true").lower()
    if verify == "false":
        raise SecurityConfigError(
            "enable.ssl.certificate.verification=false is not supported by the strom client: "
            f"give the broker's CA in {name('ssl.truststore.location')}"
        )
    versions: tuple[str, ...] = ()
    enabled = get("ssl.enabled.protocols")
    if enabled is not None:
        versions = tuple(v.strip().lower() for v in enabled.split(",") if v.strip())
        bad = [v for v in versions if v not in _TLS_VERSIONS]
        if bad or not versions:
            raise SecurityConfigError(
                f"Invalid value {enabled} for configuration {name('ssl.enabled.protocols')}: "
                "expected a list of TLSv1.2, TLSv1.3"
            )
    return {
        "ssl_cafile": cafile,
        "ssl_cadata": cadata,
        "ssl_certfile": certfile,
        "ssl_keyfile": keyfile,
        "ssl_cert_pem": cert_pem,
        "ssl_key_pem": key_pem,
        "ssl_key_password": get("ssl.key.password"),
        "check_hostname": check_hostname,
        "tls_versions": versions,
    }


# ---------------------------------------------------------------------------- SASL


class SaslMechanism:
    """The client side of one SASL exchange: :meth:`first` is the initial message;
    :meth:`respond` takes each server message and returns the next client message, or ``None``
    once the exchange is complete (raising :class:`KafkaError` 58 if the server's proof is bad)."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.mechanism = mechanism
        self._username = username
        self._password = password
        self._scram: ScramClient | None = None
        self._round = 0

    def __repr__(self) -> str:
        return f"SaslMechanism({self.mechanism}, user={self._username!r})"

    def first(self) -> bytes:
        if self.mechanism == "PLAIN":
            # RFC 4616: authorization identity (empty), NUL, user, NUL, password
            return b"\0" + self._username.encode() + b"\0" + self._password.encode()
        # strom's own SCRAM client: raw UTF-8 credentials, no SASLprep, as Kafka (see scram.py)
        self._scram = ScramClient(self.mechanism, self._username, self._password)
        return self._scram.client_first()

    def respond(self, server: bytes) -> bytes | None:
        self._round += 1
        if self.mechanism == "PLAIN":
            return None
        assert self._scram is not None, "first() comes before respond()"
        if self._round == 1:
            return self._scram.client_final(server)
        if self._round == 2:
            self._scram.verify_server_final(server)
            return None
        raise KafkaError(_AUTH_FAILED, f"{self.mechanism} exchange failed: unexpected server message")


def sasl_exchange(
    config: SecurityConfig, authenticate_version: int = 1
) -> Generator[tuple[int, int, dict[str, Any]], Any, None]:
    """The SASL requests of one connection, as ``(api key, version, request data)``; send each
    and ``send()`` its decoded response back into the generator. Raises :class:`KafkaError`
    when the broker refuses the mechanism or the credentials."""
    assert config.sasl_mechanism is not None
    assert config.sasl_username is not None and config.sasl_password is not None
    mech = config.sasl_mechanism
    resp = yield SASL_HANDSHAKE, 1, {"mechanism": mech}
    code = int(resp.error_code)
    if code:
        enabled = ", ".join(str(m) for m in (resp.mechanisms or ())) or "none"
        raise KafkaError(code, f"the broker does not enable SASL mechanism {mech} (it enables: {enabled})")
    client = SaslMechanism(mech, config.sasl_username, config.sasl_password)
    out: bytes | None = client.first()
    while out is not None:
        resp = yield SASL_AUTHENTICATE, authenticate_version, {"auth_bytes": out}
        code = int(resp.error_code)
        if code:
            raise KafkaError(code, resp.error_message or f"{mech} authentication failed")
        out = client.respond(bytes(resp.auth_bytes or b""))
