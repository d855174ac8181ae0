"""The strom client over TLS and SASL against a real strom broker: produce, fetch, admin through
:class:`strom.client.Client` (asyncio connection) and bulk fetches through the Spark reader's
blocking :class:`~strom.spark.kafka_io.FetchChannel`, on SSL, SASL_PLAINTEXT (PLAIN,
SCRAM-SHA-256/512) and SASL_SSL listeners; refused certificates and credentials.

One broker for the module with five listeners: PLAINTEXT (setup), SSL, MTLS (SSL with
``ssl.client.auth=required``), SASL_PLAINTEXT, SASL_SSL.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.client import Client, KafkaConnectionError, KafkaError, SecurityConfig
from strom.client.admin import alter_user_scram_credentials, describe_user_scram_credentials
from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

trustme = pytest.importorskip("trustme")
pytest.importorskip("scramp")

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'
)
LISTENERS = {
    "PLAINTEXT": "PLAINTEXT",
    "SSL": "SSL",
    "MTLS": "SSL",
    "SASL_PLAINTEXT": "SASL_PLAINTEXT",
    "SASL_SSL": "SASL_SSL",
}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("client-pki")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        str(d / "server.pem")
    )
    trustme.CA().cert_pem.write_to_path(str(d / "other-ca.pem"))
    client = ca.issue_cert("spark-job@example")
    client.private_key_and_cert_chain_pem.write_to_path(str(d / "client.pem"))
    client.private_key_pem.write_to_path(str(d / "client.key"))
    client.cert_chain_pems[0].write_to_path(str(d / "client.crt"))
    return {
        "ca": d / "ca.pem",
        "server": d / "server.pem",
        "other_ca": d / "other-ca.pem",
        "client": d / "client.pem",
        "client_key": d / "client.key",
        "client_crt": d / "client.crt",
    }


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory, pki: dict[str, Path]) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("secure-broker") / "data",
        listeners=LISTENERS,
        overrides=[
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={pki['server']}",
            f"sasl.jaas.config={JAAS}",
            "listener.name.mtls.ssl.client.auth=required",
            "listener.name.mtls.ssl.truststore.type=PEM",
            f"listener.name.mtls.ssl.truststore.location={pki['ca']}",
            "group.initial.rebalance.delay.ms=0",
        ],
    )
    b.start()
    try:

        async def setup() -> None:
            async with Client(b.bootstrap_for("PLAINTEXT")) as c:
                res = await alter_user_scram_credentials(
                    c,
                    [
                        ("bob", "SCRAM-SHA-256", "bob-secret", 4096),
                        ("bob", "SCRAM-SHA-512", "bob-secret", 4096),
                    ],
                )
                assert res == {"bob": None}
                described = await describe_user_scram_credentials(c, ["bob"])
                assert sorted(described["bob"]) == [("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 4096)]  # type: ignore[arg-type]

        asyncio.run(setup())
        yield b
    finally:
        b.stop()


def ssl_settings(pki: dict[str, Path], **extra: str) -> dict[str, str]:
    return {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki["ca"]), **extra}


def sasl_settings(mechanism: str, user: str, password: str) -> dict[str, str]:
    module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
    return {
        "sasl.mechanism": mechanism,
        "sasl.jaas.config": f"org.apache.kafka.common.security.{module} required "
        f'username="{user}" password="{password}";',
    }


CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "ssl": ("SSL", {}),
    "sasl-plain": ("SASL_PLAINTEXT", sasl_settings("PLAIN", "alice", "alice-secret")),
    "sasl-scram-256": ("SASL_PLAINTEXT", sasl_settings("SCRAM-SHA-256", "bob", "bob-secret")),
    "sasl-ssl-scram-512": ("SASL_SSL", sasl_settings("SCRAM-SHA-512", "bob", "bob-secret")),
}


def security_for(case: str, pki: dict[str, Path]) -> tuple[str, SecurityConfig]:
    listener, conf = CASES[case]
    if listener.endswith("SSL"):
        conf = {**conf, **ssl_settings(pki)}
    return listener, SecurityConfig.from_config({"security.protocol": listener, **conf})


@pytest.mark.parametrize("case", list(CASES))
def test_client_produce_fetch_admin(case: str, secure_broker: BrokerProcess, pki: dict[str, Path]) -> None:
    listener, sec = security_for(case, pki)
    topic = f"sec-{case}"
    payload = [
        (f"k{i}".encode(), (f"{case}-{i}-" * 20).encode(), [], 1_700_000_000_000 + i) for i in range(500)
    ]

    async def go() -> None:
        async with Client(secure_broker.bootstrap_for(listener), security=sec) as c:
            assert (await c.create_topics({topic: (2, 1)}))[topic] is None
            md = await c.metadata([topic])
            # the broker names itself by the listener the request came in on
            assert {(b.host, b.port) for b in md.brokers.values()} == {
                ("127.0.0.1", secure_broker.ports[listener])
            }
            await c.produce(topic, 1, payload)
            got = await c.fetch(topic, 1, 0)
            assert [(r.key, r.value) for r in got.records] == [(k, v) for k, v, _h, _t in payload]

    asyncio.run(go())


@pytest.mark.parametrize("case", ["ssl", "sasl-scram-256", "sasl-ssl-scram-512"])
def test_fetch_channel_bulk_reads(case: str, secure_broker: BrokerProcess, pki: dict[str, Path]) -> None:
    """The Spark reader's blocking channel: several MB over TLS (SSLSocket.recv_into into the
    reused buffers, read-ahead thread included) and after SASL."""
    pytest.importorskip("pyspark")
    from strom.spark.kafka_io import KafkaSession, next_fetch_offset
    from strom.spark.options import client_settings

    listener, sec = security_for(case, pki)
    topic = f"bulk-{case}"
    value = bytes(range(256)) * 40  # 10 KiB
    n = 600

    async def fill() -> None:
        async with Client(secure_broker.bootstrap_for("PLAINTEXT")) as c:
            await c.create_topics({topic: (1, 1)})
            for start in range(0, n, 100):
                await c.produce(
                    topic, 0, [(str(i).encode(), value, [], 1) for i in range(start, start + 100)]
                )

    asyncio.run(fill())
    options = {
        "kafka.bootstrap.servers": secure_broker.bootstrap_for(listener),
        "kafka.max.partition.fetch.bytes": str(2 * 1024 * 1024),
        "kafka.security.protocol": listener,
    }
    _, conf = CASES[case]
    options.update({f"kafka.{k}": v for k, v in conf.items()})
    if listener.endswith("SSL"):
        options.update({f"kafka.{k}": v for k, v in ssl_settings(pki).items()})
    settings = client_settings(options)
    assert settings.security == sec
    sess = KafkaSession(settings)
    try:
        offset, fetches, total = 0, 0, 0
        while offset < n:
            f = sess.fetch_ahead(topic, 0, offset, n)
            assert f.error_code == 0 and f.high_watermark == n
            nxt = next_fetch_offset(f.records)
            assert nxt is not None and nxt > offset
            total += len(f.records)
            offset, fetches = nxt, fetches + 1
        assert fetches >= 3 and total > n * len(value)
        channels = list(sess._channels.values())
        assert channels and all(not ch.closed for ch in channels)
        assert all(isinstance(ch._sock, ssl.SSLSocket) == sec.uses_tls for ch in channels)
    finally:
        sess.close()


def test_wrong_password_fails_once_with_the_brokers_message(secure_broker: BrokerProcess) -> None:
    for mech, user in (("PLAIN", "alice"), ("SCRAM-SHA-256", "bob")):
        sec = SecurityConfig.from_config(
            {"security.protocol": "SASL_PLAINTEXT", **sasl_settings(mech, user, "hunter2")}
        )

        async def go(sec: SecurityConfig = sec) -> None:
            async with Client(secure_broker.bootstrap_for("SASL_PLAINTEXT"), security=sec) as c:
                await c.metadata()

        t0 = time.monotonic()
        with pytest.raises(KafkaError) as err:
            asyncio.run(go())
        assert err.value.code == 58 and err.value.name == "SASL_AUTHENTICATION_FAILED", err.value
        assert "hunter2" not in str(err.value) and err.value.message
        assert time.monotonic() - t0 < 5  # refused, not retried


def test_untrusted_certificate_and_plaintext_on_tls(
    secure_broker: BrokerProcess, pki: dict[str, Path]
) -> None:
    other = SecurityConfig.from_config(
        {"security.protocol": "SSL", "ssl.truststore.location": str(pki["other_ca"])}
    )

    async def go(bootstrap: str, sec: SecurityConfig | None) -> None:
        async with Client(bootstrap, security=sec, connect_timeout_ms=3000, request_timeout_ms=3000) as c:
            await c.metadata()

    with pytest.raises(KafkaConnectionError, match=r"TLS handshake with .* failed: .*certificate"):
        asyncio.run(go(secure_broker.bootstrap_for("SSL"), other))
    # TLS towards the plaintext listener: a clear connection error, not a hang
    tls = SecurityConfig.from_config({"security.protocol": "SSL", **ssl_settings(pki)})
    with pytest.raises(KafkaConnectionError):
        asyncio.run(go(secure_broker.bootstrap_for("PLAINTEXT"), tls))


def test_mutual_tls_with_keystore_file_and_inline_pem(
    secure_broker: BrokerProcess, pki: dict[str, Path]
) -> None:
    bootstrap = secure_broker.bootstrap_for("MTLS")
    keystores = [
        {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki["client"])},
        {
            "ssl.keystore.key": pki["client_key"].read_text(),
            "ssl.keystore.certificate.chain": pki["client_crt"].read_text(),
        },
        {"ssl.certificate.location": str(pki["client_crt"]), "ssl.key.location": str(pki["client_key"])},
    ]

    async def go(sec: SecurityConfig) -> None:
        async with Client(bootstrap, security=sec, connect_timeout_ms=3000, request_timeout_ms=3000) as c:
            md = await c.metadata()
            assert {(b.host, b.port) for b in md.brokers.values()} == {
                ("127.0.0.1", secure_broker.ports["MTLS"])
            }

    for keystore in keystores:
        asyncio.run(
            go(SecurityConfig.from_config({"security.protocol": "SSL", **ssl_settings(pki), **keystore}))
        )
    # without a client certificate the broker refuses the handshake (TLS 1.3 reports it on
    # the first read, so it may surface as a closed connection)
    with pytest.raises(KafkaConnectionError, match=r"refused the client certificate"):
        asyncio.run(go(SecurityConfig.from_config({"security.protocol": "SSL", **ssl_settings(pki)})))
