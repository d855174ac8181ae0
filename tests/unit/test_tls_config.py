"""Listener and ssl.* config parsing, TLS contexts from PEM material, certificate principals."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from strom.config import BrokerConfig, ConfigError
from strom.security.tls import (
    build_server_contexts,
    format_dn,
    openssl_cipher_name,
    principal_from_peercert,
    tls_settings,
)

trustme = pytest.importorskip("trustme")

TWO = "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093"


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def server_pem(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Path:
    cert = ca.issue_cert("127.0.0.1", "localhost")
    path: Path = tmp_path_factory.mktemp("tls") / "server.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(path))
    return path


def make(overrides: dict[str, str]) -> BrokerConfig:
    return BrokerConfig.from_sources(overrides=overrides)


def test_default_single_plaintext_listener() -> None:
    c = make({})
    assert c.listener_protocols() == [("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092)]
    assert c.advertised() == ("127.0.0.1", 9092)
    assert build_server_contexts(c) == {}


def test_several_listeners_and_advertised_by_name(server_pem: Path) -> None:
    c = make(
        {
            "listeners": "PLAINTEXT://0.0.0.0:9092,SSL://127.0.0.1:9093,INTERNAL://:9094",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,INTERNAL:PLAINTEXT",
            "advertised.listeners": "SSL://broker.example:19093,PLAINTEXT://pub.example:19092",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(server_pem),
        }
    )
    assert [(n, p) for n, p, _h, _port in c.listener_protocols()] == [
        ("PLAINTEXT", "PLAINTEXT"),
        ("SSL", "SSL"),
        ("INTERNAL", "PLAINTEXT"),
    ]
    assert c.advertised("SSL") == ("broker.example", 19093)
    assert c.advertised("PLAINTEXT") == ("pub.example", 19092)
    assert c.advertised("INTERNAL") == ("127.0.0.1", 9094)  # not advertised: its own address
    assert c.advertised("NOPE") == ("pub.example", 19092)  # unknown: the first listener's
    assert c.advertised() == ("pub.example", 19092)
    ctxs = build_server_contexts(c)
    assert list(ctxs) == ["SSL"]
    assert ctxs["SSL"].verify_mode == ssl.CERT_NONE
    assert ctxs["SSL"].minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctxs["SSL"].maximum_version == ssl.TLSVersion.TLSv1_3


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"listeners": "EXTERNAL://127.0.0.1:9092"}, "listener.security.protocol.map"),
        ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "unknown security protocol"),
        ({"listener.security.protocol.map": "PLAINTEXT"}, "NAME:PROTOCOL"),
        ({"listeners": "PLAINTEXT://127.0.0.1:1,PLAINTEXT://127.0.0.1:2"}, "more than once"),
        ({"listeners": "PLAINTEXT://127.0.0.1"}, "no valid port"),
        ({"advertised.listeners": "SSL://h:1"}, "not in listeners"),
        ({"listeners": TWO}, "has no keystore"),
        ({"listeners": TWO, "ssl.keystore.location": "/x.jks"}, "JKS"),
        ({"listeners": TWO, "ssl.keystore.type": "BKS", "ssl.keystore.location": "/x"}, "BKS"),
        ({"listeners": TWO, "ssl.keystore.type": "PEM", "ssl.keystore.key": "k"}, "go together"),
        (
            {
                "listeners": TWO,
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": "/x",
                "ssl.client.auth": "always",
            },
            "ssl.client.auth",
        ),
        (
            {
                "listeners": TWO,
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": "/x",
                "ssl.enabled.protocols": "TLSv1.2,SSLv3",
            },
            "SSLv3",
        ),
        (
            {
                "listeners": TWO,
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": "/x",
                "ssl.truststore.location": "/ca.jks",
            },
            "ssl.truststore.type",
        ),
    ],
)
def test_config_errors(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        make(overrides)


def test_plain_ssl_configs_do_not_matter_without_a_tls_listener() -> None:
    make({"ssl.keystore.location": "/does/not/matter.jks"})


def test_per_listener_prefix_overrides_plain_keys(server_pem: Path, tmp_path: Path) -> None:
    c = make(
        {
            "listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093,MTLS://127.0.0.1:9094",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(tmp_path / "missing.pem"),
            "listener.name.ssl.ssl.keystore.location": str(server_pem),
            "listener.name.mtls.ssl.keystore.location": str(server_pem),
            "listener.name.mtls.ssl.client.auth": "required",
        }
    )
    assert tls_settings(c.values, "SSL").client_auth == "none"
    assert tls_settings(c.values, "MTLS").client_auth == "required"
    ctxs = build_server_contexts(c)
    assert ctxs["MTLS"].verify_mode == ssl.CERT_REQUIRED


def test_missing_or_bad_keystore_is_a_config_error(tmp_path: Path, server_pem: Path) -> None:
    base = {"listeners": TWO, "ssl.keystore.type": "PEM"}
    with pytest.raises(ConfigError, match=r"cannot read ssl\.keystore\.location"):
        build_server_contexts(make({**base, "ssl.keystore.location": str(tmp_path / "nope.pem")}))
    junk = tmp_path / "junk.pem"
    junk.write_text("not a key\n")
    with pytest.raises(ConfigError, match="no PEM private key"):
        build_server_contexts(make({**base, "ssl.keystore.location": str(junk)}))
    # a certificate with somebody else's key
    other = trustme.CA().issue_cert("127.0.0.1")
    text = server_pem.read_text()
    cert_only = text[text.index("-----BEGIN CERTIFICATE-----") :]
    mixed = tmp_path / "mixed.pem"
    mixed.write_bytes(other.private_key_pem.bytes() + cert_only.encode())
    with pytest.raises(ConfigError, match="not a usable private key"):
        build_server_contexts(make({**base, "ssl.keystore.location": str(mixed)}))


def test_pem_text_in_config_and_encrypted_key(ca: trustme.CA) -> None:
    from cryptography.hazmat.primitives import serialization

    leaf = ca.issue_cert("127.0.0.1")
    chain = b"".join(b.bytes() for b in leaf.cert_chain_pems).decode()
    key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"s3cret"),
    ).decode()
    base = {
        "listeners": TWO,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": chain,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": ca.cert_pem.bytes().decode(),
        "ssl.client.auth": "requested",
    }
    ctx = build_server_contexts(make({**base, "ssl.keystore.key": leaf.private_key_pem.bytes().decode()}))
    assert ctx["SSL"].verify_mode == ssl.CERT_OPTIONAL
    build_server_contexts(make({**base, "ssl.keystore.key": encrypted, "ssl.key.password": "s3cret"}))
    with pytest.raises(ConfigError, match=r"ssl\.key\.password"):
        build_server_contexts(make({**base, "ssl.keystore.key": encrypted, "ssl.key.password": "wrong"}))
    with pytest.raises(ConfigError, match=r"ssl\.key\.password"):
        build_server_contexts(make({**base, "ssl.keystore.key": encrypted}))  # never prompts


def test_pkcs12_keystore(ca: trustme.CA, tmp_path: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    leaf = ca.issue_cert("127.0.0.1")
    key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), None)
    cert = x509.load_pem_x509_certificate(leaf.cert_chain_pems[0].bytes())
    p12 = pkcs12.serialize_key_and_certificates(
        b"server",
        key,
        cert,
        None,
        serialization.BestAvailableEncryption(b"pw"),  # type: ignore[arg-type]
    )
    path = tmp_path / "server.p12"
    path.write_bytes(p12)
    base = {"listeners": TWO, "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(path)}
    build_server_contexts(make({**base, "ssl.keystore.password": "pw"}))
    with pytest.raises(ConfigError, match="PKCS12"):
        build_server_contexts(make({**base, "ssl.keystore.password": "bad"}))


def test_cipher_suites_in_java_names(server_pem: Path) -> None:
    assert openssl_cipher_name("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256") == "ECDHE-RSA-AES128-GCM-SHA256"
    assert openssl_cipher_name("TLS_RSA_WITH_AES_256_GCM_SHA384") == "AES256-GCM-SHA384"
    assert openssl_cipher_name("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256") == "ECDHE-RSA-CHACHA20-POLY1305"
    assert openssl_cipher_name("ECDHE-RSA-AES128-GCM-SHA256") == "ECDHE-RSA-AES128-GCM-SHA256"
    base = {"listeners": TWO, "ssl.keystore.type": "PEM", "ssl.keystore.location": str(server_pem)}
    ctx = build_server_contexts(
        make({**base, "ssl.cipher.suites": "TLS_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"})
    )["SSL"]
    tls12 = {c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert tls12 == {"ECDHE-RSA-AES128-GCM-SHA256"}
    with pytest.raises(ConfigError, match="TLS_FOO_WITH_BAR"):
        build_server_contexts(make({**base, "ssl.cipher.suites": "TLS_FOO_WITH_BAR"}))


def test_enabled_protocols_narrow_versions(server_pem: Path) -> None:
    base = {"listeners": TWO, "ssl.keystore.type": "PEM", "ssl.keystore.location": str(server_pem)}
    ctx = build_server_contexts(make({**base, "ssl.enabled.protocols": "TLSv1.3"}))["SSL"]
    assert ctx.minimum_version == ctx.maximum_version == ssl.TLSVersion.TLSv1_3


def test_principal_from_certificate_subject() -> None:
    subject = (
        (("organizationName", "strom"),),
        (("organizationalUnitName", "eng"),),
        (("commonName", "alice"),),
    )
    assert format_dn(subject) == "CN=alice,OU=eng,O=strom"
    assert principal_from_peercert({"subject": subject}) == "User:CN=alice,OU=eng,O=strom"
    assert principal_from_peercert(None) == "User:ANONYMOUS"
    assert principal_from_peercert({}) == "User:ANONYMOUS"
    multi = ((("commonName", "a, b"), ("userId", "7")), (("countryName", "DE"),))
    assert format_dn(multi) == "C=DE,CN=a\\, b+UID=7"
    assert format_dn(((("commonName", " #x "),),)) == "CN=\\ #x\\ "
    assert format_dn(((("commonName", "#x"),),)) == "CN=\\#x"


def test_inline_private_key_is_sensitive() -> None:
    from strom.metadata.configs import is_sensitive

    assert is_sensitive("ssl.keystore.key")
    assert is_sensitive("listener.name.ssl.ssl.keystore.key")
    assert is_sensitive("ssl.key.password")
    assert not is_sensitive("ssl.keystore.location")


def test_listener_names_are_case_insensitive() -> None:
    c = make(
        {
            "listeners": "plaintext://127.0.0.1:9092,internal://127.0.0.1:9094",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,Internal:plaintext",
            "advertised.listeners": "Internal://in.example:1",
        }
    )
    assert [(n, p) for n, p, _h, _port in c.listener_protocols()] == [
        ("PLAINTEXT", "PLAINTEXT"),
        ("INTERNAL", "PLAINTEXT"),
    ]
    assert c.advertised("INTERNAL") == ("in.example", 1)


def test_inline_pem_from_a_properties_file_with_continuation_lines(ca: trustme.CA, tmp_path: Path) -> None:
    """Java properties join continuation lines without their line breaks: the PEM arrives on one
    line, which Kafka accepts."""
    leaf = ca.issue_cert("127.0.0.1")

    def continued(pem: bytes) -> str:
        return " \\\n    ".join(pem.decode().strip().splitlines())

    chain = b"".join(b.bytes() for b in leaf.cert_chain_pems)
    props = tmp_path / "server.properties"
    props.write_text(
        f"listeners={TWO}\n"
        "ssl.keystore.type=PEM\n"
        f"ssl.keystore.key={continued(leaf.private_key_pem.bytes())}\n"
        f"ssl.keystore.certificate.chain={continued(chain)}\n"
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.certificates={continued(ca.cert_pem.bytes())}\n"
        "ssl.client.auth=required\n"
    )
    c = BrokerConfig.from_sources(props)
    assert "\n" not in c["ssl.keystore.key"]
    ctx = build_server_contexts(c)["SSL"]
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert len(ctx.get_ca_certs()) == 1
