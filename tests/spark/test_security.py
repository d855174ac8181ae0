"""The strom Spark source and sink with Spark's Kafka security options against a real strom
broker: ``kafka.security.protocol`` SSL (PEM trust store, host name verified) and SASL_PLAINTEXT
with ``kafka.sasl.mechanism`` PLAIN / SCRAM-SHA-256 / SCRAM-SHA-512 and ``kafka.sasl.jaas.config``,
the exactly-once writer included."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.client import Client
from strom.client.admin import alter_user_scram_credentials
from strom.testing.broker_process import BrokerProcess

from .conftest import create_topic, produce, values

pytestmark = [pytest.mark.spark, pytest.mark.integration]

trustme = pytest.importorskip("trustme")
pytest.importorskip("scramp")

JAAS_SERVER = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_alice="alice-secret";'
)


def jaas(mechanism: str, user: str, password: str) -> str:
    module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
    return f'org.apache.kafka.common.security.{module} required username="{user}" password="{password}";'


@pytest.fixture(scope="module")
def ca_pem(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("spark-pki")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        str(d / "server.pem")
    )
    yield d / "ca.pem", d / "server.pem"


@pytest.fixture(scope="module")
def sbroker(tmp_path_factory: pytest.TempPathFactory, ca_pem: tuple[Path, Path]) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("spark-secure-broker") / "data",
        listeners={"PLAINTEXT": "PLAINTEXT", "SSL": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT"},
        overrides=[
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={ca_pem[1]}",
            f"sasl.jaas.config={JAAS_SERVER}",
        ],
    )
    b.start()
    try:

        async def users() -> None:
            async with Client(b.bootstrap_for("PLAINTEXT")) as c:
                res = await alter_user_scram_credentials(
                    c,
                    [
                        ("bob", "SCRAM-SHA-256", "bob-secret", 4096),
                        ("bob", "SCRAM-SHA-512", "bob-secret", 8192),
                    ],
                )
                assert res == {"bob": None}

        asyncio.run(users())
        yield b
    finally:
        b.stop()


def test_batch_write_and_read_over_ssl(spark: Any, sbroker: BrokerProcess, ca_pem: tuple[Path, Path]) -> None:
    tls = {
        "kafka.bootstrap.servers": sbroker.bootstrap_for("SSL"),
        "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(ca_pem[0]),
    }
    create_topic(sbroker.bootstrap_for("PLAINTEXT"), "tls-topic", 2)
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(300)], "key string, value string")
    df.write.mode("append").format("strom").options(**tls).option("topic", "tls-topic").save()
    back = spark.read.format("strom").options(**tls).option("subscribe", "tls-topic").load()
    rows = back.selectExpr("CAST(key AS STRING) k", "CAST(value AS STRING) v").collect()
    assert sorted((r.k, r.v) for r in rows) == sorted((f"k{i}", f"v{i}") for i in range(300))


def test_stream_over_sasl_plain_to_scram_exactly_once(
    spark: Any, sbroker: BrokerProcess, tmp_path: Path
) -> None:
    plain = sbroker.bootstrap_for("PLAINTEXT")
    create_topic(plain, "sasl-src", 2)
    create_topic(plain, "sasl-dst", 2)
    for p in range(2):
        produce(plain, "sasl-src", p, values(f"s{p}", 60))
    sasl = {
        "kafka.bootstrap.servers": sbroker.bootstrap_for("SASL_PLAINTEXT"),
        "kafka.security.protocol": "SASL_PLAINTEXT",
    }
    src = (
        spark.readStream.format("strom")
        .options(**sasl)
        .option("kafka.sasl.mechanism", "PLAIN")
        .option("kafka.sasl.jaas.config", jaas("PLAIN", "alice", "alice-secret"))
        .option("subscribe", "sasl-src")
        .option("startingOffsets", "earliest")
        .load()
        .select("key", "value")
    )
    q = (
        src.writeStream.format("strom")
        .options(**sasl)
        .option("kafka.sasl.mechanism", "SCRAM-SHA-512")
        .option("kafka.sasl.jaas.config", jaas("SCRAM-SHA-512", "bob", "bob-secret"))
        .option("topic", "sasl-dst")
        .option("exactlyOnce", "true")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(180)
    assert q.exception() is None
    out = (
        spark.read.format("strom")
        .options(**sasl)
        .option("kafka.sasl.mechanism", "SCRAM-SHA-256")
        .option("kafka.sasl.jaas.config", jaas("SCRAM-SHA-256", "bob", "bob-secret"))
        .option("kafka.isolation.level", "read_committed")
        .option("subscribe", "sasl-dst")
        .load()
        .selectExpr("CAST(value AS STRING) v")
        .collect()
    )
    assert sorted(r.v for r in out) == sorted(f"s{p}-{i}" for p in range(2) for i in range(60))
    # a wrong password fails the query with Kafka's error, not a hang
    bad = (
        spark.read.format("strom")
        .options(**sasl)
        .option("kafka.sasl.mechanism", "PLAIN")
        .option("kafka.sasl.jaas.config", jaas("PLAIN", "alice", "hunter2"))
        .option("subscribe", "sasl-dst")
        .load()
    )
    with pytest.raises(Exception, match="SASL_AUTHENTICATION_FAILED") as err:
        bad.count()
    assert "hunter2" not in str(err.value)
