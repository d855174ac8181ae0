"""`strom schema-registry --command-config`: Kafka client properties -> librdkafka settings."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("starlette")

from strom.schema_registry.app import client_config, load_properties


def test_java_properties_translated(tmp_path: Path) -> None:
    f = tmp_path / "client.properties"
    f.write_text(
        "# a comment\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="s3cret";\n'
        "ssl.truststore.location=/etc/ca.pem\n"
        "ssl.truststore.type=PEM\n"
        "ssl.endpoint.identification.algorithm=\n"
    )
    conf = client_config(load_properties(str(f)))
    assert conf == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
                    "sasl.username": "alice", "sasl.password": "s3cret", "ssl.ca.location": "/etc/ca.pem",
                    "ssl.endpoint.identification.algorithm": "none"}


def test_bad_jaas_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"sasl\.jaas\.config"):
        client_config({"sasl.jaas.config": "not jaas"})
