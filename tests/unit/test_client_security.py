"""Client security without a broker: JAAS parsing, settings -> SSLContext, secrets kept out of
reprs and errors, the SASL exchange (PLAIN; SCRAM against scramp's and strom's broker-side
servers, raw UTF-8 passwords without SASLprep, the RFC 7677 vector, bad server messages), inline
PEM re-wrapped."""

from __future__ import annotations

import pickle
import ssl
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from strom.client import KafkaError
from strom.client.security import (
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SecurityConfig,
    SecurityConfigError,
    parse_jaas_config,
    sasl_exchange,
)

PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="s3cr3t";'
)


# ---------------------------------------------------------------------------- JAAS


def test_jaas_kafka_plain_entry() -> None:
    module, opts = parse_jaas_config(PLAIN_JAAS)
    assert module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert opts == {"username": "alice", "password": "s3cr3t"}


def test_jaas_quotes_escapes_bare_words_and_whitespace() -> None:
    module, opts = parse_jaas_config(
        "  org.apache.kafka.common.security.scram.ScramLoginModule   REQUIRED\n"
        '   username=bob  password="a \\"quoted\\" ;=\\\\ word"  tokenauth=false ; '
    )
    assert module.endswith("ScramLoginModule")
    assert opts == {"username": "bob", "password": 'a "quoted" ;=\\ word', "tokenauth": "false"}
    assert parse_jaas_config('M optional password="";')[1] == {"password": ""}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('M required username="a" password="hunter2"', "end with ';'"),
        ('M required username="a" password="hunter2;', "cannot parse"),
        ('M mandatory username="a" password="hunter2";', "control flag"),
        ('M required username "a" password="hunter2";', "key=value"),
        ('M required password="hunter2"; N required password="hunter2";', "exactly one"),
        ("", "expected <LoginModule class>"),
    ],
)
def test_jaas_malformed_without_echoing_secrets(text: str, message: str) -> None:
    with pytest.raises(SecurityConfigError, match=message) as err:
        parse_jaas_config(text)
    assert "hunter2" not in str(err.value)


# ---------------------------------------------------------------------------- settings


def test_settings_from_kafka_names_and_librdkafka_names() -> None:
    s = SecurityConfig.from_config(
        {"Security.Protocol": "sasl_ssl", "sasl.mechanism": "scram-sha-256", "sasl.jaas.config": PLAIN_JAAS}
    )
    assert (s.protocol, s.sasl_mechanism, s.sasl_username, s.sasl_password) == (
        "SASL_SSL",
        "SCRAM-SHA-256",
        "alice",
        "s3cr3t",
    )
    assert s.uses_tls and s.uses_sasl and s.check_hostname
    r = SecurityConfig.from_config(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "u",
            "sasl.password": "p",
        }
    )
    assert (r.sasl_username, r.sasl_password, r.uses_tls) == ("u", "p", False)
    assert SecurityConfig.from_config({}) == SecurityConfig()
    # SASL settings on a non-SASL protocol are ignored, as Kafka ignores them
    assert SecurityConfig.from_config({"sasl.mechanism": "GSSAPI"}).protocol == "PLAINTEXT"


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"security.protocol": "TLS"}, "security.protocol"),
        ({"security.protocol": "SASL_SSL"}, "GSSAPI .*Kafka's default.*not supported by the strom client"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "OAUTHBEARER"),
        (
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": 'x.Krb5LoginModule required password="hunter2";',
            },
            "Krb5LoginModule is not supported",
        ),
        ({"security.protocol": "SSL", "ssl.truststore.type": "JKS"}, "reads PEM"),
        ({"security.protocol": "SSL", "ssl.truststore.password": "hunter2"}, "ssl.key.password"),
        (
            {"security.protocol": "SSL", "ssl.truststore.location": "/a", "ssl.truststore.certificates": "x"},
            "cannot both",
        ),
        ({"security.protocol": "SSL", "ssl.keystore.key": "hunter2"}, "set together"),
        ({"security.protocol": "SSL", "ssl.enabled.protocols": "SSLv3"}, "ssl.enabled.protocols"),
        ({"security.protocol": "SSL", "enable.ssl.certificate.verification": "false"}, "not supported"),
    ],
)
def test_settings_refused(conf: dict[str, str], message: str) -> None:
    with pytest.raises(SecurityConfigError, match=message) as err:
        SecurityConfig.from_config(conf)
    assert "hunter2" not in str(err.value)


