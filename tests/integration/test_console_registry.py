"""``strom console --schema-registry-url``: values (and keys) in Confluent's wire format, written by
confluent-kafka's Avro / JSON Schema / Protobuf serializers, are shown decoded through a real
``strom schema-registry`` (behind basic auth, read by a read-only user); other bytes as before."""

from __future__ import annotations

import html
import json
import re
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_console import Console  # same directory (rootdir import mode)

from strom.testing.broker_process import BrokerProcess
from strom.testing.registry_process import RegistryProcess

pytestmark = pytest.mark.integration
confluent_kafka = pytest.importorskip("confluent_kafka")
pytest.importorskip("fastavro")

from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

USER = json.dumps(
    {
        "type": "record",
        "name": "User",
        "namespace": "ex",
        "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
    }
)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    d = tmp_path_factory.mktemp("console-sr")
    realm = d / "realm.properties"
    realm.write_text("writer: w-secret, developer\nviewer: OBF:1v2j1uum1xtv1zej1zer1xtn1uvk1v1v, readonly\n")
    b = BrokerProcess(d / "data", overrides=["group.initial.rebalance.delay.ms=0"])
    b.start()
    reg = RegistryProcess(b.bootstrap, d / "registry.log", "--basic-auth-file", str(realm))
    try:
        yield b, reg.start().url
    finally:
        reg.stop()
        b.stop()


def rows(body: str) -> list[tuple[str, str]]:
    """(kind tag, shown text) of each value cell of a messages page."""
    cells = re.findall(r'<span class="tag">([^<]*)</span><pre>(.*?)</pre>', body, re.S)
    return [(html.unescape(k), html.unescape(v)) for k, v in cells]


