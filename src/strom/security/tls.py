"""TLS for listeners whose security protocol is SSL or SASL_SSL: Kafka's ``ssl.*`` configs turned
into a server :class:`ssl.SSLContext`, and the principal of a client certificate.

Theory of operation:

- The effective settings of a listener are the broker's ``ssl.*`` values, each overridden by
  ``listener.name.<lowercase listener name>.ssl.*`` when that is set (Kafka's per-listener
  prefix). :func:`validate_tls_configs` checks them without touching files (it runs with the
  rest of the config validation); :func:`build_server_contexts` then reads the key material.
- Key material is PEM (``ssl.keystore.type=PEM``): a file holding the private key and the
  certificate chain (``ssl.keystore.location``), or both as PEM text in the config
  (``ssl.keystore.key`` + ``ssl.keystore.certificate.chain``). PKCS12 keystores are read when the
  ``cryptography`` package is installed. JKS is Java-only: a clear ConfigError says so.
- ``ssl.client.auth``: none (no client certificate asked), requested (asked, checked against the
  truststore when given), required (handshake fails without a trusted one).
- The principal of a TLS connection is ``User:`` + the client certificate's subject in RFC 2253
  form (``User:CN=alice,O=strom``, most specific attribute first, as Java prints it), or
  ``User:ANONYMOUS`` when no certificate was presented.

Error contract: every problem with the settings or the key material raises
:class:`~strom.config.ConfigError` naming the listener and the config key; nothing here opens
sockets.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config_schema import BROKER_CONFIGS, ConfigError
from .pem import key_material_path, rewrap_pem
from .principal_mapping import SslPrincipalMapper
from .session import ANONYMOUS

if TYPE_CHECKING:
    from ..config import BrokerConfig

__all__ = [
    "TlsSettings",
    "build_server_context",
    "build_server_contexts",
    "format_dn",
    "principal_from_peercert",
    "rewrap_pem",
    "tls_settings",
    "validate_tls_configs",
]

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_TLS_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_SSL_KEYS = (
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.key.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.certificates",
    "ssl.client.auth",
    "ssl.enabled.protocols",
    "ssl.cipher.suites",
)


@dataclass(frozen=True)
class TlsSettings:
    """The effective TLS settings of one listener (strings as configured, "" for unset)."""

    listener: str
    keystore_type: str
    keystore_location: str
    keystore_password: str
    keystore_certificate_chain: str
    keystore_key: str
    key_password: str
    truststore_type: str
    truststore_location: str
    truststore_certificates: str
    client_auth: str
    enabled_protocols: tuple[str, ...]
    cipher_suites: tuple[str, ...]


def listener_ssl_values(values: Mapping[str, Any], listener: str) -> dict[str, str]:
    """The ``ssl.*`` values for ``listener``: per-listener overrides win over the plain keys; a
    key set to nothing (or absent) has its default."""
    prefix = f"listener.name.{listener.lower()}."
    out: dict[str, str] = {}
    for key in _SSL_KEYS:
        raw = values.get(prefix + key)
        if raw is None:
            raw = values.get(key)
        out[key] = ("" if raw is None else str(raw).strip()) or BROKER_CONFIGS[key].default
    return out


def _split(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


def tls_settings(values: Mapping[str, Any], listener: str) -> TlsSettings:
    """Check and collect the TLS settings of ``listener`` (no file is read)."""
    v = listener_ssl_values(values, listener)
    where = f"listener {listener}"
    ks_type = v["ssl.keystore.type"].upper()
    ts_type = v["ssl.truststore.type"].upper()
    location, chain, key = (
        v["ssl.keystore.location"],
        v["ssl.keystore.certificate.chain"],
        v["ssl.keystore.key"],
    )
    if not location and not chain and not key:
        raise ConfigError(
            f"{where} uses TLS but has no keystore: set ssl.keystore.type=PEM and ssl.keystore.location "
            f"(a PEM file with the private key and certificate chain), or ssl.keystore.key and "
            f"ssl.keystore.certificate.chain (PEM text); per listener as "
            f"listener.name.{listener.lower()}.ssl.*"
        )
    if location and (chain or key):
        raise ConfigError(
            f"{where}: set either ssl.keystore.location or ssl.keystore.key/ssl.keystore.certificate.chain, "
            f"not both"
        )
    if (chain or key) and not (chain and key):
        raise ConfigError(f"{where}: ssl.keystore.key and ssl.keystore.certificate.chain go together")
    if ks_type == "JKS":
        raise ConfigError(
            f"{where}: ssl.keystore.type is JKS (Kafka's default), a Java-only format; strom reads "
            f"ssl.keystore.type=PEM (or PKCS12): convert the keystore to PEM and set ssl.keystore.type=PEM"
        )
    if ks_type not in ("PEM", "PKCS12"):
        raise ConfigError(f"{where}: unknown ssl.keystore.type {ks_type!r} (supported: PEM, PKCS12)")
    if ks_type != "PEM" and (chain or key):
        raise ConfigError(
            f"{where}: ssl.keystore.key and ssl.keystore.certificate.chain need ssl.keystore.type=PEM"
        )
    has_trust = bool(v["ssl.truststore.location"] or v["ssl.truststore.certificates"])
    if v["ssl.truststore.location"] and v["ssl.truststore.certificates"]:
        raise ConfigError(
            f"{where}: set either ssl.truststore.location or ssl.truststore.certificates, not both"
        )
    if has_trust and ts_type != "PEM":
        raise ConfigError(
            f"{where}: ssl.truststore.type is {ts_type}; strom reads PEM truststores only: "
            f"set ssl.truststore.type=PEM with a PEM file of CA certificates"
        )
    client_auth = v["ssl.client.auth"].lower()
    if client_auth not in CLIENT_AUTH:
        raise ConfigError(
            f"{where}: ssl.client.auth must be none, requested or required, not {client_auth!r}"
        )
    protocols = _split(v["ssl.enabled.protocols"])
    for p in protocols:
        if p not in _TLS_VERSIONS:
            raise ConfigError(
                f"{where}: unknown protocol {p!r} in ssl.enabled.protocols "
                f"(one of {', '.join(_TLS_VERSIONS)})"
            )
    if not protocols:
        raise ConfigError(f"{where}: ssl.enabled.protocols is empty")
    return TlsSettings(
        listener=listener,
        keystore_type=ks_type,
        keystore_location=location,
        keystore_password=v["ssl.keystore.password"],
        keystore_certificate_chain=chain,
        keystore_key=key,
        key_password=v["ssl.key.password"],
        truststore_type=ts_type,
        truststore_location=v["ssl.truststore.location"],
        truststore_certificates=v["ssl.truststore.certificates"],
        client_auth=client_auth,
        enabled_protocols=protocols,
        cipher_suites=_split(v["ssl.cipher.suites"]),
    )


def validate_tls_configs(config: BrokerConfig) -> None:
    """Static checks of the TLS settings of every SSL/SASL_SSL listener."""
    for name, protocol, _host, _port in config.listener_protocols():
        if protocol in TLS_PROTOCOLS:
            tls_settings(config.values, name)


# ---------------------------------------------------------------------------- contexts


def openssl_cipher_name(name: str) -> str:
    """A Java/IANA TLS 1.2 suite name (``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256``) in OpenSSL's
    spelling (``ECDHE-RSA-AES128-GCM-SHA256``); other names are returned unchanged."""
    if not name.startswith(("TLS_", "SSL_")) or "_WITH_" not in name:
        return name
    kx, cipher = name[4:].split("_WITH_", 1)
    parts = cipher.split("_")
    if parts[:1] == ["AES"] and len(parts) >= 4:
        bits, mode, mac = parts[1], parts[2], parts[3]
        cipher = f"AES{bits}-{mode}-{mac}" if mode in ("GCM", "CCM") else f"AES{bits}-{mac}"
    elif parts[:2] == ["CHACHA20", "POLY1305"]:
        cipher = "CHACHA20-POLY1305"
    else:
        cipher = "-".join(parts)
    prefix = "" if kx == "RSA" else kx.replace("_", "-") + "-"
    return prefix + cipher


def _set_ciphers(ctx: ssl.SSLContext, settings: TlsSettings) -> None:
    tls12: list[str] = []
    for suite in settings.cipher_suites:
        if suite.startswith(("TLS_AES_", "TLS_CHACHA20_")):
            continue  # TLS 1.3 suites: OpenSSL enables them all; Python cannot narrow them
        name = openssl_cipher_name(suite)
        probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            probe.set_ciphers(name)
        except ssl.SSLError:
            raise ConfigError(
                f"listener {settings.listener}: ssl.cipher.suites names {suite!r}, which this OpenSSL "
                f"({ssl.OPENSSL_VERSION}) does not know"
            ) from None
        tls12.append(name)
    if tls12:
        ctx.set_ciphers(":".join(tls12))


def _read_text(settings: TlsSettings, key: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(
            f"listener {settings.listener}: cannot read {key} {path}: {e.strerror or e}"
        ) from None


def _pkcs12_to_pem(settings: TlsSettings) -> bytes:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ImportError:
        raise ConfigError(
            f"listener {settings.listener}: ssl.keystore.type=PKCS12 needs the 'cryptography' package; "
            f"install it or use ssl.keystore.type=PEM"
        ) from None
    data = _read_text(settings, "ssl.keystore.location", settings.keystore_location)
    password = (settings.keystore_password or settings.key_password).encode() or None
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(data, password)
    except ValueError as e:
        raise ConfigError(
            f"listener {settings.listener}: ssl.keystore.location {settings.keystore_location} is not a "
            f"readable PKCS12 keystore (or ssl.keystore.password is wrong): {e}"
        ) from None
    if key is None or cert is None:
        raise ConfigError(
            f"listener {settings.listener}: PKCS12 keystore {settings.keystore_location} holds no "
            f"private key and certificate"
        )
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    for c in [cert, *extra]:
        pem += c.public_bytes(serialization.Encoding.PEM)
    return pem


def _load_keystore(ctx: ssl.SSLContext, settings: TlsSettings) -> None:
    where = f"listener {settings.listener}"
    password = settings.key_password
    if settings.keystore_type == "PKCS12":
        pem, password, what = (
            _pkcs12_to_pem(settings),
            "",
            f"ssl.keystore.location {settings.keystore_location}",
        )
    elif settings.keystore_location:
        pem = _read_text(settings, "ssl.keystore.location", settings.keystore_location)
        what = f"ssl.keystore.location {settings.keystore_location}"
    else:
        key = rewrap_pem(settings.keystore_key)
        chain = rewrap_pem(settings.keystore_certificate_chain)
        pem = (key + chain).encode()
        what = "ssl.keystore.key/ssl.keystore.certificate.chain"
    if b"PRIVATE KEY-----" not in pem:
        raise ConfigError(f"{where}: {what} holds no PEM private key")
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        raise ConfigError(f"{where}: {what} holds no PEM certificate")
    # load_cert_chain reads files only: hand it the key material through a memory file
    with key_material_path(pem) as path:
        try:
            # a password (possibly empty) is always given so OpenSSL never prompts on a terminal
            ctx.load_cert_chain(path, password=password)
        except ssl.SSLError as e:
            raise ConfigError(
                f"{where}: {what} is not a usable private key + certificate chain "
                f"(or ssl.key.password is wrong): {e.reason or e}"
            ) from None


def _load_truststore(ctx: ssl.SSLContext, settings: TlsSettings) -> None:
    where = f"listener {settings.listener}"
    try:
        if settings.truststore_location:
            data = _read_text(settings, "ssl.truststore.location", settings.truststore_location)
            ctx.load_verify_locations(cadata=data.decode("ascii", "replace"))
        elif settings.truststore_certificates:
            ctx.load_verify_locations(cadata=rewrap_pem(settings.truststore_certificates))
        elif settings.client_auth != "none":
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    except (ssl.SSLError, ValueError) as e:
        raise ConfigError(f"{where}: the truststore holds no usable PEM certificate: {e}") from None


def build_server_context(settings: TlsSettings) -> ssl.SSLContext:
    """The server context for one listener. Raises ConfigError for unreadable key material."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = sorted(_TLS_VERSIONS[p] for p in settings.enabled_protocols)
    with contextlib.suppress(ValueError):  # OpenSSL builds that forbid old versions keep their floor
        ctx.minimum_version = versions[0]
    ctx.maximum_version = versions[-1]
    _load_keystore(ctx, settings)
    _load_truststore(ctx, settings)
    ctx.verify_mode = CLIENT_AUTH[settings.client_auth]
    _set_ciphers(ctx, settings)
    return ctx


