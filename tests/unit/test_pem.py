"""Key material handed to OpenSSL without touching a disk (strom.security.pem)."""

from __future__ import annotations

import os
import ssl
import sys
import tempfile
from typing import Any

import pytest

from strom.security.pem import key_material_path

trustme = pytest.importorskip("trustme")


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="memfd is Linux-only")
def test_key_material_lives_in_memory_only(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_disk(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("key material written to a temporary file")

    monkeypatch.setattr(tempfile, "mkstemp", no_disk)
    with key_material_path(b"secret bytes") as path:
        assert path.startswith("/proc/self/fd/")
        with open(path, "rb") as f:
            assert f.read() == b"secret bytes"
    assert not os.path.exists(path) or os.readlink(path) != path  # the descriptor is closed


def test_tls_contexts_load_inline_keys_from_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker's keystore (ssl.keystore.key + chain) and the client's inline key load through
    key_material_path; on Linux nothing is written to a temporary file on the way."""
    from strom.client.security import SecurityConfig

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    key = cert.private_key_pem.bytes().decode()
    chain = "".join(b.bytes().decode() for b in cert.cert_chain_pems)
    if sys.platform.startswith("linux"):

        def no_disk(*_a: Any, **_k: Any) -> Any:
            raise AssertionError("key material written to a temporary file")

        monkeypatch.setattr(tempfile, "mkstemp", no_disk)
        monkeypatch.setattr(tempfile, "TemporaryDirectory", no_disk)
    from strom.config import BrokerConfig
    from strom.security.tls import build_server_contexts

    broker = BrokerConfig.from_sources(
        overrides={
            "listeners": "SSL://127.0.0.1:19093",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.key": key,
            "ssl.keystore.certificate.chain": chain,
        },
    )
    assert isinstance(build_server_contexts(broker)["SSL"], ssl.SSLContext)
    conf = SecurityConfig.from_config(
        {
            "security.protocol": "SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": ca.cert_pem.bytes().decode(),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.key": key,
            "ssl.keystore.certificate.chain": chain,
        }
    )
    assert isinstance(conf.ssl_context(), ssl.SSLContext)