def test_secrets_hidden_and_settings_picklable() -> None:
    s = SecurityConfig.from_config(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": PLAIN_JAAS,
            "ssl.keystore.key": "-----BEGIN PRIVATE KEY-----\nKEYBYTES\n",
            "ssl.keystore.certificate.chain": "-----BEGIN CERTIFICATE-----\n",
            "ssl.key.password": "keypass",
        }
    )
    for text in (repr(s), str(s), f"{s}", repr([s])):
        assert "s3cr3t" not in text and "KEYBYTES" not in text and "keypass" not in text
        assert "alice" in text
    back = pickle.loads(pickle.dumps(s))
    assert back == s and hash(back) == hash(s) and back.sasl_password == "s3cr3t"


# ---------------------------------------------------------------------------- TLS contexts


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    d = tmp_path_factory.mktemp("pki")
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.private_key_and_cert_chain_pem.write_to_path(str(d / "server.pem"))
    client = ca.issue_cert("client@example")
    client.private_key_and_cert_chain_pem.write_to_path(str(d / "client.pem"))
    return {"ca": ca, "dir": d, "server": server, "client": client}


def test_context_from_truststore_file_and_pem_text(pki: dict[str, Any]) -> None:
    d: Path = pki["dir"]
    s = SecurityConfig.from_config({"security.protocol": "SSL", "ssl.truststore.location": str(d / "ca.pem")})
    ctx = s.ssl_context()
    assert ctx is not None and ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert s.ssl_context() is ctx  # one per process and settings
    assert len(ctx.get_ca_certs()) == 1
    t = SecurityConfig.from_config(
        {
            "security.protocol": "SSL",
            "ssl.truststore.certificates": pki["ca"].cert_pem.bytes().decode(),
            "ssl.endpoint.identification.algorithm": "",
            "ssl.enabled.protocols": "TLSv1.3",
        }
    )
    tctx = t.ssl_context()
    assert tctx is not None and not tctx.check_hostname and tctx.verify_mode == ssl.CERT_REQUIRED
    assert tctx.minimum_version == ssl.TLSVersion.TLSv1_3
    assert SecurityConfig().ssl_context() is None
    assert (
        SecurityConfig.from_config(
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config": PLAIN_JAAS}
        ).ssl_context()
        is None
    )


def test_context_with_client_certificate_file_and_inline(pki: dict[str, Any]) -> None:
    d: Path = pki["dir"]
    s = SecurityConfig.from_config(
        {
            "security.protocol": "SSL",
            "ssl.truststore.location": str(d / "ca.pem"),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(d / "client.pem"),
        }
    )
    assert s.ssl_context() is not None
    client = pki["client"]
    inline = SecurityConfig.from_config(
        {
            "security.protocol": "SSL",
            "ssl.truststore.location": str(d / "ca.pem"),
            "ssl.keystore.key": client.private_key_pem.bytes().decode(),
            "ssl.keystore.certificate.chain": b"".join(b.bytes() for b in client.cert_chain_pems).decode(),
        }
    )
    assert inline.ssl_context() is not None


def test_context_with_encrypted_key(pki: dict[str, Any], tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    client = pki["client"]
    key = serialization.load_pem_private_key(client.private_key_pem.bytes(), password=None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"keypass"),
    ).decode()
    chain = b"".join(b.bytes() for b in client.cert_chain_pems).decode()
    base = {
        "security.protocol": "SSL",
        "ssl.truststore.location": str(pki["dir"] / "ca.pem"),
        "ssl.keystore.key": encrypted,
        "ssl.keystore.certificate.chain": chain,
    }
    assert SecurityConfig.from_config({**base, "ssl.key.password": "keypass"}).ssl_context() is not None
    with pytest.raises(SecurityConfigError, match=r"ssl\.key\.password") as err:
        SecurityConfig.from_config({**base, "ssl.key.password": "wrong-pass"}).ssl_context()
    assert "wrong-pass" not in str(err.value) and "PRIVATE KEY" not in str(err.value)


def test_context_errors_name_the_file(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.pem")
    with pytest.raises(SecurityConfigError, match=r"nope\.pem"):
        SecurityConfig.from_config(
            {"security.protocol": "SSL", "ssl.truststore.location": missing}
        ).ssl_context()
    (tmp_path / "junk.pem").write_text("not a certificate")
    with pytest.raises(SecurityConfigError, match=r"junk\.pem"):
        SecurityConfig.from_config(
            {"security.protocol": "SSL", "ssl.keystore.location": str(tmp_path / "junk.pem")}
        ).ssl_context()


# ---------------------------------------------------------------------------- SASL exchange


def _resp(**kw: Any) -> SimpleNamespace:
    base: dict[str, Any] = {"error_code": 0, "error_message": None, "auth_bytes": b"", "mechanisms": ()}
    base.update(kw)
    return SimpleNamespace(**base)


def _sasl(mech: str, user: str = "alice", password: str = "s3cr3t") -> SecurityConfig:
    return SecurityConfig.from_config(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mech,
            "sasl.username": user,
            "sasl.password": password,
        }
    )


