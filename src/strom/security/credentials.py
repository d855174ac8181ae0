"""SCRAM credentials per user and mechanism, kept durably in the broker's data directory.

A credential is what RFC 5802 lets a server keep instead of a password: the salt, the iteration
count, ``StoredKey = H(HMAC(SaltedPassword, "Client Key"))`` and
``ServerKey = HMAC(SaltedPassword, "Server Key")``. Clients send ``SaltedPassword`` (computed
with their own salt) in AlterUserScramCredentials; the password itself never reaches the broker.

The store is one JSON file, ``strom-scram-credentials.json`` in the log directory, rewritten
atomically (:func:`strom.durable_file.replace_file`) with mode 0600 on every change, so after a
crash it holds the credentials before or after the change, never a mix.

Error contract: :class:`CredentialError` (with a Kafka error code) for a change Kafka refuses;
``OSError`` from the file system unchanged; ``ValueError`` for a corrupt store file at open.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..durable_file import replace_file
from ..metadata.image import ScramImage, ScramKey
from .scram_keys import SCRAM_MECHANISMS, salted_password, scram_keys

__all__ = [
    "MAX_ITERATIONS",
    "MIN_ITERATIONS",
    "SCRAM_MECHANISMS",
    "CredentialError",
    "CredentialStore",
    "ImageCredentials",
    "ScramCredential",
]

# iteration bounds as Kafka's ScramControlManager enforces them on alteration: the mechanism's
# minimum (4096 for both SCRAM-SHA-256 and SCRAM-SHA-512) and its MAX_ITERATIONS
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
FILE_NAME = "strom-scram-credentials.json"
FILE_MODE = 0o600  # owner only: the credentials are password equivalents for an offline attack

# Kafka error codes of the credential APIs
UNKNOWN_SERVER_ERROR = -1
RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92
UNACCEPTABLE_CREDENTIAL = 93
UNSUPPORTED_SASL_MECHANISM = 33


class CredentialError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def mechanism_name(wire_id: int) -> str | None:
    for name, (mid, _h) in SCRAM_MECHANISMS.items():
        if mid == wire_id:
            return name
    return None


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(
        cls, mechanism: str, salt: bytes, salted_password: bytes, iterations: int
    ) -> ScramCredential:
        _client_key, stored_key, server_key = scram_keys(SCRAM_MECHANISMS[mechanism][1], salted_password)
        return cls(salt, stored_key, server_key, iterations)

    @classmethod
    def from_password(
        cls, mechanism: str, password: str, iterations: int, salt: bytes | None = None
    ) -> ScramCredential:
        salt = salt if salt is not None else os.urandom(32)
        salted = salted_password(SCRAM_MECHANISMS[mechanism][1], password, salt, iterations)
        return cls.from_salted_password(mechanism, salt, salted, iterations)

    def to_json(self) -> dict[str, object]:
        def b64(b: bytes) -> str:
            return base64.b64encode(b).decode()

        return {
            "salt": b64(self.salt),
            "stored_key": b64(self.stored_key),
            "server_key": b64(self.server_key),
            "iterations": self.iterations,
        }

    @classmethod
    def from_json(cls, d: dict[str, object]) -> ScramCredential:
        def unb64(key: str) -> bytes:
            return base64.b64decode(str(d[key]), validate=True)

        iterations = d["iterations"]
        if not isinstance(iterations, int):
            raise ValueError("iterations is not an integer")
        return cls(unb64("salt"), unb64("stored_key"), unb64("server_key"), iterations)


def check_upsertion(user: str, mechanism: str | None, iterations: int, salt: bytes, salted: bytes) -> str:
    """The mechanism name of a valid upsertion; :class:`CredentialError` as a Kafka 4 controller
    answers (``ScramControlManager.validateUpsertion``, then ``finishUpsertion``):

    - an empty user -> UNACCEPTABLE_CREDENTIAL; an unknown mechanism -> UNSUPPORTED_SASL_MECHANISM;
    - iterations below the mechanism's minimum or above 16384 -> UNACCEPTABLE_CREDENTIAL;
    - any salt is taken, even an empty one (Kafka checks none, and SCRAM logins work with it);
    - an empty salted password cannot key the HMACs deriving StoredKey/ServerKey: Kafka's
      ``SecretKeySpec`` throws, which it answers as UNKNOWN_SERVER_ERROR without a message.
    """
    del salt  # Kafka validates nothing about it
    if not user:
        raise CredentialError(UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    if mechanism is None:
        raise CredentialError(UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    if iterations < MIN_ITERATIONS:
        raise CredentialError(UNACCEPTABLE_CREDENTIAL, "Too few iterations")
    if iterations > MAX_ITERATIONS:
        raise CredentialError(UNACCEPTABLE_CREDENTIAL, "Too many iterations")
    if not salted:
        raise CredentialError(UNKNOWN_SERVER_ERROR, "")
    return mechanism


class ImageCredentials:
    """The credentials of a metadata image (its ``ScramImage``, keyed by mechanism id), read as
    a :class:`CredentialStore` is: the broker's view on the metadata quorum. No image yet: none."""

    def __init__(self, image: ScramImage | None) -> None:
        self._creds = image.credentials if image is not None else {}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        if mechanism not in SCRAM_MECHANISMS:
            return None
        c = self._creds.get(ScramKey(SCRAM_MECHANISMS[mechanism][0], user))
        return None if c is None else ScramCredential(c.salt, c.stored_key, c.server_key, c.iterations)

    def users(self) -> list[str]:
        return sorted({k.name for k in self._creds})

    def credentials(self, user: str) -> dict[str, ScramCredential]:
        out = {}
        for m in SCRAM_MECHANISMS:
            c = self.get(user, m)
            if c is not None:
                out[m] = c
        return out


