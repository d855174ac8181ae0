"""Option parsing and Spark-style errors (no broker, no JVM)."""

from __future__ import annotations

import pytest

from strom.spark.options import (
    StromOptionError,
    client_settings,
    parse_read_options,
    parse_write_options,
)

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def read(streaming: bool | None = True, **extra: str) -> object:
    return parse_read_options({**BOOT, **extra}, streaming=streaming)


def test_bootstrap_servers_required() -> None:
    with pytest.raises(StromOptionError, match=r"'kafka.bootstrap.servers' must be specified"):
        parse_read_options({"subscribe": "t"}, streaming=True)
    with pytest.raises(StromOptionError, match=r"Kafka producer"):
        parse_write_options({"topic": "t"})


def test_exactly_one_strategy() -> None:
    with pytest.raises(StromOptionError, match=r"One of the following options must be specified"):
        read()
    with pytest.raises(
        StromOptionError, match=r"Only one of the following options can be specified.*subscribe, assign"
    ):
        read(subscribe="a", assign='{"a":[0]}')


def test_strategies_parse() -> None:
    o = parse_read_options({**BOOT, "SUBSCRIBE": "a, b"}, streaming=True)  # case-insensitive names
    assert o.strategy == "subscribe" and o.topics == ("a", "b")
    o = read(subscribePattern="ev.*")
    assert o.strategy == "subscribePattern" and o.pattern == "ev.*"
    o = read(assign='{"a":[1,0],"b":[2]}')
    assert o.assign == {"a": (0, 1), "b": (2,)}
    with pytest.raises(StromOptionError, match=r"assign"):
        read(assign='{"a":"0"}')
    with pytest.raises(StromOptionError, match=r"Invalid regular expression"):
        read(subscribePattern="(")
    with pytest.raises(StromOptionError, match=r"No topics to subscribe"):
        read(subscribe=" , ")


def test_starting_offsets_defaults_and_json() -> None:
    assert read(subscribe="t").starting.kind == "latest"
    assert read(False, subscribe="t").starting.kind == "earliest"
    o = read(subscribe="t", startingOffsets='{"t":{"0":23,"1":-2}}')
    assert o.starting.kind == "offsets" and o.starting.offsets == {"t": {0: 23, 1: -2}}
    with pytest.raises(StromOptionError, match=r"Invalid JSON in option 'startingOffsets'"):
        read(subscribe="t", startingOffsets="{t:0}")
    with pytest.raises(StromOptionError, match=r"starting offset can't be latest for batch queries"):
        read(False, subscribe="t", startingOffsets="latest")


def test_ending_offsets_batch_only() -> None:
    with pytest.raises(StromOptionError, match=r"Ending offset not valid in streaming queries"):
        read(subscribe="t", endingOffsets="latest")
    with pytest.raises(StromOptionError, match=r"can't be earliest for batch queries"):
        read(False, subscribe="t", endingOffsets='{"t":{"0":-2}}')
    o = read(False, subscribe="t", endingOffsets='{"t":{"0":5}}')
    assert o.ending.offsets == {"t": {0: 5}}


def test_timestamp_priority() -> None:
    o = read(
        subscribe="t",
        startingTimestamp="1000",
        startingOffsetsByTimestamp='{"t":{"0":5}}',
        startingOffsets="earliest",
    )
    assert o.starting.kind == "timestamp" and o.starting.timestamp == 1000
    o = read(subscribe="t", startingOffsetsByTimestamp='{"t":{"0":5}}', startingOffsets="earliest")
    assert o.starting.kind == "timestamps"
    with pytest.raises(StromOptionError, match=r"startingOffsetsByTimestampStrategy"):
        read(subscribe="t", startingOffsetsByTimestampStrategy="nope")


def test_trigger_limits() -> None:
    o = read(subscribe="t", maxOffsetsPerTrigger="100", minOffsetsPerTrigger="10", maxTriggerDelay="2s")
    assert (o.max_offsets_per_trigger, o.min_offsets_per_trigger, o.max_trigger_delay_ms) == (100, 10, 2000)
    with pytest.raises(
        StromOptionError, match=r"minOffsetPerTrigger\(10\) is higher than the maxOffsetsPerTrigger\(5\)"
    ):
        read(subscribe="t", maxOffsetsPerTrigger="5", minOffsetsPerTrigger="10")
    with pytest.raises(StromOptionError, match=r"maxOffsetsPerTrigger"):
        read(subscribe="t", maxOffsetsPerTrigger="x")


def test_flags() -> None:
    o = read(subscribe="t", failOnDataLoss="false", includeHeaders="true", minPartitions="7")
    assert (o.fail_on_data_loss, o.include_headers, o.min_partitions) == (False, True, 7)
    with pytest.raises(StromOptionError, match=r"failOnDataLoss"):
        read(subscribe="t", failOnDataLoss="maybe")
    with pytest.raises(StromOptionError, match=r"minPartitions"):
        read(subscribe="t", minPartitions="0")


@pytest.mark.parametrize(
    "name",
    [
        "auto.offset.reset",
        "key.deserializer",
        "value.deserializer",
        "enable.auto.commit",
        "interceptor.classes",
    ],
)
def test_refused_consumer_settings(name: str) -> None:
    with pytest.raises(StromOptionError, match=f"Kafka option '{name}' is not supported"):
        read(subscribe="t", **{f"kafka.{name}": "x"})