def drive(config: SecurityConfig, server: Any, version: int = 2) -> list[tuple[int, int]]:
    """Run the exchange against ``server(api_key, data) -> response``; the requests sent."""
    steps = sasl_exchange(config, version)
    sent: list[tuple[int, int]] = []
    resp: Any = None
    while True:
        try:
            api_key, v, data = steps.send(resp)
        except StopIteration:
            return sent
        sent.append((api_key, v))
        resp = server(api_key, data)


def test_plain_exchange() -> None:
    seen: list[bytes] = []

    def server(api_key: int, data: dict[str, Any]) -> SimpleNamespace:
        if api_key == SASL_HANDSHAKE:
            assert data == {"mechanism": "PLAIN"}
            return _resp(mechanisms=("PLAIN",))
        seen.append(data["auth_bytes"])
        return _resp()

    assert drive(_sasl("PLAIN"), server, version=1) == [(SASL_HANDSHAKE, 1), (SASL_AUTHENTICATE, 1)]
    assert seen == [b"\0alice\0s3cr3t"]


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_exchange_against_scramp_server(mech: str) -> None:
    scramp = pytest.importorskip("scramp")
    m = scramp.ScramMechanism(mech)
    creds = {"alice": m.make_auth_info("s3cr3t", iteration_count=4096)}
    srv = m.make_server(lambda user: creds[user])
    state = {"round": 0}

    def server(api_key: int, data: dict[str, Any]) -> SimpleNamespace:
        if api_key == SASL_HANDSHAKE:
            return _resp(mechanisms=("PLAIN", mech))
        state["round"] += 1
        if state["round"] == 1:
            srv.set_client_first(data["auth_bytes"].decode())
            return _resp(auth_bytes=srv.get_server_first().encode())
        srv.set_client_final(data["auth_bytes"].decode())
        return _resp(auth_bytes=srv.get_server_final().encode())

    assert drive(_sasl(mech), server) == [(SASL_HANDSHAKE, 1), (SASL_AUTHENTICATE, 2), (SASL_AUTHENTICATE, 2)]


def test_scram_bad_server_signature_fails() -> None:
    scramp = pytest.importorskip("scramp")
    m = scramp.ScramMechanism("SCRAM-SHA-256")
    # the "server" knows another password: its final signature cannot match
    srv = m.make_server(lambda user: m.make_auth_info("other", iteration_count=4096))
    state = {"round": 0}

    def server(api_key: int, data: dict[str, Any]) -> SimpleNamespace:
        if api_key == SASL_HANDSHAKE:
            return _resp()
        state["round"] += 1
        if state["round"] == 1:
            srv.set_client_first(data["auth_bytes"].decode())
            return _resp(auth_bytes=srv.get_server_first().encode())
        # a broker would refuse the proof; one that answers anyway must not be believed
        return _resp(auth_bytes=b"v=" + b"A" * 44)

    with pytest.raises(KafkaError) as err:
        drive(_sasl("SCRAM-SHA-256"), server)
    assert err.value.code == 58 and err.value.name == "SASL_AUTHENTICATION_FAILED"


def test_broker_refusals() -> None:
    def wrong_password(api_key: int, data: dict[str, Any]) -> SimpleNamespace:
        if api_key == SASL_HANDSHAKE:
            return _resp()
        return _resp(error_code=58, error_message="Authentication failed: Invalid username or password")

    with pytest.raises(KafkaError, match="Invalid username or password") as err:
        drive(_sasl("PLAIN", password="hunter2"), wrong_password)
    assert err.value.code == 58 and not err.value.retriable and "hunter2" not in str(err.value)

    def no_such_mechanism(api_key: int, data: dict[str, Any]) -> SimpleNamespace:
        return _resp(error_code=33, mechanisms=("PLAIN",))

    with pytest.raises(KafkaError, match=r"SCRAM-SHA-512 \(it enables: PLAIN\)") as err:
        drive(_sasl("SCRAM-SHA-512"), no_such_mechanism)
    assert err.value.name == "UNSUPPORTED_SASL_MECHANISM"


# ---------------------------------------------------------------------------- host name checks


