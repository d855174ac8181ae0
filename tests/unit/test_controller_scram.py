"""AlterUserScramCredentials on the QuorumController (Kafka's ScramControlManager): per-user
errors, the records, replay, snapshots and the image the brokers authenticate from."""

from __future__ import annotations

import hashlib
from typing import Any

from kio.schema.alter_user_scram_credentials.v0 import request as aus
from kio.static.primitive import i8, i32

from strom.controller import QuorumController
from strom.metadata.delta import MetadataDelta
from strom.metadata.image import MetadataImage, ScramKey
from strom.metadata.records import RemoveUserScramCredentialRecord, UserScramCredentialRecord
from strom.security.credentials import ImageCredentials
from strom.security.sasl import ScramExchange
from strom.security.scram_keys import salted_password
from strom.testing.controller import ControllerHarness

SHA256, SHA512 = 1, 2


def _up(
    name: str, password: str = "pw", mech: int = SHA256, iterations: int = 4096, salt: bytes = b"salt"
) -> Any:
    hash_name = "sha256" if mech == SHA256 else "sha512"
    salted = salted_password(hash_name, password, salt, iterations) if mech in (1, 2) else b"x"
    return aus.ScramCredentialUpsertion(
        name=name, mechanism=i8(mech), iterations=i32(iterations), salt=salt, salted_password=salted
    )


def _del(name: str, mech: int = SHA256) -> Any:
    return aus.ScramCredentialDeletion(name=name, mechanism=i8(mech))


def _alter(
    h: ControllerHarness, deletions: list[Any] | None = None, upsertions: list[Any] | None = None
) -> dict[str, int]:
    request = aus.AlterUserScramCredentialsRequest(
        deletions=tuple(deletions or ()), upsertions=tuple(upsertions or ())
    )
    result = h.controller.handle(51, request)
    response: dict[str, Any] = h.commit(result)
    return {r["user"]: r["error_code"] for r in response["results"]}


def _login(creds: ImageCredentials, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> bool:
    """A full RFC 5802 exchange against ``creds`` (the client side computed here)."""
    import base64
    import hmac

    from strom.security.sasl import SaslAuthenticationError
    from strom.security.scram_keys import scram_keys

    hash_name = "sha256" if mechanism == "SCRAM-SHA-256" else "sha512"
    ex = ScramExchange(mechanism, lambda u: creds.get(u, mechanism))
    bare = f"n={user},r=clientnonce"
    try:
        first = ex.evaluate(f"n,,{bare}".encode()).decode()
    except SaslAuthenticationError:
        return False
    attrs = dict(a.split("=", 1) for a in first.split(","))
    salt, iterations = base64.b64decode(attrs["s"]), int(attrs["i"])
    client_key, stored_key, _ = scram_keys(hash_name, salted_password(hash_name, password, salt, iterations))
    without_proof = f"c={base64.b64encode(b'n,,').decode()},r={attrs['r']}"
    auth = f"{bare},{first},{without_proof}".encode()
    sig = hmac.new(stored_key, auth, hash_name).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, sig, strict=True))
    try:
        ex.evaluate(f"{without_proof},p={base64.b64encode(proof).decode()}".encode())
    except SaslAuthenticationError:
        return False
    return ex.complete


def _image(h: ControllerHarness) -> MetadataImage:
    delta = MetadataDelta(MetadataImage())
    for record in h.log:
        delta.replay(record)
    return delta.apply()


def test_upsert_emits_a_record_with_derived_keys_and_logins_work_from_the_image() -> None:
    h = ControllerHarness()
    before = len(h.log)
    assert _alter(h, upsertions=[_up("alice", "secret"), _up("bob", "pw2", SHA512, 8192)]) == {
        "alice": 0,
        "bob": 0,
    }
    records = h.log[before:]
    assert [type(r) for r in records] == [UserScramCredentialRecord] * 2
    alice = records[0]
    assert (alice.name, alice.mechanism, alice.iterations, alice.salt) == ("alice", SHA256, 4096, b"salt")
    salted = salted_password("sha256", "secret", b"salt", 4096)
    assert alice.stored_key != salted and len(alice.stored_key) == hashlib.sha256().digest_size
    creds = ImageCredentials(_image(h).scram)
    assert _login(creds, "alice", "secret")
    assert not _login(creds, "alice", "wrong")
    assert _login(creds, "bob", "pw2", "SCRAM-SHA-512")
    assert not _login(creds, "bob", "pw2", "SCRAM-SHA-256")
    assert creds.users() == ["alice", "bob"]