def test_kafka_passthrough() -> None:
    c = client_settings(
        {
            **BOOT,
            "kafka.client.id": "me",
            "kafka.isolation.level": "read_committed",
            "kafka.fetch.max.wait.ms": "50",
            "kafka.max.poll.records": "5",
        }
    )
    assert (c.client_id, c.isolation_level, c.fetch_max_wait_ms) == ("me", 1, 50)
    assert ("max.poll.records", "5") in c.extra
    with pytest.raises(StromOptionError, match=r"kafka.isolation.level"):
        client_settings({**BOOT, "kafka.isolation.level": "serializable"})
    with pytest.raises(StromOptionError, match=r"kafka.security.protocol"):
        client_settings({**BOOT, "kafka.security.protocol": "SASL_TLS"})
    with pytest.raises(StromOptionError, match=r"key.serializer"):
        parse_write_options({**BOOT, "kafka.key.serializer": "x"})


# ---------------------------------------------------------------- security (kafka.ssl.*, kafka.sasl.*)

_JAAS_PLAIN = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="s3cr3t";'
)


def test_security_default_plaintext() -> None:
    c = client_settings(BOOT)
    assert c.security.protocol == "PLAINTEXT" and not c.security.uses_tls and not c.security.uses_sasl


def test_security_sasl_options_parsed() -> None:
    c = client_settings(
        {
            **BOOT,
            "kafka.security.protocol": "sasl_plaintext",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": _JAAS_PLAIN.replace("plain.Plain", "scram.Scram"),
        }
    )
    s = c.security
    assert (s.protocol, s.sasl_mechanism, s.sasl_username, s.sasl_password) == (
        "SASL_PLAINTEXT",
        "SCRAM-SHA-512",
        "alice",
        "s3cr3t",
    )
    assert "s3cr3t" not in repr(c) and "s3cr3t" not in str(c.extra)
    assert not any(k.startswith(("sasl.", "ssl.")) for k, _ in c.extra)
    w = parse_write_options(
        {
            **BOOT,
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.jaas.config": _JAAS_PLAIN,
            "kafka.ssl.endpoint.identification.algorithm": "",
        }
    )
    assert w.client.security.uses_tls and w.client.security.uses_sasl and not w.client.security.check_hostname


def test_security_ssl_options_parsed() -> None:
    c = client_settings(
        {
            **BOOT,
            "kafka.security.protocol": "SSL",
            "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.location": "/etc/ca.pem",
            "kafka.ssl.keystore.type": "PEM",
            "kafka.ssl.keystore.location": "/etc/client.pem",
            "kafka.ssl.key.password": "kp",
            "kafka.ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
        }
    )
    s = c.security
    assert (s.ssl_cafile, s.ssl_certfile, s.ssl_key_password, s.check_hostname) == (
        "/etc/ca.pem",
        "/etc/client.pem",
        "kp",
        True,
    )
    assert s.tls_versions == ("tlsv1.2", "tlsv1.3")
    assert "'kp'" not in repr(c)
    inline = client_settings(
        {
            **BOOT,
            "kafka.security.protocol": "SSL",
            "kafka.ssl.truststore.certificates": "-----BEGIN CERTIFICATE-----...",
            "kafka.ssl.keystore.key": "-----BEGIN PRIVATE KEY-----secret",
            "kafka.ssl.keystore.certificate.chain": "-----BEGIN CERTIFICATE-----...",
        }
    ).security
    assert inline.ssl_cadata and inline.ssl_key_pem and inline.ssl_cert_pem
    assert "secret" not in repr(inline)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"kafka.security.protocol": "SASL_PLAINTEXT"}, r"GSSAPI .*not supported by the strom client"),
        (
            {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "OAUTHBEARER"},
            r"OAUTHBEARER is not supported by the strom client.*kafka.sasl.mechanism",
        ),
        (
            {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN"},
            r"needs a user name and a password.*kafka.sasl.jaas.config",
        ),
        (
            {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.type": "JKS"},
            r"kafka.ssl.truststore.type=JKS is not supported by the strom client: it reads PEM",
        ),
        (
            {"kafka.security.protocol": "SSL", "kafka.ssl.keystore.type": "PKCS12"},
            r"kafka.ssl.keystore.type=PKCS12 is not supported",
        ),
        (
            {"kafka.security.protocol": "SSL", "kafka.ssl.endpoint.identification.algorithm": "dns"},
            r"kafka.ssl.endpoint.identification.algorithm",
        ),
        (
            {
                "kafka.security.protocol": "SASL_PLAINTEXT",
                "kafka.sasl.mechanism": "PLAIN",
                "kafka.sasl.jaas.config": 'x.PlainLoginModule required username="a" password="hunter2"',
            },
            r"kafka.sasl.jaas.config: .*end with ';'",
        ),
    ],
)
def test_security_refused(extra: dict[str, str], message: str) -> None:
    with pytest.raises(StromOptionError, match=message) as err:
        client_settings({**BOOT, **extra})
    assert "hunter2" not in str(err.value)