def test_hostname_verification_on_both_connection_kinds(pki: dict[str, Any], tmp_path: Path) -> None:
    """A TLS server (no Kafka behind it) whose certificate names another host: refused unless
    ssl.endpoint.identification.algorithm is empty; the chain is checked either way."""
    import asyncio

    pytest.importorskip("pyspark")  # strom.spark imports it
    from strom.client import KafkaConnection, KafkaConnectionError
    from strom.spark.kafka_io import FetchChannel

    elsewhere = pki["ca"].issue_cert("broker.example")
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    elsewhere.configure_cert(server_ctx)
    ca = str(pki["dir"] / "ca.pem")
    strict = SecurityConfig.from_config({"security.protocol": "SSL", "ssl.truststore.location": ca})
    lax = SecurityConfig.from_config(
        {
            "security.protocol": "SSL",
            "ssl.truststore.location": ca,
            "ssl.endpoint.identification.algorithm": "",
        }
    )

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        async with server:
            with pytest.raises(KafkaConnectionError, match=r"TLS handshake with .* failed: .*mismatch"):
                await KafkaConnection.open("127.0.0.1", port, security=strict, connect_timeout=5)
            with pytest.raises(KafkaConnectionError, match=r"TLS handshake with .* failed: .*mismatch"):
                await asyncio.to_thread(FetchChannel, "127.0.0.1", port, None, 5.0, strict)
            ch = await asyncio.to_thread(FetchChannel, "127.0.0.1", port, None, 5.0, lax)
            assert isinstance(ch._sock, ssl.SSLSocket) and not ch.closed
            ch.close()

    asyncio.run(main())


# ---------------------------------------------------------------------------- SCRAM without SASLprep

# SASLprep would map the soft hyphen to nothing, the Roman numeral IX to "IX", and refuse the tab;
# Kafka, librdkafka and strom's broker and admin helper all use the raw UTF-8 bytes
RAW_PASSWORDS = ["I\u00adX", "\u2168pw", "tab\tpw"]


def _scram_broker(mech: str, user: str, cred: Any) -> Any:
    """``server(api_key, data)`` running strom's broker-side ScramExchange with ``cred``."""
    from strom.security.sasl import ScramExchange

    exchange = ScramExchange(mech, lambda name: cred if name == user else None)

    def server(api_key: int, data: dict[str, Any]) -> SimpleNamespace:
        if api_key == SASL_HANDSHAKE:
            return _resp(mechanisms=(mech,))
        return _resp(auth_bytes=exchange.evaluate(data["auth_bytes"]))

    server.exchange = exchange  # type: ignore[attr-defined]
    return server


@pytest.mark.parametrize("password", RAW_PASSWORDS)
@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_raw_utf8_password_against_strom_broker(mech: str, password: str) -> None:
    pytest.importorskip("scramp")  # the broker side's dependency
    from strom.security.credentials import ScramCredential

    cred = ScramCredential.from_password(mech, password, 4096)
    server = _scram_broker(mech, "alice", cred)
    assert drive(_sasl(mech, password=password), server) == [
        (SASL_HANDSHAKE, 1),
        (SASL_AUTHENTICATE, 2),
        (SASL_AUTHENTICATE, 2),
    ]
    assert server.exchange.complete and server.exchange.username == "alice"


@pytest.mark.parametrize("password", RAW_PASSWORDS)
def test_scram_raw_password_with_admin_helper_derivation(password: str) -> None:
    """The credential as admin.alter_user_scram_credentials derives it (PBKDF2 over the raw
    UTF-8 password), for a user name that needs saslname escaping."""
    import hashlib
    import os

    pytest.importorskip("scramp")
    from strom.security.credentials import ScramCredential

    mech, user = "SCRAM-SHA-512", "svc=a,b"
    salt = os.urandom(32)
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, 8192)
    cred = ScramCredential.from_salted_password(mech, salt, salted, 8192)
    server = _scram_broker(mech, user, cred)
    drive(_sasl(mech, user=user, password=password), server)
    assert server.exchange.complete and server.exchange.username == user


def test_scram_wrong_password_refused_by_strom_broker() -> None:
    pytest.importorskip("scramp")
    from strom.security.credentials import ScramCredential
    from strom.security.sasl import SaslAuthenticationError

    server = _scram_broker(
        "SCRAM-SHA-256", "alice", ScramCredential.from_password("SCRAM-SHA-256", "IX", 4096)
    )
    # the SASLprep form of the password is a different password to Kafka and to strom's broker
    with pytest.raises(SaslAuthenticationError):
        drive(_sasl("SCRAM-SHA-256", password="I\u00adX"), server)