def test_console_decodes_registry_records(env: tuple[BrokerProcess, str]) -> None:
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    b, url = env
    sr = SchemaRegistryClient({"url": url, "basic.auth.user.info": "writer:w-secret"})
    p = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap})
    avro_t, json_t, pb_t = (f"{k}-{uuid.uuid4().hex[:6]}" for k in ("avro", "json", "pb"))
    ser = AvroSerializer(sr, USER)
    p.produce(
        avro_t,
        ser({"name": "ann", "age": 31}, SerializationContext(avro_t, MessageField.VALUE)),
        key=b"k0",
        partition=0,
    )
    p.produce(avro_t, b"plain text, not framed", key=b"k1", partition=0)
    p.produce(avro_t, b"\x00\x00\x00\x7f\x7fnot a schema id", key=b"k2", partition=0)
    js = json.dumps({"type": "object", "title": "Pet", "properties": {"name": {"type": "string"}}})
    p.produce(
        json_t,
        JSONSerializer(js, sr)({"name": "rex"}, SerializationContext(json_t, MessageField.VALUE)),
        partition=0,
    )
    fdp = descriptor_pb2.FileDescriptorProto(name="item-console.proto", package="shop", syntax="proto3")
    m = fdp.message_type.add(name="Item")
    f = descriptor_pb2.FieldDescriptorProto
    m.field.add(name="sku", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    m.field.add(name="qty", number=2, type=f.TYPE_INT32, label=f.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    item = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Item"))
    pser = ProtobufSerializer(item, sr, {"use.deprecated.format": False})
    p.produce(pb_t, pser(item(sku="s1", qty=4), SerializationContext(pb_t, MessageField.VALUE)), partition=0)
    assert p.flush(30) == 0
    avro_id = sr.get_latest_version(f"{avro_t}-value").schema_id

    c = Console(b.bootstrap, "--schema-registry-url", url, "--schema-registry-user-info", "viewer:password")
    try:
        got = rows(c.get(f"/topics/{avro_t}/messages?order=oldest"))
        assert got[0][0] == f"avro #{avro_id}" and json.loads(got[0][1]) == {"name": "ann", "age": 31}
        assert got[1] == ("text", "plain text, not framed")  # not framed: as before
        assert got[2] == ("text", "\x00\x00\x00\x7f\x7fnot a schema id")  # framed-looking, no such id
        ((kind, text),) = rows(c.get(f"/topics/{json_t}/messages"))
        assert kind.startswith("json-schema #") and json.loads(text) == {"name": "rex"}
        ((kind, text),) = rows(c.get(f"/topics/{pb_t}/messages"))
        assert kind.startswith("protobuf #") and json.loads(text) == {"sku": "s1", "qty": 4}
        # a search shows them decoded too
        got = rows(c.get(f"/topics/{avro_t}/messages?q=k0&mode=text"))
        assert got and got[0][0] == f"avro #{avro_id}"
        # the live tail
        stream = urllib.request.urlopen(
            f"http://127.0.0.1:{c.port}/topics/{avro_t}/tail?partition=0", timeout=30
        )
        try:
            assert stream.readline() == b"event: ready\n"
            stream.readline()
            stream.readline()
            p.produce(
                avro_t,
                ser({"name": "bo", "age": 5}, SerializationContext(avro_t, MessageField.VALUE)),
                partition=0,
            )
            assert p.flush(30) == 0
            event = json.loads(stream.readline().decode()[len("data: ") :])
            assert event["kind"] == f"avro #{avro_id}" and json.loads(event["value"]) == {
                "name": "bo",
                "age": 5,
            }
        finally:
            stream.close()
    finally:
        c.close()
    # without the flag: the raw bytes, as before
    c = Console(b.bootstrap)
    try:
        assert rows(c.get(f"/topics/{avro_t}/messages?order=oldest"))[0][0] in ("text", "hex")
    finally:
        c.close()


def test_registry_flags_are_checked(tmp_path: Path) -> None:
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "strom", "console", "--schema-registry-url", "ftp://x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "--schema-registry-url" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "strom", "console", "--schema-registry-user-info", "a:b"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "needs --schema-registry-url" in r.stderr


def test_connect_converters_authenticate_to_the_registry(env: tuple[BrokerProcess, str]) -> None:
    """The registry converters' basic.auth.credentials.source (USER_INFO, URL) against the same
    registry: a developer registers; a readonly user is refused (403) and the converter says so."""
    from confluent_kafka.schema_registry.avro import AvroDeserializer

    from strom.connect.converters import make_converter
    from strom.connect.data import ConfigError, DataException

    _b, url = env
    schema = {
        "type": "struct",
        "name": "ex.Auth",
        "optional": False,
        "fields": [{"field": "n", "type": "int32", "optional": False}],
    }
    avro = "io.confluent.connect.avro.AvroConverter"
    topic = f"conv-auth-{uuid.uuid4().hex[:6]}"
    conv = make_converter(
        avro,
        {
            "schema.registry.url": url,
            "basic.auth.credentials.source": "USER_INFO",
            "basic.auth.user.info": "writer:w-secret",
        },
        False,
    )
    data = conv.from_connect(topic, schema, {"n": 7})
    sr = SchemaRegistryClient({"url": url, "basic.auth.user.info": "writer:w-secret"})
    assert AvroDeserializer(sr)(data, SerializationContext(topic, MessageField.VALUE)) == {"n": 7}
    # the URL's user info (the default source), read by the read-only user: decoding works ...
    ro_url = url.replace("://", "://viewer:password@")
    ro = make_converter(avro, {"schema.registry.url": ro_url}, False)
    assert ro.to_connect(topic, data)[1] == {"n": 7}
    # ... registering a new schema does not
    with pytest.raises(DataException, match="denied operation Write"):
        ro.from_connect(f"{topic}-2", schema, {"n": 1})
    # without credentials: 401
    with pytest.raises(DataException, match="Unauthorized"):
        make_converter(avro, {"schema.registry.url": url}, False).to_connect(topic, data)
    with pytest.raises(ConfigError, match=r"USER_INFO needs basic\.auth\.user\.info"):
        make_converter(
            avro, {"schema.registry.url": url, "basic.auth.credentials.source": "USER_INFO"}, False
        )
    with pytest.raises(ConfigError, match="SASL_INHERIT"):
        make_converter(
            avro, {"schema.registry.url": url, "basic.auth.credentials.source": "SASL_INHERIT"}, False
        )


def test_broker_served_console_decodes_through_the_brokers_registry(tmp_path: Path) -> None:
    """strom.http.console.schema.registry.url (+ .basic.auth.user.info): the console a broker
    serves decodes through a registry, here the same broker's own (/schema-registry)."""
    from confluent_kafka.schema_registry.avro import AvroSerializer

    realm = tmp_path / "realm"
    realm.write_text("writer: w-secret, admin\nviewer: MD5:5f4dcc3b5aa765d61d8327deb882cf99, readonly\n")
    b = BrokerProcess(tmp_path / "data", overrides=["group.initial.rebalance.delay.ms=0"])
    b.overrides += [
        "strom.http.console.enable=true",
        "strom.http.schema.registry.enable=true",
        f"strom.http.schema.registry.basic.auth.file={realm}",
        f"strom.http.console.schema.registry.url={b.http_url}/schema-registry",
        "strom.http.console.schema.registry.basic.auth.user.info=viewer:password",
    ]
    b.start()
    try:
        import time

        sr = SchemaRegistryClient(
            {"url": f"{b.http_url}/schema-registry", "basic.auth.user.info": "writer:w-secret"}
        )
        topic = f"own-{uuid.uuid4().hex[:6]}"
        deadline = time.monotonic() + 30
        while True:  # the broker's registry answers 503 until its store is open
            try:
                ser = AvroSerializer(sr, USER)
                data = ser({"name": "cy", "age": 9}, SerializationContext(topic, MessageField.VALUE))
                break
            except Exception:
                assert time.monotonic() < deadline
                time.sleep(0.5)
        p = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap})
        p.produce(topic, data, partition=0)
        assert p.flush(30) == 0
        with urllib.request.urlopen(f"{b.http_url}/console/topics/{topic}/messages", timeout=30) as r:
            ((kind, text),) = rows(r.read().decode())
        assert kind.startswith("avro #") and json.loads(text) == {"name": "cy", "age": 9}
    finally:
        b.stop()
