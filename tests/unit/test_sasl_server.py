"""SASL server side without a network: PLAIN and SCRAM exchanges (scramp's client against the
broker's server), JAAS parsing, the credential store, and the four handlers on hand-built
request contexts."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import logging
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import scramp
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.clock import RealClock
from strom.config import BrokerConfig, ConfigError
from strom.rate_limited_log import RateLimitedLog
from strom.security.credentials import CredentialStore, ScramCredential
from strom.security.sasl import (
    PlainExchange,
    SaslAuthenticationError,
    SaslSettings,
    SaslState,
    ScramExchange,
    parse_jaas_config,
)
from strom.security.session import ConnectionSession
from strom.server.context import RequestContext
from strom.server.handlers import sasl as sasl_handlers
from strom.server.handlers import scram_credentials as scram_handlers

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'
)


# ------------------------------------------------------------------------------------ JAAS
def test_jaas_parses_kafka_plain_entry() -> None:
    entry = parse_jaas_config(JAAS)
    assert entry.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert entry.flag == "required"
    assert entry.options["username"] == "admin"
    assert entry.plain_users() == {"admin": "admin-secret", "alice": "alice-secret"}


def test_jaas_quotes_escapes_and_bare_words() -> None:
    entry = parse_jaas_config('M optional user_bob=bare user_eve="a \\"q\\" ;=x"  ;')
    assert entry.plain_users() == {"bob": "bare", "eve": 'a "q" ;=x'}


@pytest.mark.parametrize(
    "text",
    [
        'M required user_a="x"',  # no ;
        'M maybe user_a="x";',  # bad flag
        'M required user_a "x";',  # no =
        'M required user_a="x;',  # unterminated
        "M required user_a=;",  # no value
        'M required a="x"; N required b="y";',  # two modules
        ";",
    ],
)
def test_jaas_rejects_malformed_text(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_jaas_config(text)


@pytest.mark.parametrize(
    "text,where",
    [
        ("M required user_alice=alice secret;", "after option 'user_alice'"),
        ('M required "secret";', "after the login module flag"),
        ('M "secret" user_a="x";', "flag"),
        ("M secret user_a=x;", "flag"),
    ],
)
def test_jaas_errors_do_not_echo_values(text: str, where: str) -> None:
    """A value may be a password: the message names the key and the position, not the text."""
    with pytest.raises(ConfigError) as info:
        parse_jaas_config(text, "listener.name.sasl_ssl.plain.sasl.jaas.config")
    message = str(info.value)
    assert "secret" not in message
    assert "listener.name.sasl_ssl.plain.sasl.jaas.config" in message and where in message


def test_bad_jaas_is_a_config_error_at_start() -> None:
    with pytest.raises(ConfigError, match=r"sasl\.jaas\.config"):
        BrokerConfig.from_sources(overrides=["listener.name.sasl_plaintext.plain.sasl.jaas.config=oops"])
    with pytest.raises(ConfigError, match="GSSAPI"):
        BrokerConfig.from_sources(overrides=["sasl.enabled.mechanisms=GSSAPI"])


def test_settings_per_listener_with_fallback() -> None:
    cfg = BrokerConfig.from_sources(
        overrides={
            "sasl.jaas.config": 'M required user_root="r";',
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN, SCRAM-SHA-512",
        }
    )
    s = SaslSettings.from_values(cfg.values)
    assert s.enabled_mechanisms("SASL_PLAINTEXT") == ("PLAIN", "SCRAM-SHA-512")
    assert s.enabled_mechanisms("OTHER") == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    assert s.plain_users("SASL_PLAINTEXT") == {"admin": "admin-secret", "alice": "alice-secret"}
    assert s.plain_users("OTHER") == {"root": "r"}


# ------------------------------------------------------------------------------------ PLAIN
def test_plain_success_and_authzid() -> None:
    ex = PlainExchange({"alice": "alice-secret"})
    assert ex.evaluate(b"\0alice\0alice-secret") == b""
    assert ex.complete and ex.username == "alice"
    ex = PlainExchange({"alice": "alice-secret"})
    ex.evaluate(b"alice\0alice\0alice-secret")
    assert ex.username == "alice"


@pytest.mark.parametrize(
    "token",
    [
        b"\0alice\0wrong",
        b"\0bob\0alice-secret",
        b"bob\0alice\0alice-secret",
        b"alice\0alice-secret",
        b"\0\0x",
        b"\xff",
    ],
)
def test_plain_failures(token: bytes) -> None:
    ex = PlainExchange({"alice": "alice-secret"})
    with pytest.raises(SaslAuthenticationError):
        ex.evaluate(token)
    assert not ex.complete


# ------------------------------------------------------------------------------------ SCRAM
@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_exchange_with_scramp_client(mech: str) -> None:
    cred = ScramCredential.from_password(mech, "alice-secret", 4096)
    server = ScramExchange(mech, lambda u: cred if u == "alice" else None)
    client = scramp.ScramClient([mech], "alice", "alice-secret")
    first = server.evaluate(client.get_client_first().encode())
    assert not server.complete
    client.set_server_first(first.decode())
    final = server.evaluate(client.get_client_final().encode())
    client.set_server_final(final.decode())  # verifies the server signature
    assert server.complete and server.username == "alice"


@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("mallory", "alice-secret")])
def test_scram_wrong_password_or_unknown_user(user: str, password: str) -> None:
    cred = ScramCredential.from_password("SCRAM-SHA-256", "alice-secret", 4096)
    server = ScramExchange("SCRAM-SHA-256", lambda u: cred if u == "alice" else None)
    client = scramp.ScramClient(["SCRAM-SHA-256"], user, password)
    with pytest.raises(SaslAuthenticationError) as info:
        first = server.evaluate(client.get_client_first().encode())
        client.set_server_first(first.decode())
        server.evaluate(client.get_client_final().encode())
    assert not server.complete
    # the client cannot tell an unknown user from a wrong password: Kafka's fixed text
    assert str(info.value) == (
        "Authentication failed during authentication due to invalid credentials "
        "with SASL mechanism SCRAM-SHA-256"
    )
    assert info.value.reason == ("unknown user" if user == "mallory" else "invalid client proof")


def _manual_client_final(client_first_bare: str, server_first: str, nonce: str, password: str) -> str:
    """A client-final message built by hand (sha256), with whatever nonce the caller picks."""
    attrs = dict(a.split("=", 1) for a in server_first.split(","))
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    stored = hashlib.sha256(client_key).digest()
    without_proof = f"c=biws,r={nonce}"
    auth = f"{client_first_bare},{server_first},{without_proof}".encode()
    sig = hmac.new(stored, auth, "sha256").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, sig, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}"


def test_scram_accepts_librdkafka_2_0_doubled_client_nonce() -> None:
    """librdkafka < 2.2 sends its client nonce followed by the combined nonce; Kafka accepts a
    final nonce that ends with the server-first one, and so does strom."""
    cred = ScramCredential.from_password("SCRAM-SHA-256", "pw", 4096)
    for doubled, ok in [(True, True), (False, True), (None, False)]:
        server = ScramExchange("SCRAM-SHA-256", lambda u: cred)
        bare = "n=alice,r=CLIENTNONCE"
        server_first = server.evaluate(f"n,,{bare}".encode()).decode()
        combined = server_first.split(",")[0][2:]
        nonce = {True: "CLIENTNONCE" + combined, False: combined, None: combined[:-1]}[doubled]
        final = _manual_client_final(bare, server_first, nonce, "pw")
        if ok:
            assert server.evaluate(final.encode()).startswith(b"v=") and server.complete
        else:
            with pytest.raises(SaslAuthenticationError) as info:
                server.evaluate(final.encode())
            assert "nonce" in str(info.value.reason)


def test_scram_authzid_must_be_the_user() -> None:
    cred = ScramCredential.from_password("SCRAM-SHA-256", "pw", 4096)
    server = ScramExchange("SCRAM-SHA-256", lambda u: cred)
    assert server.evaluate(b"n,a=alice,n=alice,r=abc").startswith(b"r=abc")
    server = ScramExchange("SCRAM-SHA-256", lambda u: cred)
    with pytest.raises(SaslAuthenticationError) as info:
        server.evaluate(b"n,a=admin,n=alice,r=abc")
    assert "authorization id" in str(info.value.reason)


def test_scram_credential_matches_kafka_style_salted_password() -> None:
    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha512", b"pw", salt, 8192)
    a = ScramCredential.from_salted_password("SCRAM-SHA-512", salt, salted, 8192)
    b = ScramCredential.from_password("SCRAM-SHA-512", "pw", 8192, salt)
    assert a == b


def test_credentials_persist_across_reopen(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path)
    c1 = ScramCredential.from_password("SCRAM-SHA-256", "a", 4096)
    c2 = ScramCredential.from_password("SCRAM-SHA-512", "b", 8192)
    store.apply(
        [("alice", "SCRAM-SHA-256", c1), ("alice", "SCRAM-SHA-512", c2), ("bob", "SCRAM-SHA-256", c1)]
    )
    again = CredentialStore(tmp_path)
    assert again.get("alice", "SCRAM-SHA-512") == c2
    assert again.users() == ["alice", "bob"]
    again.apply(deletions=[("bob", "SCRAM-SHA-256")])
    assert CredentialStore(tmp_path).users() == ["alice"]
    assert (tmp_path / "strom-scram-credentials.json").stat().st_mode & 0o077 == 0


def test_credential_store_never_readable_by_others(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store and its temporary file are created owner-only (even under umask 0), so no crash
    or race leaves the credentials readable by group or others; an older store is tightened."""
    name = "strom-scram-credentials.json"
    seen: list[tuple[str, int]] = []
    real_replace = os.replace

    def spy(src: Any, dst: Any) -> None:  # the moment between write and rename
        seen.append((Path(src).name, os.stat(src).st_mode & 0o777))
        real_replace(src, dst)
        seen.append((Path(dst).name, os.stat(dst).st_mode & 0o777))

    monkeypatch.setattr(os, "replace", spy)
    old_umask = os.umask(0)
    try:
        (tmp_path / (name + ".tmp")).write_bytes(b"{}")  # a crash's leftover, 0666 under umask 0
        os.chmod(tmp_path / (name + ".tmp"), 0o644)
        store = CredentialStore(tmp_path)
        assert (tmp_path / (name + ".tmp")).stat().st_mode & 0o077 == 0
        store.apply([("alice", "SCRAM-SHA-256", ScramCredential.from_password("SCRAM-SHA-256", "a", 4096))])
    finally:
        os.umask(old_umask)
    assert seen == [(name + ".tmp", 0o600), (name, 0o600)]
    os.chmod(tmp_path / name, 0o644)  # e.g. written by an older strom
    assert CredentialStore(tmp_path).users() == ["alice"]
    assert (tmp_path / name).stat().st_mode & 0o777 == 0o600