# RFC 7677 section 3: SCRAM-SHA-256, user "user", password "pencil"
RFC7677_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC7677_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC7677_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC7677_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _rfc7677_client() -> Any:
    from strom.client.scram import ScramClient

    return ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC7677_CLIENT_NONCE)


def test_scram_rfc7677_vector() -> None:
    c = _rfc7677_client()
    assert c.client_first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert c.client_final(RFC7677_SERVER_FIRST) == RFC7677_CLIENT_FINAL
    c.verify_server_final(RFC7677_SERVER_FINAL)  # no exception: the server is authenticated


def test_scram_user_name_escaped() -> None:
    from strom.client.scram import ScramClient

    first = ScramClient("SCRAM-SHA-256", "a=b,c", "pw", nonce="abc").client_first()
    assert first == b"n,,n=a=3Db=2Cc,r=abc"
    assert (
        ScramClient("SCRAM-SHA-512", "u", "p").client_first()
        != ScramClient("SCRAM-SHA-512", "u", "p").client_first()
    )  # a fresh random nonce each time


@pytest.mark.parametrize(
    ("server_first", "server_final", "message"),
    [
        (RFC7677_SERVER_FIRST, b"v=" + b"A" * 44, "invalid server signature"),
        (RFC7677_SERVER_FIRST, b"e=invalid-proof", r"refused the login \(invalid-proof\)"),
        (RFC7677_SERVER_FIRST, b"x=1", "malformed server-final"),
        (RFC7677_SERVER_FIRST, b"v=!!", "malformed server signature"),
        (b"r=someoneElsesNonce123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", None, "does not extend"),
        (b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", None, "does not extend"),
        (RFC7677_SERVER_FIRST.replace(b"i=4096", b"i=4095"), None, "less than the minimum 4096"),
        (RFC7677_SERVER_FIRST.replace(b"i=4096", b"i=1000001"), None, "more than the maximum"),
        (RFC7677_SERVER_FIRST.replace(b"i=4096", b"i=x"), None, "malformed iteration count"),
        (RFC7677_SERVER_FIRST.replace(b"s=W22", b"s=*22"), None, "malformed salt"),
        (b"e=unknown-user", None, r"refused the login \(unknown-user\)"),
        (b"m=ext,r=x,s=y,i=4096", None, "extension"),
        (b"r=rOprNGfwEbeRWgbNEkqOabc", None, "malformed server-first"),
        (b"\xff\xfe", None, "not UTF-8"),
    ],
)
def test_scram_bad_server_messages_fail_with_58(
    server_first: bytes, server_final: bytes | None, message: str
) -> None:
    c = _rfc7677_client()
    c.client_first()
    with pytest.raises(KafkaError, match=message) as err:
        c.client_final(server_first)
        assert server_final is not None
        c.verify_server_final(server_final)
    assert err.value.code == 58 and err.value.name == "SASL_AUTHENTICATION_FAILED"
    assert "pencil" not in str(err.value)


def test_scram_failures_through_the_exchange_are_kafka_errors() -> None:
    """A server nonce that does not extend the client's, driven through sasl_exchange: a
    KafkaError 58 (what KafkaConnection.connect and FetchChannel let through), not another type."""

    def server(api_key: int, data: dict[str, Any]) -> SimpleNamespace:
        if api_key == SASL_HANDSHAKE:
            return _resp()
        return _resp(auth_bytes=b"r=forged,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")

    with pytest.raises(KafkaError, match="does not extend") as err:
        drive(_sasl("SCRAM-SHA-256", password="tab\tpw"), server)
    assert err.value.code == 58


# ---------------------------------------------------------------------------- PEM from properties files


def test_inline_pem_from_joined_continuation_lines(pki: dict[str, Any]) -> None:
    """PEM written over continuation lines of a properties file (--command-config) arrives on one
    line: the client re-wraps it, as the broker does."""
    from strom.config import parse_properties

    def continued(key: str, pem: bytes) -> str:
        return f"{key}=" + " \\\n    ".join(pem.decode().strip().splitlines()) + "\n"

    client = pki["client"]
    text = (
        "security.protocol=SSL\n"
        + continued("ssl.truststore.certificates", pki["ca"].cert_pem.bytes())
        + continued("ssl.keystore.key", client.private_key_pem.bytes())
        + continued("ssl.keystore.certificate.chain", b"".join(b.bytes() for b in client.cert_chain_pems))
    )
    props = parse_properties(text)
    assert "\n" not in props["ssl.truststore.certificates"]
    assert "\n" not in props["ssl.keystore.key"]
    s = SecurityConfig.from_config(props)
    ctx = s.ssl_context()
    assert ctx is not None and len(ctx.get_ca_certs()) == 1
