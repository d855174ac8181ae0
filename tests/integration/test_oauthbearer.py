# ruff: noqa: E501  (the embedded Java source keeps its natural line lengths)
"""SASL/OAUTHBEARER on a real broker process with JWT validation against a JWKS file, driven by
confluent-kafka (librdkafka's ``oauth_cb``) and kafka-python (``sasl_oauth_token_provider``):
a good token authenticates as ``User:<sub>`` and is authorized by ACLs as that principal; an
expired, wrong-audience or wrongly signed token is refused with Kafka's ``invalid_token``; a
short-lived token caps the session and librdkafka re-authenticates with a fresh one (KIP-368).
Tokens are signed in the test with an RSA key made for it."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

jwt = pytest.importorskip("jwt")
ck = pytest.importorskip("confluent_kafka")
admin_mod = pytest.importorskip("confluent_kafka.admin")
from confluent_kafka import KafkaError  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)
from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: E402

AUD, ISS = "strom-test", "https://idp.test"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
LISTENERS = {"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT"}


def make_token(
    sub: str, lifetime: float = 600, key: Any = KEY, aud: str = AUD, **claims: Any
) -> tuple[str, float]:
    now = time.time()
    exp = now + lifetime
    body = {"sub": sub, "iat": int(now), "exp": exp, "aud": aud, "iss": ISS, "scope": "kafka"} | claims
    return str(jwt.encode(body, key, algorithm="RS256", headers={"kid": "test-key"})), exp


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    tmp = tmp_path_factory.mktemp("oauth")
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(KEY.public_key())) | {"kid": "test-key", "use": "sig"}
    jwks = tmp / "jwks.json"
    jwks.write_text(json.dumps({"keys": [jwk]}))
    b = BrokerProcess(
        tmp / "data",
        overrides=[
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms=OAUTHBEARER",
            "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class="
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
            f"sasl.oauthbearer.jwks.endpoint.url={jwks.as_uri()}",
            f"sasl.oauthbearer.expected.audience={AUD}",
            f"sasl.oauthbearer.expected.issuer={ISS}",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:admin",
        ],
        listeners=LISTENERS,
    ).start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.log()


def full_log(b: BrokerProcess) -> str:
    return b.log_path.read_text(errors="replace")


def conf(b: BrokerProcess, token_fn: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": b.bootstrap_for("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "OAUTHBEARER",
        "oauth_cb": lambda _config: token_fn(),
    }


_ADMIN: dict[str, Any] = {}


@pytest.fixture(scope="module", autouse=True)
def _free_admins() -> Iterator[None]:
    """The cached AdminClients go with the module (their librdkafka threads would otherwise
    retry the stopped brokers for the rest of the run)."""
    yield
    _ADMIN.clear()


def admin(b: BrokerProcess) -> Any:
    if "a" not in _ADMIN:
        _ADMIN["a"] = admin_mod.AdminClient(conf(b, lambda: make_token("admin")))
    return _ADMIN["a"]


def produce(b: BrokerProcess, token_fn: Any, topic: str, seconds: float = 0.0) -> tuple[list[Any], list[Any]]:
    """Delivery errors of the messages sent (one, or one each 0.2 s for ``seconds``) and the
    client's error callbacks."""
    results: list[Any] = []
    errors: list[Any] = []
    p = ck.Producer(
        conf(b, token_fn)
        | {"message.timeout.ms": 6000, "allow.auto.create.topics": False, "error_cb": errors.append}
    )
    t0 = time.monotonic()
    while True:
        p.produce(topic, b"v", on_delivery=lambda err, msg: results.append(err))
        p.poll(0.2)
        if time.monotonic() - t0 >= seconds:
            break
    p.flush(15)
    return results, errors