def build_server_contexts(config: BrokerConfig) -> dict[str, ssl.SSLContext]:
    """{listener name: server context} for every SSL/SASL_SSL listener."""
    out: dict[str, ssl.SSLContext] = {}
    for name, protocol, _host, _port in config.listener_protocols():
        if protocol in TLS_PROTOCOLS:
            out[name] = build_server_context(tls_settings(config.values, name))
    return out


# ---------------------------------------------------------------------------- principals

# OpenSSL's long attribute names -> the keywords RFC 2253 (and Java's X500Principal) print
_DN_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def _escape_dn_value(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (ch == "#" and i == 0) or (ch == " " and i in (0, len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def format_dn(subject: Any) -> str:
    """An RFC 2253 string from the ``subject`` of :meth:`ssl.SSLSocket.getpeercert` (a tuple of
    RDNs, each a tuple of (attribute, value) pairs, in certificate order): the last RDN first,
    attributes of one RDN joined by ``+``."""
    rdns = []
    for rdn in reversed(tuple(subject or ())):
        rdns.append("+".join(f"{_DN_KEYWORDS.get(k, k)}={_escape_dn_value(str(v))}" for k, v in rdn))
    return ",".join(rdns)


def principal_from_peercert(peercert: Any, mapper: SslPrincipalMapper | None = None) -> str:
    """``User:<subject DN>`` for a verified client certificate (the name mapped by
    ``ssl.principal.mapping.rules`` when a mapper is given: NoRuleAppliesError when none
    applies), else ``User:ANONYMOUS``."""
    if not isinstance(peercert, dict) or not peercert.get("subject"):
        return ANONYMOUS
    dn = format_dn(peercert["subject"])
    if not dn:
        return ANONYMOUS
    return f"User:{mapper.name(dn) if mapper is not None else dn}"