def test_corrupt_store_is_reported(tmp_path: Path) -> None:
    (tmp_path / "strom-scram-credentials.json").write_text("{not json")
    with pytest.raises(ValueError, match="corrupt"):
        CredentialStore(tmp_path)


# ------------------------------------------------------------------------------------ handlers
class _FakeBroker:
    def __init__(self, config: BrokerConfig, log_dir: Path) -> None:
        self.config = config
        self.log_dir = log_dir
        self.storage_log = RateLimitedLog(logging.getLogger("strom.storage"), RealClock())
        self.sasl = SaslState(config.values, log_dir)


def _broker(tmp_path: Path, **overrides: str) -> Any:
    cfg = BrokerConfig.from_sources(overrides={"sasl.jaas.config": JAAS, **overrides})
    return _FakeBroker(cfg, tmp_path)


def _ctx(broker: Any, api_key: int, version: int, session: ConnectionSession) -> RequestContext:
    return RequestContext(api_key, version, 1, "t", "127.0.0.1", "c1", broker, session)


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_handshake_and_plain_authenticate(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    session = ConnectionSession.for_listener("SASL_PLAINTEXT", "SASL_PLAINTEXT")
    hs = _run(
        sasl_handlers.handle_sasl_handshake(_ctx(broker, 17, 1, session), SimpleNamespace(mechanism="PLAIN"))
    )
    assert hs["error_code"] == 0 and hs["mechanisms"] == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert session.sasl_mechanism == "PLAIN" and session.sasl_exchange is not None
    r = _run(
        sasl_handlers.handle_sasl_authenticate(
            _ctx(broker, 36, 2, session), SimpleNamespace(auth_bytes=b"\0alice\0alice-secret")
        )
    )
    assert r["error_code"] == 0 and r["session_lifetime"] == 0
    assert session.authenticated and session.principal == "User:alice" and not session.close_after_response


def test_second_handshake_during_exchange_is_illegal(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    session = ConnectionSession.for_listener("SASL_PLAINTEXT", "SASL_PLAINTEXT")
    for expected in (0, 34):
        hs = _run(
            sasl_handlers.handle_sasl_handshake(
                _ctx(broker, 17, 0, session), SimpleNamespace(mechanism="SCRAM-SHA-256")
            )
        )
        assert hs["error_code"] == expected
    assert session.close_after_response and session.sasl_exchange is None


def test_plain_wrong_password_fails_and_closes(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    session = ConnectionSession.for_listener("SASL_PLAINTEXT", "SASL_PLAINTEXT")
    _run(
        sasl_handlers.handle_sasl_handshake(_ctx(broker, 17, 1, session), SimpleNamespace(mechanism="PLAIN"))
    )
    r = _run(
        sasl_handlers.handle_sasl_authenticate(
            _ctx(broker, 36, 0, session), SimpleNamespace(auth_bytes=b"\0alice\0nope")
        )
    )
    assert r["error_code"] == 58 and "Invalid username or password" in r["error_message"]
    assert "session_lifetime" not in r
    assert not session.authenticated and session.close_after_response and session.sasl_exchange is None


def test_handshake_unsupported_mechanism(tmp_path: Path) -> None:
    broker = _broker(tmp_path, **{"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-256"})
    session = ConnectionSession.for_listener("SASL_PLAINTEXT", "SASL_PLAINTEXT")
    hs = _run(
        sasl_handlers.handle_sasl_handshake(_ctx(broker, 17, 1, session), SimpleNamespace(mechanism="PLAIN"))
    )
    assert hs["error_code"] == 33 and hs["mechanisms"] == ["SCRAM-SHA-256"]
    assert session.close_after_response


def test_sasl_on_plaintext_listener_is_illegal_state(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    session = ConnectionSession()
    hs = _run(
        sasl_handlers.handle_sasl_handshake(_ctx(broker, 17, 1, session), SimpleNamespace(mechanism="PLAIN"))
    )
    assert hs["error_code"] == 34
    r = _run(
        sasl_handlers.handle_sasl_authenticate(_ctx(broker, 36, 1, session), SimpleNamespace(auth_bytes=b""))
    )
    assert r["error_code"] == 34
    assert not session.close_after_response  # Kafka keeps a non-SASL connection


def test_sasl_authenticate_out_of_state(tmp_path: Path) -> None:
    """After a successful authentication SaslAuthenticate answers ILLEGAL_SASL_STATE and the
    connection stays; before any handshake it answers the same and the connection is closed."""
    broker = _broker(tmp_path)
    session = ConnectionSession.for_listener("SASL_PLAINTEXT", "SASL_PLAINTEXT")
    _run(
        sasl_handlers.handle_sasl_handshake(_ctx(broker, 17, 1, session), SimpleNamespace(mechanism="PLAIN"))
    )
    token = SimpleNamespace(auth_bytes=b"\0alice\0alice-secret")
    ok = _run(sasl_handlers.handle_sasl_authenticate(_ctx(broker, 36, 2, session), token))
    assert ok["error_code"] == 0
    again = _run(sasl_handlers.handle_sasl_authenticate(_ctx(broker, 36, 2, session), token))
    assert again["error_code"] == 34 and session.authenticated and not session.close_after_response
    fresh = ConnectionSession.for_listener("SASL_PLAINTEXT", "SASL_PLAINTEXT")
    early = _run(sasl_handlers.handle_sasl_authenticate(_ctx(broker, 36, 2, fresh), token))
    assert early["error_code"] == 34 and not fresh.authenticated and fresh.close_after_response


def _upsert(name: str, mech: int, password: str, iterations: int, salt: bytes = b"salt-salt-salt") -> Any:
    digest = {1: "sha256", 2: "sha512"}.get(mech, "sha256")
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, max(iterations, 1))
    return SimpleNamespace(
        name=name, mechanism=mech, iterations=iterations, salt=salt, salted_password=salted
    )


def test_alter_describe_scram_credentials_and_authenticate(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    alter = scram_handlers.handle_alter_user_scram_credentials
    describe = scram_handlers.handle_describe_user_scram_credentials
    s = ConnectionSession()
    req = SimpleNamespace(
        deletions=[SimpleNamespace(name="ghost", mechanism=1), SimpleNamespace(name="bad", mechanism=9)],
        upsertions=[
            _upsert("alice", 1, "alice-secret", 8192),
            _upsert("weak", 1, "x", 1000),
            _upsert("lavish", 2, "x", 16385),
            _upsert("short", 1, "x", 4096, salt=b"tiny"),  # Kafka takes any salt, even none
            _upsert("nosalt", 2, "x", 4096, salt=b""),
            _upsert("dup", 1, "x", 4096),
            _upsert("dup", 2, "y", 4096),  # Kafka 4: one change per user and request
            _upsert("", 1, "x", 4096),
        ],
    )
    r = _run(alter(_ctx(broker, 51, 0, s), req))
    codes = {x["user"]: (x["error_code"], x["error_message"]) for x in r["results"]}
    assert codes == {
        "ghost": (91, "Attempt to delete a user credential that does not exist"),
        "bad": (33, "Unknown SCRAM mechanism"),
        "alice": (0, None),
        "weak": (93, "Too few iterations"),
        "lavish": (93, "Too many iterations"),
        "short": (0, None),
        "nosalt": (0, None),
        "dup": (92, "A user credential cannot be altered twice in the same request"),
        "": (93, "Username must not be empty"),
    }
    assert CredentialStore(tmp_path).credentials("dup") == {}  # neither change applied
    # an empty salted password: Kafka fails deriving the keys (UNKNOWN_SERVER_ERROR, no message)
    empty = SimpleNamespace(name="empty", mechanism=1, iterations=4096, salt=b"s", salted_password=b"")
    r = _run(alter(_ctx(broker, 51, 0, s), SimpleNamespace(deletions=[], upsertions=[empty])))
    assert r["results"] == [{"user": "empty", "error_code": -1, "error_message": None}]
    r = _run(
        alter(
            _ctx(broker, 51, 0, s),
            SimpleNamespace(deletions=[], upsertions=[_upsert("alice", 2, "alice-secret", 4096)]),
        )
    )
    assert r["results"] == [{"user": "alice", "error_code": 0, "error_message": None}]
    d = _run(describe(_ctx(broker, 50, 0, s), SimpleNamespace(users=None)))
    assert [x["user"] for x in d["results"]] == ["alice", "nosalt", "short"]
    assert d["results"][0]["credential_infos"] == [
        {"mechanism": 1, "iterations": 8192},
        {"mechanism": 2, "iterations": 4096},
    ]
    d = _run(describe(_ctx(broker, 50, 0, s), SimpleNamespace(users=[SimpleNamespace(name="nobody")])))
    assert d["results"][0]["error_code"] == 91
    assert d["results"][0]["error_message"].endswith("credential that does not exist: nobody")
    twice = SimpleNamespace(users=[SimpleNamespace(name="alice"), SimpleNamespace(name="alice")])
    d = _run(describe(_ctx(broker, 50, 0, s), twice))
    assert [(x["error_code"], x["error_message"]) for x in d["results"]] == [
        (92, "Cannot describe SCRAM credentials for the same user twice in a single request: alice")
    ]
    # a fresh broker state (restart) reads the persisted credentials; SCRAM login works
    broker.sasl = SaslState(broker.config.values, broker.log_dir)
    session = ConnectionSession.for_listener("SASL_PLAINTEXT", "SASL_PLAINTEXT")
    _run(
        sasl_handlers.handle_sasl_handshake(
            _ctx(broker, 17, 1, session), SimpleNamespace(mechanism="SCRAM-SHA-256")
        )
    )
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "alice-secret")
    r1 = _run(
        sasl_handlers.handle_sasl_authenticate(
            _ctx(broker, 36, 2, session), SimpleNamespace(auth_bytes=client.get_client_first().encode())
        )
    )
    assert r1["error_code"] == 0, r1
    client.set_server_first(r1["auth_bytes"].decode())
    r2 = _run(
        sasl_handlers.handle_sasl_authenticate(
            _ctx(broker, 36, 2, session), SimpleNamespace(auth_bytes=client.get_client_final().encode())
        )
    )
    client.set_server_final(r2["auth_bytes"].decode())
    assert session.authenticated and session.principal == "User:alice"
    # deletion
    r = _run(
        alter(
            _ctx(broker, 51, 0, s),
            SimpleNamespace(deletions=[SimpleNamespace(name="alice", mechanism=1)], upsertions=[]),
        )
    )
    assert r["results"] == [{"user": "alice", "error_code": 0, "error_message": None}]
    assert CredentialStore(tmp_path).credentials("alice").keys() == {"SCRAM-SHA-512"}


# ------------------------------------------------------------------------------------ CLI
def test_cli_scram_changes() -> None:
    from strom.cli.commands import CommandError
    from strom.cli.configs import ConfigTarget, parse_config_list, scram_changes
    from strom.client import admin

    t = ConfigTarget("users", "alice")
    add = "SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=p=q]"
    ops = [(k, admin.SET, v) for k, v in parse_config_list(add)] + [("scram-sha-512", admin.DELETE, None)]
    ups, dels = scram_changes(t, ops[:2])
    assert dels == []
    assert ups == [("alice", "SCRAM-SHA-256", "alice-secret", 8192), ("alice", "SCRAM-SHA-512", "p=q", 4096)]
    assert scram_changes(t, ops[2:]) == ([], [("alice", "SCRAM-SHA-512")])
    for bad in ["SCRAM-SHA-256=[iterations=x,password=p]", "SCRAM-SHA-256=[iterations=8192]", "quota=1"]:
        with pytest.raises(CommandError):
            scram_changes(t, [(k, admin.SET, v) for k, v in parse_config_list(bad)])
    # the error names the fields, never the value (it holds the password)
    for bad in ["SCRAM-SHA-256=[iterations=8192,pasword=top-secret]", "SCRAM-SHA-256=[password=top,secret]"]:
        with pytest.raises(CommandError) as info:
            scram_changes(t, [(k, admin.SET, v) for k, v in parse_config_list(bad)])
        assert "secret" not in str(info.value) and "password=P" in str(info.value)
    with pytest.raises(CommandError, match="got fields: iterations, pasword"):
        scram_changes(t, [("SCRAM-SHA-256", admin.SET, "iterations=8192,pasword=top-secret")])
    with pytest.raises(CommandError):
        scram_changes(ConfigTarget("users", None), ops[:1])


# ------------------------------------------------------------------------------------ fuzz
_CRED = ScramCredential.from_password("SCRAM-SHA-256", "pw", 4096)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_jaas_parser_raises_only_config_error(text: str) -> None:
    with contextlib.suppress(ConfigError):
        parse_jaas_config(text)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=80),
        st.text(alphabet="nyp,=ar0123456789abc+/", max_size=60).map(str.encode),
        st.text(alphabet="c=biws,r=p0123456789+/=", max_size=60).map(
            lambda t: ("n,,n=alice,r=x" + t).encode()
        ),
    ),
    st.binary(max_size=60),
)
def test_scram_exchange_raises_only_authentication_error(first: bytes, final: bytes) -> None:
    ex = ScramExchange("SCRAM-SHA-256", lambda u: _CRED if u == "alice" else None)
    try:
        ex.evaluate(first)
        ex.evaluate(final)
        ex.evaluate(b"more")
    except SaslAuthenticationError:
        pass
    assert not ex.complete


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=60))
def test_plain_exchange_raises_only_authentication_error(token: bytes) -> None:
    ex = PlainExchange({"alice": "alice-secret"})
    try:
        ex.evaluate(token)
    except SaslAuthenticationError:
        assert not ex.complete


def test_jaas_from_server_properties_with_continuation_lines(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text(
        "listeners=SASL_PLAINTEXT://127.0.0.1:9094\n"
        "listener.name.sasl_plaintext.plain.sasl.jaas.config="
        "org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
        '    username="admin" \\\n'
        '    password="admin-secret" \\\n'
        '    user_admin="admin-secret" \\\n'
        '    user_alice="alice-secret";\n'
    )
    cfg = BrokerConfig.from_sources(props)
    users = SaslSettings.from_values(cfg.values).plain_users("SASL_PLAINTEXT")
    assert users == {"admin": "admin-secret", "alice": "alice-secret"}