def test_deletion_removes_and_unknown_deletion_is_resource_not_found() -> None:
    h = ControllerHarness()
    _alter(h, upsertions=[_up("alice")])
    assert _alter(h, deletions=[_del("alice", SHA512)]) == {"alice": 91}  # RESOURCE_NOT_FOUND
    assert _alter(h, deletions=[_del("ghost")]) == {"ghost": 91}
    before = len(h.log)
    assert _alter(h, deletions=[_del("alice")]) == {"alice": 0}
    assert h.log[before:] == [RemoveUserScramCredentialRecord(name="alice", mechanism=SHA256)]
    assert h.controller.scram.credentials == {}
    assert not _login(ImageCredentials(_image(h).scram), "alice", "pw")


def test_per_user_errors_as_kafka() -> None:
    h = ControllerHarness()
    _alter(h, upsertions=[_up("carol")])
    before = len(h.log)
    errors = _alter(
        h,
        deletions=[_del("carol"), _del("x", 9)],
        upsertions=[
            _up("carol", "new"),  # deleted and upserted in one request
            _up("dup"),
            _up("dup", mech=SHA512),  # the same user twice, even for another mechanism
            _up("few", iterations=4095),
            _up("many", iterations=16385),
            _up("", "pw"),
            _up("mech", mech=7),
            _up("ok"),
        ],
    )
    assert errors == {
        "carol": 92,  # DUPLICATE_RESOURCE
        "x": 33,  # UNSUPPORTED_SASL_MECHANISM
        "dup": 92,
        "few": 93,  # UNACCEPTABLE_CREDENTIAL
        "many": 93,
        "": 93,
        "mech": 33,
        "ok": 0,
    }
    # only the valid user's change was written; carol keeps her old credential
    assert [(type(r), r.name) for r in h.log[before:]] == [(UserScramCredentialRecord, "ok")]
    assert ScramKey(SHA256, "carol") in h.controller.scram.credentials
    assert _alter(h, upsertions=[_up("edge-lo", iterations=4096), _up("edge-hi", iterations=16384)]) == {
        "edge-lo": 0,
        "edge-hi": 0,
    }


def test_replay_and_snapshot_rebuild_the_credentials() -> None:
    h = ControllerHarness()
    _alter(h, upsertions=[_up("a"), _up("b", mech=SHA512)])
    _alter(h, upsertions=[_up("a", "changed", iterations=5000)])
    _alter(h, deletions=[_del("b", SHA512)], upsertions=[_up("c")])
    assert h.rebuilt().scram.credentials == h.controller.scram.credentials
    assert sorted(k.name for k in h.controller.scram.credentials) == ["a", "c"]
    assert h.controller.scram.credentials[ScramKey(SHA256, "a")].iterations == 5000
    fresh = QuorumController()
    snapshot = h.controller.snapshot_records()
    assert sum(isinstance(r, UserScramCredentialRecord) for r in snapshot) == 2
    for record in snapshot:
        fresh.replay(record)
    assert fresh.scram.credentials == h.controller.scram.credentials
    # the broker's image from the log equals the controller's state
    image = _image(h).scram
    assert dict(image.credentials) == h.controller.scram.credentials
    assert _login(ImageCredentials(image), "a", "changed")
    assert not _login(ImageCredentials(image), "a", "pw")


def test_alter_user_scram_credentials_is_a_controller_api_and_forwardable() -> None:
    from strom.controller.quorum_controller import CONTROLLER_APIS
    from strom.server.handlers.controller import FORWARDABLE

    assert 51 in CONTROLLER_APIS and 51 in FORWARDABLE
