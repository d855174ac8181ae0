"""SASL/OAUTHBEARER server (strom.security.oauthbearer): the client-first message grammar, JWT
validation against a JWKS file (signature, exp/nbf/iat with clock skew, audience, issuer, the
subject claim), Kafka's error exchange, and the unsecured validator. Tokens are signed here with
keys made for the test (PyJWT + cryptography)."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest

jwt = pytest.importorskip("jwt")
from cryptography.hazmat.primitives.asymmetric import ec, rsa  # noqa: E402

from strom.config_schema import ConfigError  # noqa: E402
from strom.security.oauthbearer import (  # noqa: E402
    INVALID_TOKEN,
    OAuthBearerExchange,
    parse_client_initial_response,
)
from strom.security.sasl import SaslAuthenticationError, SaslSettings  # noqa: E402

NOW = 1_800_000_000.0


def rsa_key() -> Any:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def jwk_of(key: Any, kid: str) -> dict[str, Any]:
    alg = jwt.algorithms.RSAAlgorithm if isinstance(key, rsa.RSAPrivateKey) else jwt.algorithms.ECAlgorithm
    d = json.loads(alg.to_jwk(key.public_key()))
    d["kid"] = kid
    d["use"] = "sig"
    return d


def write_jwks(path: Path, *keys: dict[str, Any]) -> str:
    path.write_text(json.dumps({"keys": list(keys)}))
    return path.as_uri()


def token(key: Any, kid: str | None = "k1", alg: str = "RS256", **claims: Any) -> str:
    body = {"sub": "alice", "iat": NOW - 10, "exp": NOW + 600} | claims
    body = {k: v for k, v in body.items() if v is not None}
    headers = {"kid": kid} if kid is not None else {}
    return str(jwt.encode(body, key, algorithm=alg, headers=headers))


def first(tok: str, authzid: str = "", ext: str = "") -> bytes:
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {tok}\x01{ext}\x01".encode()


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Any, dict[str, Any]]:
    key = rsa_key()
    url = write_jwks(tmp_path / "jwks.json", jwk_of(key, "k1"))
    values = {
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "sasl.oauthbearer.jwks.endpoint.url": url,
        "sasl.oauthbearer.expected.audience": ["kafka"],
        "sasl.oauthbearer.expected.issuer": "https://idp.example",
        "sasl.oauthbearer.clock.skew.seconds": 30,
    }
    return key, values


def exchange(values: dict[str, Any], now: float = NOW) -> OAuthBearerExchange:
    settings = SaslSettings.from_values(values).oauth("sasl_plaintext")
    return OAuthBearerExchange(settings, wall_clock=lambda: now)


def good(key: Any, **claims: Any) -> str:
    return token(key, **({"aud": "kafka", "iss": "https://idp.example"} | claims))


def refused(ex: OAuthBearerExchange, msg: bytes) -> str:
    """Kafka's failure: the JSON challenge, then the client's \\x01 fails the exchange."""
    assert ex.evaluate(msg) == INVALID_TOKEN.encode()
    assert not ex.complete
    with pytest.raises(SaslAuthenticationError) as e:
        ex.evaluate(b"\x01")
    assert str(e.value) == INVALID_TOKEN
    return str(e.value.reason)


def test_good_token(setup: Any) -> None:
    key, values = setup
    ex = exchange(values)
    assert ex.evaluate(first(good(key), ext="traceId=123\x01")) == b""
    assert ex.complete and ex.username == "alice" and ex.expiry_ms == int((NOW + 600) * 1000)


def test_clock_skew_and_time_claims(setup: Any) -> None:
    key, values = setup
    assert exchange(values).evaluate(first(good(key, exp=NOW - 20))) == b""  # within 30 s skew
    assert "expired" in refused(exchange(values), first(good(key, exp=NOW - 40)))
    assert "not yet valid" in refused(exchange(values), first(good(key, nbf=NOW + 60)))
    assert "iat" in refused(exchange(values), first(good(key, iat=None)))
    assert "exp" in refused(exchange(values), first(good(key, exp=None)))


def test_audience_issuer_subject(setup: Any) -> None:
    key, values = setup
    assert "Audience" in refused(exchange(values), first(token(key, aud="other", iss="https://idp.example")))
    assert "Issuer" in refused(exchange(values), first(token(key, aud="kafka", iss="https://evil")))
    assert "subject" in refused(exchange(values), first(good(key, sub=None)))
    # a list audience with ours in it is accepted; a custom subject claim
    assert exchange(values).evaluate(first(good(key, aud=["x", "kafka"]))) == b""
    ex = exchange(values | {"sasl.oauthbearer.sub.claim.name": "client_id"})
    ex.evaluate(first(good(key, client_id="svc-1")))
    assert ex.username == "svc-1"


def test_signature_and_algorithms(setup: Any, tmp_path: Path) -> None:
    key, values = setup
    other = rsa_key()
    assert "Signature" in refused(exchange(values), first(good(other)))
    assert "kid" in refused(
        exchange(values), first(token(other, kid="nope", aud="kafka", iss="https://idp.example"))
    )
    # alg none and HMAC (with the public key as secret: the classic confusion) are refused
    parts = good(key).split(".")
    header = base64.urlsafe_b64encode(b'{"alg":"none","kid":"k1"}').rstrip(b"=").decode()
    assert "not allowed" in refused(exchange(values), first(f"{header}.{parts[1]}.AAAA"))
    hs = jwt.encode(
        {"sub": "alice", "iat": NOW, "exp": NOW + 60}, "secret", algorithm="HS256", headers={"kid": "k1"}
    )
    assert "not allowed" in refused(exchange(values), first(hs))
    # an EC key in the same set; and a set of two keys needs a kid
    eck = ec.generate_private_key(ec.SECP256R1())
    url = write_jwks(tmp_path / "two.json", jwk_of(key, "k1"), jwk_of(eck, "e1"))
    v2 = values | {"sasl.oauthbearer.jwks.endpoint.url": url}
    ex = exchange(v2)
    ex.evaluate(first(token(eck, kid="e1", alg="ES256", aud="kafka", iss="https://idp.example")))
    assert ex.complete
    assert "kid" in refused(exchange(v2), first(token(key, kid=None, aud="kafka", iss="https://idp.example")))


def test_jwks_file_reloaded_when_changed(setup: Any, tmp_path: Path) -> None:
    key, values = setup
    ex = exchange(values)
    ex.evaluate(first(good(key)))
    new = rsa_key()
    path = tmp_path / "jwks.json"
    write_jwks(path, jwk_of(new, "k2"))
    import os

    os.utime(path, ns=(time.time_ns(), time.time_ns() + 5_000_000_000))
    settings = SaslSettings.from_values(values).oauth(None)
    ex2 = OAuthBearerExchange(settings, wall_clock=lambda: NOW)
    ex2.evaluate(first(token(new, kid="k2", aud="kafka", iss="https://idp.example")))
    assert ex2.complete
    path.write_text("not json")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 9_000_000_000))
    ex3 = OAuthBearerExchange(settings, wall_clock=lambda: NOW)
    assert "cannot be read" in refused(
        ex3, first(token(new, kid="k2", aud="kafka", iss="https://idp.example"))
    )


def test_malformed_messages_and_authzid(setup: Any) -> None:
    key, values = setup
    for bad in (
        b"",
        b"y,,\x01auth=Bearer a\x01\x01",
        b"n,,auth=Bearer a\x01\x01",
        b"n,,\x01auth=Bearer a\x01",
        b"n,,\x01auth=Basic abc\x01\x01",
        b"n,,\x01x=1\x01\x01",
        b"\xff\xfe",
    ):
        with pytest.raises(SaslAuthenticationError, match="invalid OAUTHBEARER client first message"):
            exchange(values).evaluate(bad)
    with pytest.raises(SaslAuthenticationError, match="authorization id"):
        exchange(values).evaluate(first(good(key), authzid="bob"))
    ex = exchange(values)
    ex.evaluate(first(good(key), authzid="alice"))
    assert ex.complete
    assert parse_client_initial_response(b"n,a=u,\x01auth=Bearer t.u.v\x01k=v w\x01\x01") == (
        "u",
        "t.u.v",
        {"k": "v w"},
    )


def test_unsecured_validator() -> None:
    def unsigned(**claims: Any) -> str:
        enc = [
            base64.urlsafe_b64encode(json.dumps(x).encode()).rstrip(b"=").decode()
            for x in ({"alg": "none"}, {"sub": "dev", "exp": NOW + 60} | claims)
        ]
        return f"{enc[0]}.{enc[1]}."

    jaas = (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'unsecuredValidatorRequiredScope="kafka" unsecuredValidatorAllowableClockSkewMs="1000";'
    )
    values = {"sasl.enabled.mechanisms": "OAUTHBEARER", "sasl.jaas.config": jaas}
    s = SaslSettings.from_values(values)
    assert s.unsecured_oauth_listeners() == [""]
    ex = OAuthBearerExchange(s.oauth(None), wall_clock=lambda: NOW)
    ex.evaluate(first(unsigned(scope="kafka other")))
    assert ex.username == "dev"
    bad = OAuthBearerExchange(s.oauth(None), wall_clock=lambda: NOW)
    assert "scope" in refused(bad, first(unsigned()))
    bad = OAuthBearerExchange(s.oauth(None), wall_clock=lambda: NOW)
    assert "expired" in refused(bad, first(unsigned(scope="kafka", exp=NOW - 2)))


HANDLER_KEY = "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class"
KAFKA_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"


def test_bad_settings() -> None:
    base = {"sasl.enabled.mechanisms": "OAUTHBEARER"}
    with pytest.raises(ConfigError, match="not a file://"):
        SaslSettings.from_values(base | {"sasl.oauthbearer.jwks.endpoint.url": "ftp://x/y"})
    with pytest.raises(ConfigError, match=r"needs sasl\.oauthbearer\.jwks\.endpoint\.url"):
        SaslSettings.from_values(base | {HANDLER_KEY: KAFKA_VALIDATOR})
    with pytest.raises(ConfigError, match="not available in strom"):
        SaslSettings.from_values(base | {HANDLER_KEY: "com.acme.Handler"})


def test_jwks_over_http_cached_and_refetched_for_unknown_kid(tmp_path: Path) -> None:
    """An http:// JWKS (a local server): fetched once and cached; a token with a kid the cache
    lacks makes it fetch again (a rotated key is picked up), at most every 10 s."""
    import http.server
    import threading

    k1, k2 = rsa_key(), rsa_key()
    served = {"body": json.dumps({"keys": [jwk_of(k1, "k1")]}).encode(), "hits": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served["hits"] += 1
            body = served["body"]
            assert isinstance(body, bytes)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
        s = SaslSettings.from_values(
            {"sasl.enabled.mechanisms": "OAUTHBEARER", "sasl.oauthbearer.jwks.endpoint.url": url}
        )
        settings = s.oauth(None)

        def auth(key: Any, kid: str) -> OAuthBearerExchange:
            ex = OAuthBearerExchange(settings, wall_clock=lambda: NOW)
            ex.evaluate(first(token(key, kid=kid)))
            return ex

        assert auth(k1, "k1").complete and auth(k1, "k1").complete
        assert served["hits"] == 1  # cached
        served["body"] = json.dumps({"keys": [jwk_of(k1, "k1"), jwk_of(k2, "k2")]}).encode()
        assert auth(k2, "k2").complete  # unknown kid: fetched again
        assert served["hits"] == 2
        assert "kid" in refused(
            OAuthBearerExchange(settings, wall_clock=lambda: NOW), first(token(k2, kid="k3"))
        )
        assert served["hits"] == 2  # (a second forced fetch within 10 s is not made)
    finally:
        server.shutdown()