class CredentialStore:
    """``{user: {mechanism: ScramCredential}}`` backed by one file in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / FILE_NAME
        self._users: dict[str, dict[str, ScramCredential]] = {}
        # a store written by an older strom (or copied in), or the temporary file a crash left
        # behind, may be readable by others: owner only from now on
        for path in (self.path, self.path.with_name(FILE_NAME + ".tmp")):
            with contextlib.suppress(OSError):
                if os.stat(path).st_mode & 0o077:
                    os.chmod(path, FILE_MODE)
        if self.path.exists():
            try:
                doc = json.loads(self.path.read_text())
                for user, mechs in doc["users"].items():
                    self._users[str(user)] = {
                        str(m): ScramCredential.from_json(c)
                        for m, c in mechs.items()
                        if m in SCRAM_MECHANISMS
                    }
            except (KeyError, TypeError, AttributeError, ValueError) as e:
                raise ValueError(f"corrupt SCRAM credential store {self.path}: {e}") from e

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> list[str]:
        return sorted(u for u, m in self._users.items() if m)

    def credentials(self, user: str) -> dict[str, ScramCredential]:
        return dict(self._users.get(user, {}))

    def apply(
        self,
        upsertions: Iterable[tuple[str, str, ScramCredential]] = (),
        deletions: Iterable[tuple[str, str]] = (),
    ) -> None:
        """Apply every change, then persist once (deletions first, as their order in a request
        does not matter: Kafka refuses a user named twice for the same mechanism)."""
        users = {u: dict(m) for u, m in self._users.items()}
        for user, mech in deletions:
            users.get(user, {}).pop(mech, None)
        for user, mech, cred in upsertions:
            users.setdefault(user, {})[mech] = cred
        users = {u: m for u, m in users.items() if m}
        doc = {
            "version": 1,
            "users": {u: {m: c.to_json() for m, c in sorted(ms.items())} for u, ms in sorted(users.items())},
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        replace_file(self.path, json.dumps(doc, indent=1).encode(), mode=FILE_MODE)
        self._users = users