def test_token_authenticates_as_sub_and_acls_apply(broker: BrokerProcess) -> None:
    topic = "oauth-acl"
    admin(broker).create_topics([admin_mod.NewTopic(topic, 1, 1)], request_timeout=15)[topic].result()
    results, _ = produce(broker, lambda: make_token("alice"), topic)
    assert results[0] is not None and results[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, results
    binding = AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    for f in admin(broker).create_acls([binding], request_timeout=15).values():
        f.result()
    results, _ = produce(broker, lambda: make_token("alice"), topic)
    assert results == [None]
    results, _ = produce(broker, lambda: make_token("bob"), topic)  # bob: authenticated, not granted
    assert results[0] is not None and results[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


@pytest.mark.parametrize(
    "case, token_fn, reason",
    [
        # (librdkafka would not send a token it knows has expired: it is told a later expiry)
        ("expired", lambda: (make_token("alice", lifetime=-120)[0], time.time() + 600), "expired"),
        ("audience", lambda: make_token("alice", aud="someone-else"), "InvalidAudienceError"),
        ("signature", lambda: make_token("alice", key=OTHER_KEY), "InvalidSignatureError"),
    ],
)
def test_bad_tokens_refused(broker: BrokerProcess, case: str, token_fn: Any, reason: str) -> None:
    errors: list[Any] = []
    a = admin_mod.AdminClient(conf(broker, token_fn) | {"error_cb": errors.append})
    with pytest.raises(Exception):  # noqa: B017 (the metadata request cannot succeed)
        a.list_topics(timeout=4)
    a.poll(0.5)  # (error callbacks are served by poll)
    auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert auth, errors
    assert "invalid_token" in auth[0].str(), auth[0].str()
    assert reason in full_log(broker), f"{case}: the broker's log has no {reason!r}"


def test_short_token_caps_session_and_client_reauthenticates(broker: BrokerProcess) -> None:
    """Tokens of 4 s (connections.max.reauth.ms unset): every session lifetime the broker answers
    is the token's remaining life, librdkafka fetches fresh tokens and re-authenticates, and
    producing for 8 s loses nothing. (With tokens this short librdkafka sometimes re-authenticates
    with a token about to end and its connection is then closed at the session's end, as a Kafka
    broker does; the producer reconnects and retries, so no delivery fails.)"""
    topic = "oauth-reauth"
    admin(broker).create_topics([admin_mod.NewTopic(topic, 1, 1)], request_timeout=15)[topic].result()
    minted: list[float] = []

    def short() -> tuple[str, float]:
        minted.append(time.monotonic())
        return make_token("admin", lifetime=4)

    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger("oauth-reauth-test")
    logger.addHandler(Collect())
    logger.setLevel(logging.DEBUG)
    results: list[Any] = []
    p = ck.Producer(conf(broker, short) | {"debug": "security", "message.timeout.ms": 20000}, logger=logger)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 8:
        p.produce(topic, b"v", on_delivery=lambda err, msg: results.append(err))
        p.poll(0.2)
    p.flush(25)
    assert results and all(e is None for e in results), [e for e in results if e is not None][:3]
    assert len(minted) >= 3, minted  # fresh tokens were fetched as the old ones neared their end
    lifetimes = [int(m[1]) for m in (re.search(r"Received session lifetime (\d+) ms", x) for x in lines) if m]
    reauths = [x for x in lines if "Auth in state REAUTH" in x]
    assert lifetimes and max(lifetimes) <= 4000, lifetimes  # capped by the token, not unlimited
    assert reauths, "librdkafka never re-authenticated"


def test_kafka_python(broker: BrokerProcess) -> None:
    kafka = pytest.importorskip("kafka")
    from kafka.errors import KafkaError as KPError
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        def __init__(self, tok: str) -> None:
            self.tok = tok

        def token(self) -> str:
            return self.tok

        def extensions(self) -> dict[str, str]:
            return {"traceId": "abc"}

    common = {
        "bootstrap_servers": broker.bootstrap_for("SASL_PLAINTEXT"),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "OAUTHBEARER",
    }
    a = kafka.KafkaAdminClient(**common, sasl_oauth_token_provider=Provider(make_token("admin")[0]))
    try:
        assert isinstance(a.list_topics(), list)
    finally:
        a.close()
    before = full_log(broker).count("InvalidSignatureError")
    with pytest.raises(KPError):  # (kafka-python reports it as "Unable to bootstrap")
        kafka.KafkaAdminClient(
            **common,
            sasl_oauth_token_provider=Provider(make_token("admin", key=OTHER_KEY)[0]),
            request_timeout_ms=5000,
            bootstrap_timeout_ms=4000,
        )
    assert full_log(broker).count("InvalidSignatureError") > before  # refused by the broker, and why


# --------------------------------------------------------------------------------- Java client
JAVA_LIBS = (
    Path(os.environ.get("STROM_COMPAT_HOME", Path.home() / ".cache" / "strom-compat")) / "java" / "libs"
)
JAVA_SOURCE = r"""
import java.util.*;
import javax.security.auth.callback.*;
import javax.security.auth.login.AppConfigurationEntry;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.security.auth.AuthenticateCallbackHandler;
import org.apache.kafka.common.security.oauthbearer.*;

public class OAuthJava {
    static volatile String jwt, sub;
    static volatile long expMs;

    // hands the client the JWT the test signed (Kafka's own login handler would need Jackson)
    public static class Tokens implements AuthenticateCallbackHandler {
        public void configure(Map<String, ?> c, String m, List<AppConfigurationEntry> e) {}
        public void close() {}
        public void handle(javax.security.auth.callback.Callback[] cbs) throws UnsupportedCallbackException {
            for (javax.security.auth.callback.Callback cb : cbs) {
                if (!(cb instanceof OAuthBearerTokenCallback)) throw new UnsupportedCallbackException(cb);
                final String v = jwt, s = sub; final long exp = expMs;
                ((OAuthBearerTokenCallback) cb).token(new OAuthBearerToken() {
                    public String value() { return v; }
                    public Set<String> scope() { return Set.of(); }
                    public long lifetimeMs() { return exp; }
                    public String principalName() { return s; }
                    public Long startTimeMs() { return null; }
                });
            }
        }
    }

    static Properties props(String bootstrap, String token, String principal, long exp) {
        jwt = token; sub = principal; expMs = exp;
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("security.protocol", "SASL_PLAINTEXT");
        p.put("sasl.mechanism", "OAUTHBEARER");
        p.put("sasl.jaas.config", "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;");
        p.put("sasl.login.callback.handler.class", Tokens.class);
        p.put("request.timeout.ms", "10000");
        p.put("default.api.timeout.ms", "15000");
        return p;
    }
    static String send(Properties p, String topic) {
        p.put("key.serializer", "org.apache.kafka.common.serialization.StringSerializer");
        p.put("value.serializer", "org.apache.kafka.common.serialization.StringSerializer");
        p.put("max.block.ms", "10000");
        p.put("delivery.timeout.ms", "15000");
        try (KafkaProducer<String, String> prod = new KafkaProducer<>(p)) {
            prod.send(new ProducerRecord<>(topic, "v")).get();
            return "ok";
        } catch (Exception e) {
            Throwable c = e.getCause() == null ? e : e.getCause();
            return c.getClass().getSimpleName();
        }
    }
    public static void main(String[] a) throws Exception {
        String bootstrap = a[0], topic = a[1];
        long exp = Long.parseLong(a[2]);
        try (Admin admin = Admin.create(props(bootstrap, a[3], "admin", exp))) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
            System.out.println("ADMIN ok");
        }
        System.out.println("ADMIN-SEND " + send(props(bootstrap, a[3], "admin", exp), topic));
        System.out.println("BOB-SEND " + send(props(bootstrap, a[4], "bob", exp), topic));
        System.out.println("BAD-SEND " + send(props(bootstrap, a[5], "admin", exp), topic));
    }
}
"""


def test_java_client(broker: BrokerProcess, tmp_path: Path) -> None:
    """Kafka's Java client (OAuthBearerLoginModule, tokens signed by the test): admin's token
    creates a topic and writes; bob's authenticates but may not write; a wrongly signed token
    fails authentication."""
    if shutil.which("java") is None or not JAVA_LIBS.is_dir():
        pytest.skip("no JDK or Kafka client jars")
    src = tmp_path / "OAuthJava.java"
    src.write_text(JAVA_SOURCE)
    admin_tok, exp = make_token("admin")
    bob_tok, _ = make_token("bob")
    bad_tok, _ = make_token("admin", key=OTHER_KEY)
    r = subprocess.run(
        ["java", "-cp", f"{JAVA_LIBS}/*", str(src), broker.bootstrap_for("SASL_PLAINTEXT"), "oauth-java",
         str(int(exp * 1000)), admin_tok, bob_tok, bad_tok],
        capture_output=True,
        text=True,
        timeout=180,
    )
    out = r.stdout
    assert r.returncode == 0, out + r.stderr
    assert "ADMIN ok" in out and "ADMIN-SEND ok" in out, out + r.stderr
    assert "BOB-SEND TopicAuthorizationException" in out, out
    assert "BAD-SEND SaslAuthenticationException" in out, out
